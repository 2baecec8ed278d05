package events

// Child-process plumbing for the crash test, as in package actor's tests:
// the test binary re-executes itself with -test.run=^$ and
// NORN_TEST_CHILD_ROLE set; TestMain calls runChildRole first, which runs
// the role instead of the tests and exits. The parent reads the child's
// stdout lines and kills it with SIGKILL.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const childRoleEnv = "NORN_TEST_CHILD_ROLE"

// childRoles are the roles a child can play, by name. It is filled by
// init functions only, before any test runs.
var childRoles = map[string]func() int{}

// runChildRole runs the role named by the environment, if any, and exits.
func runChildRole() {
	role := os.Getenv(childRoleEnv)
	if role == "" {
		return
	}
	fn, ok := childRoles[role]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown child role %q\n", role)
		os.Exit(2)
	}
	// Never outlive the parent: its end closes our stdin.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	os.Exit(fn())
}

// childSay writes one line to the parent.
func childSay(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }

// childFail reports a fatal error of a child role; its result is the exit code.
func childFail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "child: "+format+"\n", args...)
	childSay("FAILED "+format, args...)
	return 1
}

// child is a running child process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // stdout lines; closed when the child exits
	stderr *lockedBuffer
	exited chan struct{}
}

// startChild re-executes the test binary in role; it is killed, if still
// running, when the test ends.
func startChild(t *testing.T, role string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), childRoleEnv+"="+role), env...)
	c := &child{cmd: cmd, lines: make(chan string, 64), stderr: &lockedBuffer{}, exited: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = c.stderr
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", role, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			default: // nobody listens for that many lines
			}
		}
		_ = cmd.Wait()
		close(c.lines)
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.kill(t)
		if t.Failed() {
			t.Logf("child %s stderr:\n%s", role, c.stderr.String())
		}
	})
	return c
}

// waitLine returns the first line starting with prefix.
func (c *child) waitLine(t *testing.T, prefix string, d time.Duration) string {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("child exited before saying %q; stderr:\n%s", prefix, c.stderr.String())
			}
			if strings.HasPrefix(l, "FAILED") {
				t.Fatalf("child: %s; stderr:\n%s", l, c.stderr.String())
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline.C:
			t.Fatalf("child did not say %q within %v; stderr:\n%s", prefix, d, c.stderr.String())
		}
	}
}

// kill sends SIGKILL and waits until the child is reaped.
func (c *child) kill(t *testing.T) {
	select {
	case <-c.exited:
		return
	default:
	}
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Logf("kill -9 child: %v", err)
	}
	<-c.exited
	_ = c.stdin.Close()
}

// lockedBuffer collects the child's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
