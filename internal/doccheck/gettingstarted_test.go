//go:build unix

package doccheck

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestGettingStarted runs docs/getting-started.md: its shell blocks in
// order, in one temporary directory, with the Go blocks written to the
// files their "file:" notes name when the guide reaches them. Blocks noted
// "background: TEXT" keep running, as in a second terminal; the guide goes
// on once they print TEXT. An "output" text block's lines must all appear
// in what the command before it printed.
//
// It works offline, with this checkout as the library: the shell's go
// command is wrapped so that "go mod tidy" first points the module at the
// checkout (a replace directive) and then tidies with -e, which skips the
// modules only the tests of dependencies need (they are not in the module
// cache); the module proxy and checksum database are off, so everything
// else comes from the module cache that building this repository filled.
func TestGettingStarted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module and the norn command")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash")
	}
	t.Parallel()
	repo, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	sh := &guideShell{t: t, repo: repo, dir: t.TempDir()}
	sh.env = append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod", "NORN_STORE=")
	d := readDoc(t, filepath.Join("docs", "getting-started.md"))

	var last string // the output of the last foreground block
	var bg []*background
	files, runs := 0, 0
	for _, b := range d.Blocks {
		switch {
		case strings.HasPrefix(b.Note, "file:"):
			name := strings.TrimSpace(strings.TrimPrefix(b.Note, "file:"))
			if err := os.WriteFile(filepath.Join(sh.cwd(), name), []byte(b.Text), 0o644); err != nil {
				t.Fatal(err)
			}
			files++
		case b.Lang == "text" && b.Note == "output":
			for _, l := range strings.Split(strings.TrimSpace(b.Text), "\n") {
				if !strings.Contains(last, l) {
					t.Errorf("getting-started.md:%d: the output of the command before has no line %q; it was:\n%s", b.Line, l, last)
				}
			}
		case b.Lang == "sh" && strings.HasPrefix(b.Note, "background:"):
			wait := strings.TrimSpace(strings.TrimPrefix(b.Note, "background:"))
			p := sh.start(b, wait)
			bg = append(bg, p)
			last = p.out()
			runs++
		case b.Lang == "sh":
			last = sh.run(b)
			runs++
			// After the send, the program in the first terminal ends.
			if strings.Contains(b.Text, "norn send") {
				bg[0].wait(t, "bob@example.com confirmed via norn send")
			}
		}
	}
	if files != 3 || runs < 6 || len(bg) != 2 {
		t.Fatalf("ran %d blocks, wrote %d files, started %d in the background: the guide changed, change this test too", runs, files, len(bg))
	}

	// The viewer, started last, serves Bob's instance with its result.
	m := regexp.MustCompile(`viewer on (http://\S+/) `).FindStringSubmatch(bg[1].out())
	if m == nil {
		t.Fatalf("the viewer printed no address:\n%s", bg[1].out())
	}
	resp, err := http.Get(m[1] + "instances/signup-bob")
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "confirmed via norn send") {
		t.Errorf("viewer: %s, page without Bob's result:\n%.2000s", resp.Status, page)
	}
	bg[1].interrupt(t)
}

// guideShell runs the guide's commands in bash, keeping the working
// directory and the exported variables from one block to the next.
type guideShell struct {
	t    *testing.T
	repo string
	dir  string   // the directory the guide starts in
	wd   string   // the working directory the last block ended in
	env  []string // the process environment, with the guide's exports
}

func (s *guideShell) cwd() string {
	if s.wd == "" {
		return s.dir
	}
	return s.wd
}

// exportRE finds the guide's "export NAME=VALUE" lines.
var exportRE = regexp.MustCompile(`(?m)^export ([A-Z_]+)=(\S*)$`)

// command makes the bash command for a block; it writes the directory the
// block ends in to pwdFile.
func (s *guideShell) command(ctx context.Context, b Block, pwdFile string) *exec.Cmd {
	script := fmt.Sprintf(`set -eu
go() {
	if [ "$#" -ge 2 ] && [ "$1" = mod ] && [ "$2" = tidy ]; then
		command go mod edit -replace=github.com/nornlabs/norn=%q
		shift 2
		command go mod tidy -e "$@"
	else
		command go "$@"
	fi
}
cd %q
%s
pwd >%q
`, s.repo, s.cwd(), b.Text, pwdFile)
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Env = s.env
	// Its own process group, so that go run's child goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	for _, m := range exportRE.FindAllStringSubmatch(b.Text, -1) {
		s.env = append(s.env, m[1]+"="+m[2])
	}
	return cmd
}

// run runs a block to its end and returns its output.
func (s *guideShell) run(b Block) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pwdFile := filepath.Join(s.t.TempDir(), "pwd")
	cmd := s.command(ctx, b, pwdFile)
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("getting-started.md:%d:\n%s\nfailed: %v\n%s", b.Line, b.Text, err, out)
	}
	wd, err := os.ReadFile(pwdFile)
	if err != nil {
		s.t.Fatal(err)
	}
	s.wd = strings.TrimSpace(string(wd))
	return string(out)
}

// background is a block left running.
type background struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	buf  strings.Builder
	line chan struct{} // signalled at every line
	done chan struct{} // closed when it ended, err set
	err  error
}

// start starts a block and returns once it printed a line containing wait.
func (s *guideShell) start(b Block, wait string) *background {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	// The viewer's port 8080 may be taken where the test runs.
	b.Text = strings.Replace(b.Text, "norn viewer", "norn viewer --addr 127.0.0.1:0", 1)
	cmd := s.command(ctx, b, filepath.Join(s.t.TempDir(), "pwd"))
	p := &background{cmd: cmd, line: make(chan struct{}, 1), done: make(chan struct{})}
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		cancel()
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		cancel()
		<-p.done
	})
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		_ = w.Close()
		exited <- err
	}()
	// done is closed only once every line is read, so that a block that
	// ended has all its output in buf.
	go func() {
		defer close(p.done)
		defer func() {
			err := <-exited
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
		}()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.buf.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.line <- struct{}{}:
			default:
			}
		}
	}()
	p.wait(s.t, wait)
	return p
}

func (p *background) out() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.String()
}

// wait returns once the block printed text, and fails if it ended first.
func (p *background) wait(t *testing.T, text string) {
	t.Helper()
	deadline := time.NewTimer(5 * time.Minute)
	defer deadline.Stop()
	for !strings.Contains(p.out(), text) {
		select {
		case <-p.line:
		case <-p.done:
			if strings.Contains(p.out(), text) {
				return
			}
			t.Fatalf("the block ended (%v) without printing %q:\n%s", p.exitErr(), text, p.out())
		case <-deadline.C:
			t.Fatalf("no %q after 5 minutes:\n%s", text, p.out())
		}
	}
}

// interrupt sends Ctrl-C to the block and checks that it ends cleanly.
func (p *background) interrupt(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-p.done
	if err := p.exitErr(); err != nil {
		t.Errorf("after Ctrl-C: %v\n%s", err, p.out())
	}
}

func (p *background) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
