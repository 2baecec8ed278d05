package testutil

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// ownProcessEnv names the one test a re-executed test binary runs as its
// own process.
const ownProcessEnv = "NORN_TEST_OWN_PROCESS"

// InOwnProcess runs the calling test (or subtest) alone in a new process
// of the test binary and reports true in the parent, which then returns at
// once; in that child it reports false and the test runs. For a subtest
// the child runs its parent test's body too, up to the subtest. The parent
// fails with the child's output if the child fails, including on a data
// race the child's race detector found, and skips if the child skipped.
//
// A test calls it first when it does what may only happen once per
// process: protoactor's remote endpoint sets gRPC's process-wide logger
// without synchronisation each time one starts, so every test that starts
// an endpoint in the test process would race with the gRPC goroutines
// still ending from the test before it.
//
//	func TestJoin(t *testing.T) {
//		if testutil.InOwnProcess(t) {
//			return
//		}
//		// ... start a cluster member in this process ...
//	}
func InOwnProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(ownProcessEnv) == t.Name() {
		return false
	}
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	args := []string{"-test.run=" + strings.Join(parts, "/"), "-test.count=1", "-test.v"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		// Leave the parent time to report the child's output.
		ctx, cancel = context.WithDeadline(ctx, d.Add(-5*time.Second))
		defer cancel()
		args = append(args, "-test.timeout="+time.Until(d).String())
	}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), ownProcessEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in its own process: %v\n%s", t.Name(), err, out)
	}
	if strings.Contains(string(out), "--- SKIP: "+t.Name()+" ") {
		t.Skipf("%s in its own process skipped:\n%s", t.Name(), out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()+" ") {
		// A child that ran no test (a renamed test, a bad pattern) passes
		// silently; that must not pass here.
		t.Fatalf("%s in its own process did not run and pass:\n%s", t.Name(), out)
	}
	if testing.Verbose() {
		t.Logf("%s in its own process:\n%s", t.Name(), out)
	}
	return true
}
