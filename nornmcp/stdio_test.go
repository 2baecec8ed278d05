package nornmcp_test

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/nornmcp"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
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

type report struct {
	Status string `json:"status"`
	Done   bool   `json:"done"`
	Error  string `json:"error"`
	Output *struct {
		Topic    string   `json:"topic"`
		Sections []string `json:"sections"`
		Words    int      `json:"words"`
	} `json:"output"`
}

// TestStdioExample builds examples/mcp and drives it as an MCP client
// launches a server: a subprocess spoken to over its stdin and stdout.
func TestStdioExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds examples/mcp")
	}
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "norn-mcp")
	build := exec.CommandContext(testutil.Ctx(t, 5*time.Minute), "go", "build", "-o", bin, "../examples/mcp")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ../examples/mcp: %v\n%s", err, out)
	}
	store := "sqlite://" + filepath.Join(dir, "norn.db")

	// connect starts the server; stop closes the session (the client
	// closes the server's stdin) and checks that the server exited 0.
	connect := func(args ...string) (cs *mcp.ClientSession, stop func()) {
		cmd := exec.Command(bin, append([]string{"-store", store}, args...)...)
		cmd.Dir = dir
		stderr := &lockedBuffer{}
		cmd.Stderr = stderr
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
			Connect(testutil.Ctx(t, 30*time.Second), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect to %s: %v\n%s", bin, err, stderr)
		}
		return cs, func() {
			t.Helper()
			if err := cs.Close(); err != nil {
				t.Errorf("close: %v\n%s", err, stderr)
			}
			if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
				t.Errorf("server did not exit cleanly: %v\n%s", cmd.ProcessState, stderr)
			}
			if !strings.Contains(stderr.String(), "serving MCP on stdin/stdout") {
				t.Errorf("server's stderr lacks its start line:\n%s", stderr)
			}
		}
	}

	cs, stop := connect()
	tools, err := cs.ListTools(testutil.Ctx(t, 10*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, " ") != "report_cancel report_result report_start report_status" {
		t.Fatalf("tools: %v", names)
	}

	st := call[nornmcp.Started](t, cs, "report_start", map[string]any{"id": "r-1", "input": map[string]any{"topic": "tides", "sections": 2}})
	if st.ID != "r-1" || st.Existed {
		t.Fatalf("start r-1: %+v", st)
	}
	if st = call[nornmcp.Started](t, cs, "report_start", map[string]any{"id": "r-1", "input": map[string]any{"topic": "tides", "sections": 2}}); !st.Existed {
		t.Fatalf("second start of r-1: %+v, want existed", st)
	}
	r := call[report](t, cs, "report_result", map[string]any{"id": "r-1", "wait_seconds": 30})
	if r.Status != "completed" || r.Output == nil || len(r.Output.Sections) != 2 || r.Output.Words == 0 {
		t.Fatalf("result of r-1: %+v", r)
	}

	// A long one (ten minutes between sections) is cancelled.
	call[nornmcp.Started](t, cs, "report_start", map[string]any{"id": "r-2", "input": map[string]any{"topic": "moons", "sections": 3, "pause_seconds": 600}})
	if s := call[nornmcp.Status](t, cs, "report_status", map[string]any{"id": "r-2"}); s.Done {
		t.Fatalf("status of r-2: %+v, want not done", s)
	}
	if c := call[nornmcp.Cancelled](t, cs, "report_cancel", map[string]any{"id": "r-2", "reason": "too slow"}); !c.Requested {
		t.Fatalf("cancel r-2: %+v", c)
	}
	if r := call[report](t, cs, "report_result", map[string]any{"id": "r-2", "wait_seconds": 30}); r.Status != "cancelled" || !strings.Contains(r.Error, "too slow") {
		t.Fatalf("result of r-2: %+v", r)
	}
	if msg := callErr(t, cs, "report_start", map[string]any{"input": map[string]any{"topic": "x", "sections": "two"}}); !strings.Contains(msg, "sections") {
		t.Fatalf("bad input: %q", msg)
	}

	// One that pauses a second between sections outlives its server: the
	// next server (on the same store) carries it on and
	// answers for it.
	call[nornmcp.Started](t, cs, "report_start", map[string]any{"id": "r-3", "input": map[string]any{"topic": "comets", "sections": 2, "pause_seconds": 1}})
	stop()

	cs, stop = connect()
	defer stop()
	r = call[report](t, cs, "report_result", map[string]any{"id": "r-3", "wait_seconds": 30})
	if r.Status != "completed" || r.Output == nil || r.Output.Topic != "comets" || len(r.Output.Sections) != 2 {
		t.Fatalf("result of r-3 after a restart: %+v", r)
	}
	if r := call[report](t, cs, "report_result", map[string]any{"id": "r-1", "wait_seconds": 0}); r.Status != "completed" {
		t.Fatalf("r-1 after a restart: %+v", r)
	}
}
