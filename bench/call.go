package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/clusternode"
)

// callRTTs reads a Caller's round trips from its history: each request's
// sent event to the next received event (its reply), both recorded by
// the caller's node. want is how many there must be.
func callRTTs(ctx context.Context, sys *actor.System, id string, want int) ([]time.Duration, error) {
	hist, err := sys.History(ctx, actor.PID(id))
	if err != nil {
		return nil, fmt.Errorf("history of %s: %w", id, err)
	}
	var rtts []time.Duration
	var sent time.Time
	for _, e := range hist {
		switch e.Kind {
		case actor.EventSent:
			sent = e.At
		case actor.EventReceived:
			if !sent.IsZero() {
				rtts = append(rtts, e.At.Sub(sent))
				sent = time.Time{}
			}
		}
	}
	if len(rtts) != want {
		return nil, fmt.Errorf("%s: %d calls in its history, want %d", id, len(rtts), want)
	}
	return rtts, nil
}

// runCall: one node. A Caller workflow calls a Counter (actor.Call, both
// internal/clusternode's) -m times in a row; then the runner makes -m
// calls from outside (actor.CallFrom) to a second Counter. The workflow
// round trips are read from the caller's history (request sent → reply
// received); the outside ones are timed by the runner (CallFrom's call →
// return), which includes the call's own instance (its creation, and its
// end with the reply).
func runCall(ctx context.Context, r *runner) (result, error) {
	m := size(2000, r.opts.M, r.opts.N)
	res := result{N: fmtInt(int64(m)), Unit: "calls/s", Metrics: map[string]float64{}}
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(clusternode.Counter, clusternode.Caller),
		PassivateAfter: r.opts.passivate(time.Hour)})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()
	actx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()

	run := runID()
	counter, caller := "counter-"+run, "caller-"+run
	if _, err := actor.Spawn(ctx, nd.sys, clusternode.Counter, m, actor.WithID(counter)); err != nil {
		return res, err
	}
	r.logf("%d calls from a workflow", m)
	t0 := time.Now()
	if _, err := actor.Spawn(ctx, nd.sys, clusternode.Caller, clusternode.PingInput{Peer: actor.PID(counter), Times: m},
		actor.WithID(caller)); err != nil {
		return res, err
	}
	if got, err := actor.Await(actx, nd.sys, clusternode.Caller, actor.PID(caller)); err != nil || got != m {
		return res, fmt.Errorf("caller: %d calls, %v", got, err)
	}
	wall := time.Since(t0)
	if got, err := actor.Await(actx, nd.sys, clusternode.Counter, actor.PID(counter)); err != nil || got != m {
		return res, fmt.Errorf("counter: %d requests, %v", got, err)
	}
	rtts, err := callRTTs(actx, nd.sys, caller, m)
	if err != nil {
		return res, err
	}

	outside := "counter-out-" + run
	if _, err := actor.Spawn(ctx, nd.sys, clusternode.Counter, m, actor.WithID(outside)); err != nil {
		return res, err
	}
	r.logf("%d calls from outside", m)
	from := make([]time.Duration, 0, m)
	t1 := time.Now()
	for i := range m {
		s := time.Now()
		sum, err := actor.CallFrom[int](actx, nd.sys, actor.PID(outside), 1, actor.CallOptions{Timeout: time.Minute})
		if err != nil {
			return res, fmt.Errorf("call from outside %d: %w", i, err)
		}
		if sum != i+1 {
			return res, fmt.Errorf("call from outside %d: reply %d, want %d", i, sum, i+1)
		}
		from = append(from, time.Since(s))
	}
	fromWall := time.Since(t1)
	l, lf := summarize(rtts), summarize(from)
	res.Throughput, res.P50, res.P99, res.Wall = rate(m, wall), l.P50, l.P99, wall
	res.Metrics["from_outside_p50_ms"] = ms(lf.P50)
	res.Metrics["from_outside_p99_ms"] = ms(lf.P99)
	res.Metrics["from_outside_per_s"] = rate(m, fromWall)
	res.Extra = fmt.Sprintf("workflow→workflow round trip p50/p99 (2 msgs); from outside (CallFrom) p50 %s p99 %s, %s calls/s; max %s",
		fmtDur(lf.P50), fmtDur(lf.P99), fmtRate(rate(m, fromWall)), fmtDur(l.Max))
	return res, nil
}

// runCrossCall: two nodes, as crosspingpong; -p Callers owned by n1 each
// call a Counter owned by n2 -m times. Round trips are read from the
// callers' histories.
func runCrossCall(ctx context.Context, r *runner) (result, error) {
	m := size(2000, r.opts.M, r.opts.N)
	pairs := size(1, r.opts.P)
	res := result{N: fmt.Sprintf("%s×%d", fmtInt(int64(m)), pairs), Unit: "calls/s", Metrics: map[string]float64{}}
	c, err := startCluster(ctx, r, []string{"n1", "n2"}, nodeSpec{})
	if err != nil {
		return res, err
	}
	defer c.close()

	run := runID()
	callers, counters := c.idsOn("caller-"+run, "n1", pairs), c.idsOn("counter-"+run, "n2", pairs)
	actx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	r.logf("%d pairs × %d calls, callers on n1, counters on n2", pairs, m)
	t0 := time.Now()
	for i := range pairs {
		if _, err := actor.Spawn(ctx, c.client.Sys, clusternode.Counter, m, actor.WithID(counters[i])); err != nil {
			return res, err
		}
		if _, err := actor.Spawn(ctx, c.client.Sys, clusternode.Caller, clusternode.PingInput{Peer: actor.PID(counters[i]), Times: m},
			actor.WithID(callers[i])); err != nil {
			return res, err
		}
	}
	for i := range pairs {
		if got, err := actor.Await(actx, c.client.Sys, clusternode.Caller, actor.PID(callers[i])); err != nil || got != m {
			return res, fmt.Errorf("caller %s: %d calls, %v", callers[i], got, err)
		}
	}
	wall := time.Since(t0)
	var rtts []time.Duration
	for i := range pairs {
		if got, err := actor.Await(actx, c.client.Sys, clusternode.Counter, actor.PID(counters[i])); err != nil || got != m {
			return res, fmt.Errorf("counter %s: %d requests, %v", counters[i], got, err)
		}
		rt, err := callRTTs(actx, c.client.Sys, callers[i], m)
		if err != nil {
			return res, err
		}
		rtts = append(rtts, rt...)
	}
	c.mu.Lock()
	for _, id := range append(append([]string{}, callers...), counters...) {
		if got, want := c.completed[id], c.owner(id); got != want {
			err = fmt.Errorf("%s completed on %q, its owner is %s", id, got, want)
		}
	}
	c.mu.Unlock()
	if err != nil {
		return res, err
	}
	res.Metrics["node_warnings"] = float64(c.logWarnings())
	l := summarize(rtts)
	res.Throughput, res.P50, res.P99, res.Wall = rate(m*pairs, wall), l.P50, l.P99, wall
	res.Extra = fmt.Sprintf("call round trip p50/p99 across nodes (request and reply each a commit and a remote wake-up); max %s", fmtDur(l.Max))
	return res, nil
}

// queryCounter adds up the ints it receives and answers "sum".
var queryCounter = actor.Workflow("query-counter", func(ctx *actor.Context, _ int) (int, error) {
	sum := 0
	if err := actor.HandleQuery(ctx, "sum", func(struct{}) (int, error) { return sum, nil }); err != nil {
		return 0, err
	}
	for {
		m, err := actor.Receive[int](ctx)
		if err != nil {
			return sum, err
		}
		sum += m.Value
	}
})

// queryHistory is the history length of the instance the query workload
// asks: its start and 99 received messages.
const queryHistory = 100

// runQuery: -m queries (System.Query) of one instance with 100 events of
// history: first live on its node (answered at its wait, from memory),
// then passivated (the node stopped; a client System on the same store
// with the workflow replays the history for each query). Both are timed
// by the runner, call to return.
func runQuery(ctx context.Context, r *runner) (result, error) {
	m := size(2000, r.opts.M, r.opts.N)
	res := result{N: fmtInt(int64(m)), Unit: "queries/s", Metrics: map[string]float64{}}
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(queryCounter), PassivateAfter: time.Hour})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()
	actx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	pid, err := actor.Spawn(ctx, nd.sys, queryCounter, 0, actor.WithID("query-"+runID()))
	if err != nil {
		return res, err
	}
	for i := 1; i < queryHistory; i++ {
		if err := nd.sys.Send(ctx, pid, 1); err != nil {
			return res, err
		}
	}
	want := queryHistory - 1
	for {
		got, err := actor.Query[int](actx, nd.sys, pid, "sum", nil)
		if err != nil {
			return res, err
		}
		if got == want {
			break
		}
		select {
		case <-actx.Done():
			return res, fmt.Errorf("the instance took %d of %d messages", got, want)
		case <-time.After(time.Millisecond):
		}
	}
	info, err := nd.sys.Inspect(actx, pid)
	if err != nil || !info.Active || info.HistoryLen != queryHistory {
		return res, fmt.Errorf("instance before the live queries: active %v, %d events, %v", info.Active, info.HistoryLen, err)
	}
	ask := func(sys *actor.System) ([]time.Duration, time.Duration, error) {
		ds := make([]time.Duration, 0, m)
		t0 := time.Now()
		for range m {
			s := time.Now()
			got, err := actor.Query[int](actx, sys, pid, "sum", nil)
			if err != nil {
				return nil, 0, err
			}
			if got != want {
				return nil, 0, fmt.Errorf("query answered %d, want %d", got, want)
			}
			ds = append(ds, time.Since(s))
		}
		return ds, time.Since(t0), nil
	}
	r.logf("%d queries of a live instance", m)
	live, liveWall, err := ask(nd.sys)
	if err != nil {
		return res, fmt.Errorf("live: %w", err)
	}
	// Stop the node: the instance is left passivated in the store.
	stopCtx, cancelStop := context.WithTimeout(ctx, time.Minute)
	err = nd.sys.Stop(stopCtx)
	cancelStop()
	if err != nil {
		return res, err
	}
	client, err := actor.Start(ctx, actor.Config{Store: nd.store, Client: true, NodeID: "query-client",
		Workflows: actor.Register(queryCounter), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return res, err
	}
	nd.sys = client // Close stops it
	r.logf("%d queries of a passivated instance (%d events replayed each)", m, queryHistory)
	passive, passiveWall, err := ask(client)
	if err != nil {
		return res, fmt.Errorf("passivated: %w", err)
	}
	l, lp := summarize(live), summarize(passive)
	res.Throughput, res.P50, res.P99, res.Wall = rate(m, liveWall), l.P50, l.P99, liveWall+passiveWall
	res.Metrics["passivated_p50_ms"] = ms(lp.P50)
	res.Metrics["passivated_p99_ms"] = ms(lp.P99)
	res.Metrics["passivated_per_s"] = rate(m, passiveWall)
	res.Extra = fmt.Sprintf("live instance p50/p99; passivated (replay of %d events) p50 %s p99 %s, %s queries/s",
		queryHistory, fmtDur(lp.P50), fmtDur(lp.P99), fmtRate(rate(m, passiveWall)))
	return res, nil
}
