package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/nornmcp"
)

var mcpDouble = actor.Activity("mcp-double", func(_ context.Context, i int) (int, error) { return 2 * i, nil })

// mcpOne is the one-activity workflow the mcp workload starts.
var mcpOne = actor.Workflow("mcp-one", func(ctx *actor.Context, i int) (int, error) { return mcpDouble.Run(ctx, i) })

// mcpToken is the bearer token of the workload's loopback server.
const mcpToken = "bench-token-0123456789abcdef"

// mcpBearer adds the token to each request, as a configured client does.
type mcpBearer struct{ next http.RoundTripper }

func (b mcpBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+mcpToken)
	return b.next.RoundTrip(r)
}

// runMCP: C MCP clients (the SDK's, -clients, 8) call mcp-one_start then
// mcp-one_result (waiting up to 30s) N times over streamable HTTP with a
// bearer token, on a loopback server (nornmcp.NewHTTPHandler); each
// round trip is timed from the start call to the result's return. Then one
// client does the same over the SDK's in-memory transport, one call at a
// time, for the latency without HTTP and without queueing, and Spawn +
// Await as many times, for the same without MCP. Every result is checked
// (output 2i); "wrong" counts the ones that are not.
func runMCP(ctx context.Context, r *runner) (result, error) {
	n := size(2000, r.opts.N)
	clients := size(8, r.opts.Clients)
	res := result{N: fmtInt(int64(n)), Unit: "round trips/s", Metrics: map[string]float64{}}
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(mcpOne)})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()
	srv, err := nornmcp.New(nornmcp.Options{System: nd.sys, Workflows: []nornmcp.Workflow{nornmcp.Tool(mcpOne, nornmcp.ToolOptions{})},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return res, err
	}
	h, err := nornmcp.NewHTTPHandler(srv, nornmcp.HTTPConfig{Token: mcpToken})
	if err != nil {
		return res, err
	}
	hs := httptest.NewServer(h)
	defer hs.Close()
	tr := &http.Transport{MaxIdleConns: clients, MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	sessions := make(chan *mcp.ClientSession, clients)
	for range clients {
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: &http.Client{Transport: mcpBearer{tr}},
			DisableStandaloneSSE: true, MaxRetries: -1}, nil)
		if err != nil {
			return res, err
		}
		defer func() { _ = cs.Close() }()
		sessions <- cs
	}
	run := runID()
	var mu sync.Mutex
	wrong := 0
	roundTrip := func(ctx context.Context, cs *mcp.ClientSession, id string, i int) (time.Duration, error) {
		start := time.Now()
		ok, err := mcpRoundTrip(ctx, cs, id, i)
		d := time.Since(start)
		if !ok {
			mu.Lock()
			wrong++
			mu.Unlock()
		}
		return d, err
	}

	r.logf("%d start → result round trips from %d MCP clients over HTTP", n, clients)
	lat := make([]time.Duration, n)
	t0 := time.Now()
	err = parallel(ctx, n, clients, func(ctx context.Context, i int) error {
		cs := <-sessions
		defer func() { sessions <- cs }()
		d, err := roundTrip(ctx, cs, "mcp-"+run+"-"+strconv.Itoa(i), i)
		lat[i] = d
		return err
	})
	wall := time.Since(t0)
	if err != nil {
		return res, err
	}

	// In process: the SDK's in-memory transport, one call at a time.
	m := max(1, min(n, 500))
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(ctx, st, nil)
	if err != nil {
		return res, err
	}
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		return res, err
	}
	r.logf("%d round trips from one in-process client", m)
	inproc := make([]time.Duration, m)
	for i := range m {
		if inproc[i], err = roundTrip(ctx, cs, "mcp-"+run+"-mem-"+strconv.Itoa(i), i); err != nil {
			break
		}
	}
	_ = cs.Close()
	_ = ss.Wait()
	if err != nil {
		return res, err
	}

	// The same without MCP: SpawnID and Await, one at a time.
	direct := make([]time.Duration, m)
	for i := range m {
		start := time.Now()
		pid, err := actor.Spawn(ctx, nd.sys, mcpOne, i, actor.WithID("mcp-"+run+"-direct-"+strconv.Itoa(i)))
		if err != nil {
			return res, err
		}
		out, err := actor.Await(ctx, nd.sys, mcpOne, pid)
		if err != nil {
			return res, err
		}
		direct[i] = time.Since(start)
		if out != 2*i {
			wrong++
		}
	}

	l, mem, dir := summarize(lat), summarize(inproc), summarize(direct)
	res.Throughput = rate(n, wall)
	res.P50, res.P99, res.Wall = l.P50, l.P99, wall
	res.Metrics["wrong"] = float64(wrong)
	res.Metrics["inproc_p50_ms"] = float64(mem.P50) / float64(time.Millisecond)
	res.Metrics["inproc_p99_ms"] = float64(mem.P99) / float64(time.Millisecond)
	res.Metrics["direct_p50_ms"] = float64(dir.P50) / float64(time.Millisecond)
	res.Extra = fmt.Sprintf("HTTP + bearer, %d clients, loopback; max %s; in process (1 client, %d round trips): p50 %s p99 %s; "+
		"without MCP (Spawn + Await, 1 caller): p50 %s p99 %s; wrong results %d",
		clients, fmtDur(l.Max), m, fmtDur(mem.P50), fmtDur(mem.P99), fmtDur(dir.P50), fmtDur(dir.P99), wrong)
	return res, nil
}

// mcpRoundTrip starts instance id with input i and waits for its result;
// ok reports the output 2i.
func mcpRoundTrip(ctx context.Context, cs *mcp.ClientSession, id string, i int) (ok bool, err error) {
	started, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "mcp-one_start", Arguments: map[string]any{"id": id, "input": i}})
	if err != nil {
		return false, err
	}
	if started.IsError {
		return false, fmt.Errorf("start %s: %v", id, started.Content)
	}
	got, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "mcp-one_result", Arguments: map[string]any{"id": id, "wait_seconds": 30}})
	if err != nil {
		return false, err
	}
	if got.IsError {
		return false, fmt.Errorf("result %s: %v", id, got.Content)
	}
	b, err := json.Marshal(got.StructuredContent)
	if err != nil {
		return false, err
	}
	var out struct {
		Status string `json:"status"`
		Output *int   `json:"output"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return false, err
	}
	if out.Status != "completed" {
		return false, fmt.Errorf("result %s: status %s after 30s", id, out.Status)
	}
	return out.Output != nil && *out.Output == 2*i, nil
}
