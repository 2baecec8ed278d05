package nornmcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/nornmcp"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Brief is the test workflow's input: it writes a summary (an activity),
// then waits for a Go message, so that a test decides when it ends.
type Brief struct {
	Topic string `json:"topic" jsonschema:"what to summarise"`
	Pages int    `json:"pages"`
	Fail  bool   `json:"fail,omitempty"`
}

type Summary struct {
	Text  string `json:"text"`
	Pages int    `json:"pages"`
}

type Go struct{ Note string }

var summarise = actor.Activity("summarise", func(_ context.Context, b Brief) (string, error) {
	return "summary of " + b.Topic, nil
})

var briefFlow = actor.Workflow("brief", func(ctx *actor.Context, b Brief) (Summary, error) {
	text, err := summarise.Run(ctx, b)
	if err != nil {
		return Summary{}, err
	}
	g, err := actor.Receive[Go](ctx)
	if err != nil {
		return Summary{}, err
	}
	if b.Fail {
		return Summary{}, errors.New("asked to fail: " + g.Value.Note)
	}
	return Summary{Text: text + " " + g.Value.Note, Pages: b.Pages}, nil
})

// echoFlow takes a bare string: its start tool's input is a string.
var echoFlow = actor.Workflow("echo", func(_ *actor.Context, s string) (string, error) { return s, nil })

// fixture is a node on a fresh SQLite file and an SDK client connected to
// its MCP server in process.
type fixture struct {
	sys *actor.System
	srv *nornmcp.Server
	cs  *mcp.ClientSession
}

func startNode(t *testing.T) *actor.System {
	t.Helper()
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	return testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(briefFlow, echoFlow)})
}

func newServer(t *testing.T, sys *actor.System) *nornmcp.Server {
	t.Helper()
	srv, err := nornmcp.New(nornmcp.Options{
		System: sys,
		Workflows: []nornmcp.Workflow{
			nornmcp.Tool(briefFlow, nornmcp.ToolOptions{Description: "Summarises a topic."}),
			nornmcp.Tool(echoFlow, nornmcp.ToolOptions{Name: "say"}),
		},
		MaxWait: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	sys := startNode(t)
	srv := newServer(t, sys)
	ctx := testutil.Ctx(t, 30*time.Second)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the node's: cleanups run last first, so the
	// sessions close before the node stops.
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return &fixture{sys: sys, srv: srv, cs: cs}
}

// call calls a tool that must succeed and decodes its structured result.
func call[T any](t *testing.T, cs *mcp.ClientSession, tool string, args any) T {
	t.Helper()
	res := callRaw(t, cs, tool, args)
	if res.IsError {
		t.Fatalf("%s: tool error: %s", tool, text(res))
	}
	var out T
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: structured result %s: %v", tool, b, err)
	}
	return out
}

// callErr calls a tool that must fail and returns the error's text.
func callErr(t *testing.T, cs *mcp.ClientSession, tool string, args any) string {
	t.Helper()
	res := callRaw(t, cs, tool, args)
	if !res.IsError {
		t.Fatalf("%s(%v): succeeded, want a tool error; result %s", tool, args, text(res))
	}
	return text(res)
}

func callRaw(t *testing.T, cs *mcp.ClientSession, tool string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(testutil.Ctx(t, 60*time.Second), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

type result struct {
	ID       string   `json:"id"`
	Workflow string   `json:"workflow"`
	Status   string   `json:"status"`
	Done     bool     `json:"done"`
	Output   *Summary `json:"output"`
	Error    string   `json:"error"`
}

func TestToolsListedWithSchemas(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	res, err := f.cs.ListTools(testutil.Ctx(t, 10*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		tools[tl.Name] = tl
	}
	for _, name := range []string{"brief_start", "brief_status", "brief_result", "brief_cancel",
		"say_start", "say_status", "say_result", "say_cancel"} {
		if tools[name] == nil {
			t.Fatalf("no tool %s; have %v", name, keys(tools))
		}
	}
	if len(tools) != 8 {
		t.Errorf("%d tools, want 8: %v", len(tools), keys(tools))
	}
	start := schema(t, tools["brief_start"].InputSchema)
	input := start["properties"].(map[string]any)["input"].(map[string]any)
	props := input["properties"].(map[string]any)
	if props["topic"].(map[string]any)["type"] != "string" || props["pages"].(map[string]any)["type"] != "integer" {
		t.Errorf("brief_start input schema does not follow Brief: %v", input)
	}
	if d := props["topic"].(map[string]any)["description"]; d != "what to summarise" {
		t.Errorf("topic's description is %v, want the jsonschema tag", d)
	}
	if !strings.HasPrefix(tools["brief_start"].Description, "Summarises a topic.") {
		t.Errorf("brief_start description %q does not start with ToolOptions.Description", tools["brief_start"].Description)
	}
	say := schema(t, tools["say_start"].InputSchema)
	if ty := say["properties"].(map[string]any)["input"].(map[string]any)["type"]; ty != "string" {
		t.Errorf("say_start input type is %v, want string", ty)
	}
	out := schema(t, tools["brief_result"].OutputSchema)
	output := out["properties"].(map[string]any)["output"].(map[string]any)
	if _, ok := output["properties"].(map[string]any)["text"]; !ok {
		t.Errorf("brief_result output schema does not follow Summary: %v", output)
	}
	wait := schema(t, tools["brief_result"].InputSchema)["properties"].(map[string]any)["wait_seconds"].(map[string]any)
	if wait["maximum"] != 30.0 || wait["default"] != 10.0 {
		t.Errorf("wait_seconds schema %v, want maximum 30 (Options.MaxWait) and default 10", wait)
	}
	if a := tools["brief_status"].Annotations; a == nil || !a.ReadOnlyHint {
		t.Errorf("brief_status is not marked read-only: %+v", a)
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func schema(t *testing.T, s any) map[string]any {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestStartStatusResult(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testutil.Ctx(t, 30*time.Second)

	first := call[nornmcp.Started](t, f.cs, "brief_start", map[string]any{"id": "job-1", "input": Brief{Topic: "tides", Pages: 3}})
	if first.ID != "job-1" || first.Existed || first.Workflow != "brief" {
		t.Fatalf("first start: %+v", first)
	}
	// A retry (even with other input) finds the instance and starts
	// nothing.
	again := call[nornmcp.Started](t, f.cs, "brief_start", map[string]any{"id": "job-1", "input": Brief{Topic: "moons", Pages: 9}})
	if again.ID != "job-1" || !again.Existed {
		t.Fatalf("second start of job-1: %+v, want the existing instance", again)
	}
	inst, err := f.sys.Instance(ctx, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	var in Brief
	if err := json.Unmarshal(inst.Input, &in); err != nil || in.Topic != "tides" {
		t.Fatalf("job-1's input is %s (%v), want the first start's", inst.Input, err)
	}
	if n := count(t, f.sys, "brief"); n != 1 {
		t.Fatalf("%d brief instances, want 1", n)
	}

	st := call[nornmcp.Status](t, f.cs, "brief_status", map[string]any{"id": "job-1"})
	if st.Done || (st.Status != "running" && st.Status != "waiting") || st.CreatedAt.IsZero() {
		t.Fatalf("status of job-1: %+v, want running or waiting", st)
	}
	// It waits for a Go message: a result without waiting says so.
	r := call[result](t, f.cs, "brief_result", map[string]any{"id": "job-1", "wait_seconds": 0})
	if r.Done || r.Output != nil {
		t.Fatalf("result before Go: %+v, want not done", r)
	}

	// A result call waiting while the instance ends returns the output.
	got := make(chan result, 1)
	go func() {
		res, err := f.cs.CallTool(ctx, &mcp.CallToolParams{Name: "brief_result", Arguments: map[string]any{"id": "job-1", "wait_seconds": 30}})
		if err != nil || res.IsError {
			got <- result{Error: fmt.Sprint(err, res)}
			return
		}
		var out result
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &out)
		got <- out
	}()
	if err := f.sys.Send(ctx, "job-1", Go{Note: "done"}); err != nil {
		t.Fatal(err)
	}
	r = <-got
	if !r.Done || r.Status != "completed" || r.Output == nil || r.Output.Text != "summary of tides done" || r.Output.Pages != 3 {
		t.Fatalf("result of job-1: %+v", r)
	}
	// Once ended, a result without waiting has the output too.
	r = call[result](t, f.cs, "brief_result", map[string]any{"id": "job-1", "wait_seconds": 0})
	if r.Status != "completed" || r.Output == nil || r.Output.Text != "summary of tides done" {
		t.Fatalf("result of ended job-1 without waiting: %+v", r)
	}
	// Once ended, a start with its ID still starts nothing.
	again = call[nornmcp.Started](t, f.cs, "brief_start", map[string]any{"id": "job-1", "input": Brief{Topic: "tides", Pages: 3}})
	if !again.Existed || again.Status != "completed" {
		t.Fatalf("start of ended job-1: %+v, want existed and completed", again)
	}

	// Without an ID every start is a new instance.
	a := call[nornmcp.Started](t, f.cs, "say_start", map[string]any{"input": "hi"})
	b := call[nornmcp.Started](t, f.cs, "say_start", map[string]any{"input": "hi"})
	if a.ID == b.ID || a.ID == "" || a.Existed || b.Existed {
		t.Fatalf("two starts without ID: %+v and %+v, want two new instances", a, b)
	}
	sr := call[struct {
		Done   bool   `json:"done"`
		Output string `json:"output"`
	}](t, f.cs, "say_result", map[string]any{"id": b.ID, "wait_seconds": 30})
	if !sr.Done || sr.Output != "hi" {
		t.Fatalf("say result: %+v", sr)
	}
}

func TestFailedInstanceReported(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := testutil.Ctx(t, 30*time.Second)
	call[nornmcp.Started](t, f.cs, "brief_start", map[string]any{"id": "bad-1", "input": Brief{Topic: "x", Fail: true}})
	if err := f.sys.Send(ctx, "bad-1", Go{Note: "now"}); err != nil {
		t.Fatal(err)
	}
	r := call[result](t, f.cs, "brief_result", map[string]any{"id": "bad-1", "wait_seconds": 30})
	if !r.Done || r.Status != "failed" || !strings.Contains(r.Error, "asked to fail: now") || r.Output != nil {
		t.Fatalf("result of a failed instance: %+v", r)
	}
	st := call[nornmcp.Status](t, f.cs, "brief_status", map[string]any{"id": "bad-1"})
	if st.Status != "failed" || !strings.Contains(st.Error, "asked to fail") {
		t.Fatalf("status of a failed instance: %+v", st)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	call[nornmcp.Started](t, f.cs, "brief_start", map[string]any{"id": "c-1", "input": Brief{Topic: "x"}})
	c := call[nornmcp.Cancelled](t, f.cs, "brief_cancel", map[string]any{"id": "c-1", "reason": "not needed"})
	if !c.Requested || c.ID != "c-1" {
		t.Fatalf("cancel: %+v", c)
	}
	r := call[result](t, f.cs, "brief_result", map[string]any{"id": "c-1", "wait_seconds": 30})
	if !r.Done || r.Status != "cancelled" || !strings.Contains(r.Error, "not needed") {
		t.Fatalf("result of a cancelled instance: %+v", r)
	}
	st := call[nornmcp.Status](t, f.cs, "brief_status", map[string]any{"id": "c-1"})
	if st.CancelReason != "not needed" {
		t.Fatalf("status of the cancelled instance: %+v", st)
	}
	// A repeated cancel (an agent's retry) is not an error: it reports
	// that the instance had ended.
	c = call[nornmcp.Cancelled](t, f.cs, "brief_cancel", map[string]any{"id": "c-1"})
	if c.Requested || c.Status != "cancelled" {
		t.Fatalf("second cancel: %+v, want not requested, status cancelled", c)
	}
}

func TestBadCalls(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	call[nornmcp.Started](t, f.cs, "say_start", map[string]any{"id": "say-1", "input": "x"})
	for _, tc := range []struct {
		name, tool string
		args       map[string]any
		want       string
	}{
		{"wrong input type", "brief_start", map[string]any{"input": map[string]any{"topic": "x", "pages": "three"}}, "pages"},
		{"unknown input field", "brief_start", map[string]any{"input": map[string]any{"topic": "x", "pages": 1, "colour": "red"}}, "colour"},
		{"number too big for int", "brief_start", map[string]any{"input": map[string]any{"topic": "x", "pages": 1e30}}, "pages"},
		{"no input", "brief_start", map[string]any{"id": "n-1"}, "input"},
		{"unknown argument", "brief_start", map[string]any{"input": map[string]any{"topic": "x", "pages": 1}, "priority": 1}, "priority"},
		{"bad instance id", "say_start", map[string]any{"id": "a\x00b", "input": "x"}, "ID"},
		{"unknown instance", "brief_status", map[string]any{"id": "nobody"}, `no instance "nobody"`},
		{"unknown instance result", "brief_result", map[string]any{"id": "nobody"}, `no instance "nobody"`},
		{"unknown instance cancel", "brief_cancel", map[string]any{"id": "nobody"}, `no instance "nobody"`},
		{"another workflow's instance", "brief_status", map[string]any{"id": "say-1"}, "runs workflow echo, not brief"},
		{"id of another workflow", "brief_start", map[string]any{"id": "say-1", "input": map[string]any{"topic": "x", "pages": 1}}, "say-1"},
		{"wait too long", "brief_result", map[string]any{"id": "say-1", "wait_seconds": 31}, "wait_seconds"},
		{"negative wait", "brief_result", map[string]any{"id": "say-1", "wait_seconds": -1}, "wait_seconds"},
		{"no id", "brief_status", map[string]any{}, "id"},
	} {
		got := callErr(t, f.cs, tc.tool, tc.args)
		t.Logf("%s: %s", tc.name, got)
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: error %q does not mention %q", tc.name, got, tc.want)
		}
	}
	if n := count(t, f.sys, "brief"); n != 0 {
		t.Fatalf("%d brief instances after bad starts, want 0", n)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	sys := startNode(t)
	ok := nornmcp.Tool(echoFlow, nornmcp.ToolOptions{})
	for _, tc := range []struct {
		name string
		opts nornmcp.Options
		want string
	}{
		{"no system", nornmcp.Options{Workflows: []nornmcp.Workflow{ok}}, "System"},
		{"no workflows", nornmcp.Options{System: sys}, "Workflows"},
		{"nil workflow", nornmcp.Options{System: sys, Workflows: []nornmcp.Workflow{nil}}, "Workflows[0]"},
		{"nil definition", nornmcp.Options{System: sys, Workflows: []nornmcp.Workflow{nornmcp.Tool[string, string](nil, nornmcp.ToolOptions{})}}, "nil workflow"},
		{"bad tool name", nornmcp.Options{System: sys, Workflows: []nornmcp.Workflow{nornmcp.Tool(echoFlow, nornmcp.ToolOptions{Name: "say hi"})}}, "' '"},
		{"long tool name", nornmcp.Options{System: sys, Workflows: []nornmcp.Workflow{nornmcp.Tool(echoFlow, nornmcp.ToolOptions{Name: strings.Repeat("a", 125)})}}, "too long"},
		{"twice", nornmcp.Options{System: sys, Workflows: []nornmcp.Workflow{ok, ok}}, "twice"},
		{"max wait", nornmcp.Options{System: sys, Workflows: []nornmcp.Workflow{ok}, MaxWait: time.Hour}, "MaxWait"},
		{"fractional wait", nornmcp.Options{System: sys, Workflows: []nornmcp.Workflow{ok}, MaxWait: 1500 * time.Millisecond}, "MaxWait"},
		{"input without a schema", nornmcp.Options{System: sys, Workflows: []nornmcp.Workflow{nornmcp.Tool(
			actor.Workflow("funcs", func(*actor.Context, func()) (int, error) { return 0, nil }), nornmcp.ToolOptions{})}}, "input schema of funcs"},
		{"default above max", nornmcp.Options{System: sys, Workflows: []nornmcp.Workflow{ok}, MaxWait: 5 * time.Second, DefaultWait: 6 * time.Second}, "DefaultWait"},
	} {
		_, err := nornmcp.New(tc.opts)
		if !errors.Is(err, nornmcp.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New: %v, want ErrInvalidConfig naming %q", tc.name, err, tc.want)
		}
	}
}

// count is how many instances of workflow the store holds.
func count(t *testing.T, sys *actor.System, workflow string) int {
	t.Helper()
	counts, err := sys.CountInstances(testutil.Ctx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range counts {
		if c.Workflow == workflow {
			n += c.Count
		}
	}
	return n
}
