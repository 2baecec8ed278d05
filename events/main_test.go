package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
)

func TestMain(m *testing.M) {
	runChildRole() // crash_test.go: exits when NORN_TEST_CHILD_ROLE is set
	code := m.Run()
	testutil.StopPostgres()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// wait bounds every wait of a test.
const wait = 30 * time.Second

// view is what a workflow sees of an event through sdk-go's accessors.
// Extension values are written "type:value", so that a test tells an
// integer 10 from a string "10".
type view struct {
	SpecVersion, ID, Source, Type, Subject, DataContentType, DataSchema string
	Time                                                                time.Time
	Extensions                                                          map[string]string
	Data                                                                []byte
	TraceParent                                                         string
}

func viewOf(ctx *actor.Context, e Event[[]byte]) view {
	v := view{SpecVersion: e.SpecVersion(), ID: e.ID(), Source: e.Source(), Type: e.Type(), Subject: e.Subject(),
		DataContentType: e.DataContentType(), DataSchema: e.DataSchema(), Time: e.Time(), Data: e.Data,
		TraceParent: TraceParent(ctx), Extensions: map[string]string{}}
	for k, x := range e.Extensions() {
		v.Extensions[k] = fmt.Sprintf("%T:%v", x, x)
	}
	return v
}

// readerIn tells reader which type to read and how many events.
type readerIn struct {
	Type string
	N    int
}

// reader subscribes (competing) to a type and returns the next N events
// of it as the workflow saw them.
var reader = actor.Workflow("reader", func(ctx *actor.Context, in readerIn) ([]view, error) {
	if err := Subscribe(ctx, in.Type, mailbox.Competing); err != nil {
		return nil, err
	}
	var out []view
	for range in.N {
		e, err := Wait[[]byte](ctx, in.Type)
		if err != nil {
			return out, err
		}
		out = append(out, viewOf(ctx, e))
	}
	return out, nil
})

// node is a System on a fresh SQLite store with the ingress on a loopback
// server.
type node struct {
	sys    *actor.System
	url    string
	client *http.Client
}

func startNode(t *testing.T, cfg actor.Config, opts ...Option) *node {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = testutil.OpenSQLite(t, testutil.SQLitePath(t))
	}
	if cfg.Workflows == nil {
		cfg.Workflows = actor.Register(reader)
	}
	sys := testutil.StartNode(t, cfg)
	return serve(t, sys, opts...)
}

// serve mounts the ingress of sys on a loopback server, closed (with the
// client's idle connections) when the test ends.
func serve(t *testing.T, sys *actor.System, opts ...Option) *node {
	t.Helper()
	h, err := NewHandler(sys, append([]Option{WithLogger(testutil.Logger())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	tr := &http.Transport{}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	return &node{sys: sys, url: srv.URL, client: &http.Client{Transport: tr, Timeout: wait}}
}

// reply is an answer of the ingress.
type reply struct {
	status int
	header http.Header
	body   errorBody
	raw    string
}

// post sends body with the headers (name, value pairs).
func (n *node) post(t *testing.T, body []byte, headers ...string) reply {
	t.Helper()
	return n.do(t, http.MethodPost, body, headers...)
}

func (n *node) do(t *testing.T, method string, body []byte, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, n.url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := n.client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header, raw: string(b)}
	if resp.StatusCode != http.StatusAccepted {
		if err := json.Unmarshal(b, &r.body); err != nil {
			t.Fatalf("status %d with a body that is no JSON error: %q", resp.StatusCode, b)
		}
	}
	return r
}

// structured posts one event in structured mode.
func (n *node) structured(t *testing.T, ev string) reply {
	t.Helper()
	return n.post(t, []byte(ev), "Content-Type", "application/cloudevents+json")
}

// read spawns a reader for N events of typ and returns what it read.
func (n *node) read(t *testing.T, typ string, count int) []view {
	t.Helper()
	ctx := testutil.Ctx(t, wait)
	pid, err := actor.Spawn(ctx, n.sys, reader, readerIn{Type: typ, N: count})
	if err != nil {
		t.Fatal(err)
	}
	out, err := actor.Await(ctx, n.sys, reader, pid)
	if err != nil {
		t.Fatalf("reader of %d %s events: %v", count, typ, err)
	}
	return out
}

// waiting is how many messages wait on each channel (empty ones left out).
func waiting(t *testing.T, sys *actor.System) map[string]int {
	t.Helper()
	stats, err := sys.ChannelStats(testutil.Ctx(t, wait))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, s := range stats {
		if s.Waiting > 0 {
			out[s.Channel] = s.Waiting
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// testConfig is the node configuration of most tests.
func testConfig() actor.Config { return actor.Config{} }
