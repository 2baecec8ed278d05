package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/events"
	"github.com/nornlabs/norn/persistence"
)

// outboxWorkflow emits one event and ends: the event commits with the
// instance's last step.
func outboxWorkflow() *actor.WorkflowDef[int, int] {
	return actor.Workflow("emitter", func(ctx *actor.Context, i int) (int, error) {
		e := event.New()
		e.SetType("com.example.bench")
		if err := e.SetData(event.ApplicationJSON, map[string]int{"i": i}); err != nil {
			return 0, err
		}
		_, err := events.Emit(ctx, e)
		return i, err
	})
}

// outboxSide is the outbox workload's side channel: when each event's step
// committed (the instance's completion, seen by a hook) and when the sink
// first received it.
type outboxSide struct {
	prefix    string // instance IDs are prefix + index
	committed stamps
	arrived   stamps
	got       *doneCounter
	dup       atomic.Int64
	unknown   atomic.Int64
}

// index reads i from an instance ID (prefix+i) or an event ID
// (prefix+i+"/emit:1"); -1 if it is neither.
func (s *outboxSide) index(id string) int {
	rest, ok := strings.CutPrefix(id, s.prefix)
	if !ok {
		return -1
	}
	rest, _, _ = strings.Cut(rest, "/")
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || i >= len(s.committed) {
		return -1
	}
	return i
}

// Observe implements actor.Hooks: the completion commit carries the event.
func (s *outboxSide) Observe(_ context.Context, e actor.HookEvent) {
	if e.Kind == actor.HookInstanceCompleted {
		if i := s.index(e.Instance); i >= 0 {
			s.committed.set(i, e.At)
		}
	}
}

// ServeHTTP is the sink: it answers 200 at once, noting first arrivals.
func (s *outboxSide) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	now := time.Now()
	i := s.index(r.Header.Get("Ce-Id")) // binary mode: the ID is a header
	switch {
	case i < 0:
		s.unknown.Add(1)
	case s.arrived.set(i, now):
		s.got.mark(i)
	default:
		s.dup.Add(1)
	}
	w.WriteHeader(http.StatusOK)
}

// runOutbox: N workflows each emit one event; one relayer, woken by the
// node's commits, sends them to a sink on loopback that answers 200. With
// -backlog every workflow has ended before the relayer starts, and the
// rate is that of draining the outbox.
func runOutbox(ctx context.Context, r *runner) (result, error) {
	n := size(10000, r.opts.N)
	res := result{N: fmtInt(int64(n)), Unit: "events/s", Metrics: map[string]float64{}}
	side := &outboxSide{prefix: "emit-" + runID() + "-", committed: make(stamps, n), arrived: make(stamps, n), got: newDoneCounter(n)}
	wf := outboxWorkflow()
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(wf), PassivateAfter: r.opts.PassivateAfter, Hooks: side})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	srv := &http.Server{Handler: side, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(l)
	}()
	defer func() {
		_ = srv.Close()
		<-served
	}()
	concurrency := size(16, r.opts.P) // RelayerConfig.Concurrency's default
	// Keep a connection per sender: the default transport keeps two idle
	// per host, and the others would be reopened for every event.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency}}
	defer client.CloseIdleConnections()
	relayer, err := events.NewRelayer(events.RelayerConfig{
		Store:       nd.store,
		Sink:        &events.HTTPSink{URL: "http://" + l.Addr().String() + "/", Client: client},
		Wake:        nd.sys.WatchOutbox(),
		Concurrency: concurrency,
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return res, err
	}
	rctx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	relayed := make(chan error, 1)
	startRelayer := func() { go func() { relayed <- relayer.Run(rctx) }() }
	stopRelayer := func() error {
		stopRelay()
		return <-relayed
	}
	if !r.opts.Backlog {
		startRelayer()
	}

	r.logf("spawning %d workflows that emit one event each, from %d goroutines (backlog first: %v)", n, r.opts.Spawners, r.opts.Backlog)
	wctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	pids := make([]actor.PID, n)
	t0 := time.Now()
	err = parallel(ctx, n, r.opts.Spawners, func(ctx context.Context, i int) error {
		var err error
		pids[i], err = actor.Spawn(ctx, nd.sys, wf, i, actor.WithID(fmt.Sprintf("%s%d", side.prefix, i)))
		return err
	})
	spawned := time.Since(t0)
	if err != nil {
		if !r.opts.Backlog {
			_ = stopRelayer()
		}
		return res, fmt.Errorf("spawn: %w", err)
	}
	if r.opts.Backlog {
		if failed, first := awaitAll(wctx, nd.sys, pids, r.opts.Spawners); failed > 0 {
			return res, fmt.Errorf("%d of %d workflows failed; first: %w", failed, n, first)
		}
		t0 = time.Now()
		startRelayer()
	}
	waitErr := side.got.wait(wctx)
	if waitErr != nil {
		r.logf("only %d of %d events arrived: %v", side.got.count(), n, waitErr)
	} else {
		// The outcomes are recorded after the answers arrive; stopping
		// the relayer before would cut off the last sends.
		waitErr = waitSent(wctx, nd.store, n)
	}
	if err := stopRelayer(); err != nil {
		return res, fmt.Errorf("relayer: %w", err)
	}
	if !r.opts.Backlog {
		if failed, first := awaitAll(wctx, nd.sys, pids, r.opts.Spawners); failed > 0 {
			return res, fmt.Errorf("%d of %d workflows failed; first: %w", failed, n, first)
		}
	}

	// Live, the clock starts at the first commit; draining a backlog, at
	// the relayer's start.
	from := t0
	lat := make([]time.Duration, 0, n)
	for i := range n {
		c, ok1 := side.committed.get(i)
		a, ok2 := side.arrived.get(i)
		if ok1 && !r.opts.Backlog && c.Before(from) {
			from = c
		}
		if ok1 && ok2 {
			lat = append(lat, a.Sub(c))
		}
	}
	wall := side.arrived.last().Sub(from)

	// The store's view: every event sent once, none left over.
	sent, err := countOutbox(ctx, nd.store, persistence.OutboxSent)
	if err != nil {
		return res, err
	}
	arrived := side.got.count()
	lost := n - arrived
	lt := summarize(lat)
	res.Throughput, res.P50, res.P99, res.Wall = rate(arrived, wall), lt.P50, lt.P99, wall
	res.Metrics["dup"], res.Metrics["lost"], res.Metrics["unknown"] = float64(side.dup.Load()), float64(lost), float64(side.unknown.Load())
	res.Metrics["sent"] = float64(sent)
	res.Metrics["spawn_per_s"] = rate(n, spawned)
	mode := "commit→arrival"
	if r.opts.Backlog {
		mode = "drain of a full outbox (latency includes the wait for the relayer)"
	}
	res.Extra = fmt.Sprintf("%s; 1 relayer × %d senders, binary mode; spawn %s wf/s; max %s; %d dup, %d lost, %d sent in store",
		mode, concurrency, fmtRate(rate(n, spawned)), fmtDur(lt.Max), side.dup.Load(), lost, sent)
	if waitErr != nil {
		return res, fmt.Errorf("relaying: %w", waitErr)
	}
	if side.dup.Load() > 0 || side.unknown.Load() > 0 || sent != n {
		return res, errors.New("store check failed: events duplicated, unknown or not marked sent")
	}
	return res, nil
}

// countOutbox counts the outbox events in a status.
func countOutbox(ctx context.Context, st persistence.Store, status persistence.OutboxStatus) (int, error) {
	count, after := 0, ""
	for {
		recs, err := st.ListOutbox(ctx, status, after, 1000)
		if err != nil {
			return count, err
		}
		count += len(recs)
		if len(recs) < 1000 {
			return count, nil
		}
		after = recs[len(recs)-1].ID
	}
}

// waitSent waits until the store shows n events sent.
func waitSent(ctx context.Context, st persistence.Store, n int) error {
	for {
		sent, err := countOutbox(ctx, st, persistence.OutboxSent)
		if err != nil || sent >= n {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d events recorded as sent: %w", sent, n, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
