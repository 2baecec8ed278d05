package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

type idleInput struct {
	Channel string
	Index   int
}

// idleSide is the benchmark-only side channel of the idle workload (see
// pingTimes): subscriptions done, and when each instance got the wake-up.
type idleSide struct {
	subscribed *doneCounter
	woken      *doneCounter
	at         stamps
}

func idleWorkflow(side *idleSide) *actor.WorkflowDef[idleInput, int] {
	return actor.Workflow("idler", func(ctx *actor.Context, in idleInput) (int, error) {
		if err := ctx.Subscribe(in.Channel, mailbox.Broadcast); err != nil {
			return 0, err
		}
		side.subscribed.mark(in.Index)
		m, err := actor.Receive[int](ctx, mailbox.OnChannel(in.Channel))
		if err != nil {
			return 0, err
		}
		if side.at.set(in.Index, time.Now()) {
			side.woken.mark(in.Index)
		}
		return m.Value, nil
	})
}

// runIdle: N instances subscribe to a broadcast channel and park in
// Receive; once they have all passivated, one published message wakes them
// all (each is re-activated from the store, replays, consumes and ends).
func runIdle(ctx context.Context, r *runner) (result, error) {
	n := size(100000, r.opts.N)
	parked := r.opts.PrefillParked > 0 // the store holds them already: no spawning
	if parked {
		n = r.opts.PrefillParked
	}
	passivate := r.opts.passivate(2 * time.Second)
	res := result{N: fmtInt(int64(n)), Unit: "inst/s", Metrics: map[string]float64{}}
	side := &idleSide{subscribed: newDoneCounter(n), woken: newDoneCounter(n), at: make(stamps, n)}
	wf := idleWorkflow(side)
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(wf), PassivateAfter: passivate})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()
	channel := "wake-" + runID()
	base := runtime.NumGoroutine()
	smp := startSampler(50 * time.Millisecond)

	pids := make([]actor.PID, n)
	t0 := time.Now()
	wctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	if parked {
		channel = prefillChannel
		r.logf("%d idle instances parked in the store (-prefill-parked)", n)
		pids, err = listIDs(wctx, nd.store, wf.Name(), persistence.StatusWaiting)
		if err == nil && len(pids) != n {
			err = fmt.Errorf("the store holds %d parked idlers, want %d", len(pids), n)
		}
	} else {
		r.logf("spawning %d idle instances (PassivateAfter %s)", n, passivate)
		err = parallel(ctx, n, r.opts.Spawners, func(ctx context.Context, i int) error {
			var err error
			pids[i], err = actor.Spawn(ctx, nd.sys, wf, idleInput{Channel: channel, Index: i})
			return err
		})
	}
	spawned := time.Since(t0)
	if err != nil {
		smp.Stop()
		return res, err
	}
	if !parked {
		if err := side.subscribed.wait(wctx); err != nil {
			smp.Stop()
			return res, fmt.Errorf("subscribing: %w", err)
		}
	}
	subscribed := time.Since(t0)
	// Passivated: the store says "waiting" for every instance, and their
	// activations' goroutines have ended.
	ids := make(map[actor.PID]bool, n)
	for _, p := range pids {
		ids[p] = true
	}
	waiting, err := waitStatus(wctx, nd.store, wf.Name(), persistence.StatusWaiting, ids)
	if err != nil {
		smp.Stop()
		return res, fmt.Errorf("passivation: %w", err)
	}
	g := waitGoroutines(wctx, base+50)
	peakG, peakRSS := smp.Stop()
	if g > base+50 {
		return res, fmt.Errorf("%d goroutines still running after %s (%d before spawning)", g, r.opts.Timeout, base)
	}
	settle()
	rss := currentRSS()
	r.heapProfile()
	disk, err := nd.diskBytes(ctx)
	if err != nil {
		disk = -1
	}
	// Bytes per parked instance on PostgreSQL, table by table (with
	// indexes and TOAST) and index by index, over every instance in the
	// store.
	tables, indexes, count, err := nd.relationBytes(ctx)
	if err != nil {
		return res, fmt.Errorf("relation sizes: %w", err)
	}
	if count > 0 {
		var total int64
		for name, size := range tables {
			total += size
			res.Metrics["parked_bytes_per_instance_"+name] = float64(size) / float64(count)
		}
		for name, size := range indexes {
			res.Metrics["parked_index_bytes_per_instance_"+name] = float64(size) / float64(count)
		}
		res.Metrics["parked_bytes_per_instance"] = float64(total) / float64(count)
	}
	r.logf("%d passivated (%d goroutines, RSS %s); publishing the wake-up", waiting, g, fmtBytes(rss))

	smp = startSampler(50 * time.Millisecond)
	w0 := ioWritten()
	t1 := time.Now()
	if _, err := nd.sys.Publish(ctx, channel, 1); err != nil {
		return res, err
	}
	wokeErr := side.woken.wait(wctx)
	wall := side.at.last().Sub(t1)
	written := ioWritten() - w0
	wakeG, wakeRSS := smp.Stop()
	// Every instance ends right after its Receive; check that through the
	// store with a bounded pool (the wake-up figure is already taken).
	failed, first := awaitAll(wctx, nd.sys, pids, r.opts.Spawners)
	done := time.Since(t1)

	lat := make([]time.Duration, 0, n)
	for i := range n {
		if at, ok := side.at.get(i); ok {
			lat = append(lat, at.Sub(t1))
		}
	}
	l := summarize(lat)
	res.Throughput, res.P50, res.P99, res.Wall = rate(side.woken.count(), wall), l.P50, l.P99, wall
	res.Metrics["spawn_per_s"] = rate(n, spawned)
	res.Metrics["peak_goroutines"] = float64(peakG)
	res.Metrics["peak_rss_bytes"] = float64(peakRSS)
	res.Metrics["passivated_goroutines"] = float64(g)
	res.Metrics["passivated_rss_bytes"] = float64(rss)
	res.Metrics["waiting"] = float64(waiting)
	res.Metrics["disk_bytes"] = float64(disk)
	res.Metrics["wake_all_seconds"] = wall.Seconds()
	res.Metrics["wake_peak_goroutines"] = float64(wakeG)
	res.Metrics["wake_peak_rss_bytes"] = float64(wakeRSS)
	res.Metrics["wake_written_bytes"] = float64(written)
	res.Extra = fmt.Sprintf("publish→woken; all woken in %s, all ended by %s; spawn %s/s (subscribed after %s), peak %s goroutines, RSS %s; "+
		"passivated (%s/%s waiting): %s goroutines, RSS %s, disk %s; wake-up: peak %s goroutines, RSS %s, wrote %s",
		fmtDur(wall), fmtDur(done), fmtRate(rate(n, spawned)), fmtDur(subscribed), fmtInt(int64(peakG)), fmtBytes(peakRSS),
		fmtInt(int64(waiting)), fmtInt(int64(n)), fmtInt(int64(g)), fmtBytes(rss), fmtBytes(disk),
		fmtInt(int64(wakeG)), fmtBytes(wakeRSS), fmtBytes(written))
	if parked {
		res.Extra = "parked by -prefill-parked (spawn: reading their IDs); " + res.Extra
	}
	if wokeErr != nil {
		return res, fmt.Errorf("wake-up: %w", wokeErr)
	}
	if failed > 0 {
		return res, fmt.Errorf("%d instances did not complete; first: %w", failed, first)
	}
	return res, nil
}

// listIDs reads the IDs of a workflow's instances in status from the store.
func listIDs(ctx context.Context, st persistence.Store, workflow string, status persistence.Status) ([]actor.PID, error) {
	var out []actor.PID
	after := ""
	for {
		page, err := st.List(ctx, persistence.ListFilter{Status: []persistence.Status{status}, Workflow: workflow, After: after, Limit: 5000})
		if err != nil {
			return out, err
		}
		for _, in := range page {
			out = append(out, actor.PID(in.ID))
		}
		if len(page) < 5000 {
			return out, nil
		}
		after = page[len(page)-1].ID
	}
}
