package actor_test

// Child-process plumbing for crash tests (a crash test needs a
// second process). The test binary re-executes itself with -test.run=^$ and
// NORN_TEST_CHILD_ROLE set; TestMain calls runChildRole first (before goleak),
// which runs the registered role instead of the tests and exits. The parent talks to the child through
// environment variables (input), stdout lines (progress) and kill -9.
//
// Use:
//
//	func init() { registerChildRole("my-role", func() int { ...; childSay("READY"); select {} }) }
//	c := startChild(t, "my-role", "NORN_CHILD_DB="+path)
//	c.waitLine(t, "READY", time.Minute)
//	c.kill9(t)

import (
	"bufio"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/internal/testutil"
)

var childRoles = map[string]func() int{}

// crashStores make, for a crash test on each driver, a fresh store URL that
// a child process and the test open alike.
var crashStores = map[string]func(t *testing.T) string{
	"sqlite":   func(t *testing.T) string { return "sqlite://" + testutil.SQLitePath(t) },
	"postgres": func(t *testing.T) string { return testutil.PostgresURL(t) },
}

// registerChildRole makes fn runnable as a child role; call it from init.
// fn runs instead of the tests, in a process of its own; its result is the
// exit code. A role that should run until killed can block forever: the
// child also exits when its stdin closes (the parent went away).
func registerChildRole(name string, fn func() int) {
	if _, dup := childRoles[name]; dup {
		panic("child role registered twice: " + name)
	}
	childRoles[name] = fn
}

// runChildRole runs the child role named by the environment, if any, and
// exits with its code; TestMain calls it before anything else.
func runChildRole() { testutil.RunChildRole(childRoles) }

// childSay writes one progress line to the parent (child side).
func childSay(format string, args ...any) { testutil.ChildSay(format, args...) }

// childFail reports a fatal error in a child role and returns its exit code.
func childFail(format string, args ...any) int { return testutil.ChildFail(format, args...) }

// childProc is a running child process.
type childProc struct{ *testutil.Child }

// startChild re-executes the test binary in a registered role (see
// testutil.StartChild).
func startChild(t *testing.T, role string, env ...string) *childProc {
	t.Helper()
	if _, ok := childRoles[role]; !ok {
		t.Fatalf("no child role %q", role)
	}
	return &childProc{testutil.StartChild(t, role, env...)}
}

func (c *childProc) waitLine(t *testing.T, prefix string, d time.Duration) string {
	t.Helper()
	return c.WaitLine(t, prefix, d)
}

func (c *childProc) kill9(t *testing.T) { c.Kill9(t) }

// readLines reads a text file as lines (missing file: none).
func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
