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

// childRoleEnv selects the role a re-executed test binary plays.
const childRoleEnv = "NORN_TEST_CHILD_ROLE"

var childRoles = map[string]func() int{}

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
// exits with its code; without NORN_TEST_CHILD_ROLE it returns at once.
// TestMain calls it before anything else.
func runChildRole() {
	role := os.Getenv(childRoleEnv)
	if role == "" {
		return
	}
	fn, found := childRoles[role]
	if !found {
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

// childSay writes one progress line to the parent (child side).
func childSay(format string, args ...any) {
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

// childFail reports a fatal error in a child role and returns its exit code.
func childFail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "child: "+format+"\n", args...)
	childSay("FAILED "+format, args...)
	return 1
}

// childProc is a running child process.
type childProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // stdout, one line at a time; closed when the child exits
	stderr *syncBuffer
	exited chan struct{} // closed once the child is reaped
}

// startChild re-executes the test binary in role with the extra environment
// (KEY=value). The child is killed, if still running, when the test ends, and
// its stderr is logged if the test failed.
func startChild(t *testing.T, role string, env ...string) *childProc {
	t.Helper()
	if _, ok := childRoles[role]; !ok {
		t.Fatalf("no child role %q", role)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), childRoleEnv+"="+role), env...)
	c := &childProc{cmd: cmd, lines: make(chan string, 1024), stderr: &syncBuffer{}, exited: make(chan struct{})}
	lw := &lineWriter{out: c.lines}
	cmd.Stdout = lw
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
		c.kill9(t)
		if t.Failed() {
			t.Logf("child %s stderr:\n%s", role, c.stderr.String())
		}
	})
	return c
}

// pid is the child's process ID.
func (c *childProc) pid() int { return c.cmd.Process.Pid }

// waitLine returns the first stdout line starting with prefix, failing the
// test if the child says FAILED, exits, or d passes first.
func (c *childProc) waitLine(t *testing.T, prefix string, d time.Duration) string {
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

// kill9 sends SIGKILL and waits until the child is reaped (no-op once it is).
func (c *childProc) kill9(t *testing.T) {
	select {
	case <-c.exited:
		return
	default:
	}
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Logf("kill -9 child %d: %v", c.pid(), err)
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
