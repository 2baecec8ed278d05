package events

// Child-process plumbing for the crash test, as in package actor's tests:
// the test binary re-executes itself with -test.run=^$ and
// NORN_TEST_CHILD_ROLE set; TestMain calls runChildRole first, which runs
// the role instead of the tests and exits. The parent reads the child's
// stdout lines and kills it with SIGKILL.

import (
	"testing"
	"time"

	"github.com/nornlabs/norn/internal/testutil"
)

// childRoles are the roles a child can play, by name. It is filled by
// init functions only, before any test runs.
var childRoles = map[string]func() int{}

// runChildRole runs the role named by the environment, if any, and exits.
func runChildRole() { testutil.RunChildRole(childRoles) }

// childSay writes one line to the parent.
func childSay(format string, args ...any) { testutil.ChildSay(format, args...) }

// childFail reports a fatal error of a child role; its result is the exit code.
func childFail(format string, args ...any) int { return testutil.ChildFail(format, args...) }

// child is a running child process.
type child struct{ *testutil.Child }

// startChild re-executes the test binary in role; it is killed, if still
// running, when the test ends.
func startChild(t *testing.T, role string, env ...string) *child {
	t.Helper()
	return &child{testutil.StartChild(t, role, env...)}
}

func (c *child) waitLine(t *testing.T, prefix string, d time.Duration) string {
	t.Helper()
	return c.WaitLine(t, prefix, d)
}

func (c *child) kill(t *testing.T) { c.Kill9(t) }
