package testutil

import (
	"bytes"
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

// ChildRoleEnv selects the role a re-executed test binary plays.
const ChildRoleEnv = "NORN_TEST_CHILD_ROLE"

// RunChildRole runs the role named by the environment, if any, from roles
// and exits with its code; without NORN_TEST_CHILD_ROLE it returns at once.
// A package's TestMain calls it before anything else. The child also exits
// when its stdin closes (the parent went away), so a role that should run
// until killed can block forever.
func RunChildRole(roles map[string]func() int) {
	role := os.Getenv(ChildRoleEnv)
	if role == "" {
		return
	}
	fn, found := roles[role]
	if !found {
		fmt.Fprintf(os.Stderr, "unknown child role %q\n", role)
		os.Exit(2)
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	os.Exit(fn())
}

// ChildSay writes one progress line to the parent (child side).
func ChildSay(format string, args ...any) {
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

// ChildFail reports a fatal error in a child role and returns its exit code.
func ChildFail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "child: "+format+"\n", args...)
	ChildSay("FAILED "+format, args...)
	return 1
}

// Child is a running child process: the test binary re-executed in a role,
// so that a crash test can kill -9 a real process without a build step.
type Child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // stdout, one line at a time; closed when the child exits
	stderr *syncBuffer
	exited chan struct{} // closed once the child is reaped
}

// StartChild re-executes the test binary in role with the extra environment
// (KEY=value). The child is killed, if still running, when the test ends,
// and its stderr is logged if the test failed.
func StartChild(t testing.TB, role string, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), ChildRoleEnv+"="+role), env...)
	c := &Child{cmd: cmd, lines: make(chan string, 1024), stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout = &lineWriter{out: c.lines}
	cmd.Stderr = c.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.stdin = stdin
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", role, err)
	}
	go func() {
		_ = cmd.Wait() // returns after stdout and stderr are copied
		close(c.lines)
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.Kill9(t)
		if t.Failed() {
			t.Logf("child %s stderr:\n%s", role, c.stderr.String())
		}
	})
	return c
}

// Pid is the child's process ID.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Stderr is what the child wrote to stderr so far.
func (c *Child) Stderr() string { return c.stderr.String() }

// Exited is closed once the child has been reaped.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// WaitLine returns the first stdout line starting with prefix, failing the
// test if the child says FAILED, exits, or d passes first.
func (c *Child) WaitLine(t testing.TB, prefix string, d time.Duration) string {
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

// Lines is the child's stdout, one line at a time, closed when the child
// exits. Reading it competes with WaitLine; a test uses one or the other.
func (c *Child) Lines() <-chan string { return c.lines }

// Signal sends sig to the child (SIGTERM for a graceful stop, say).
func (c *Child) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal child %d: %v", c.Pid(), err)
	}
}

// Kill9 sends SIGKILL and waits until the child is reaped (no-op once it is).
func (c *Child) Kill9(t testing.TB) {
	select {
	case <-c.exited:
		return
	default:
	}
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Logf("kill -9 child %d: %v", c.Pid(), err)
	}
	<-c.exited
	_ = c.stdin.Close()
}

// lineWriter turns the child's stdout into lines on a channel.
type lineWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	out chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		i := bytes.IndexByte(w.buf.Bytes(), '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(w.buf.Next(i + 1))
		select {
		case w.out <- strings.TrimRight(line, "\r\n"):
		default: // nobody is listening for that many lines
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the exec copier and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
