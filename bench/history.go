package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence"
)

type historyInput struct {
	Index  int
	Events int
}

// historySide is the benchmark-only side channel of the history workload
// (see pingTimes): which instances have recorded their history, and when
// each, reactivated from it, took its message.
type historySide struct {
	built *doneCounter
	woke  stamps
}

// historyWorkflow records in.Events "now" events, then waits for one
// message: after passivation, taking it means replaying all of them.
func historyWorkflow(side *historySide) *actor.WorkflowDef[historyInput, int] {
	return actor.Workflow("history", func(ctx *actor.Context, in historyInput) (int, error) {
		for range in.Events {
			ctx.Now()
		}
		side.built.mark(in.Index)
		if _, err := actor.Receive[int](ctx); err != nil {
			return 0, err
		}
		side.woke.set(in.Index, time.Now())
		return in.Events, nil
	})
}

// historySizes are the history lengths measured (or just -n).
func historySizes(n int) []int {
	if n > 0 {
		return []int{n}
	}
	return []int{1000, 10000, 100000}
}

// runHistory: for each history length, one instance records that many
// events and passivates; a message then brings it back, and the time from
// the Send to the workflow taking the message is its activation (lease,
// history read, replay) plus the one commit of the receive. A 1-event
// instance beside it gives that commit alone.
func runHistory(ctx context.Context, r *runner) (result, error) {
	sizes := append([]int{1}, historySizes(r.opts.N)...)
	res := result{N: fmtInt(int64(sizes[len(sizes)-1])), Unit: "events/s", Metrics: map[string]float64{}}
	side := &historySide{built: newDoneCounter(len(sizes)), woke: make(stamps, len(sizes))}
	wf := historyWorkflow(side)
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(wf), PassivateAfter: r.opts.passivate(200 * time.Millisecond)})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()
	wctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()

	var parts []string
	for i, n := range sizes {
		r.logf("history of %d events", n)
		pid, err := actor.Spawn(ctx, nd.sys, wf, historyInput{Index: i, Events: n})
		if err != nil {
			return res, err
		}
		if _, err := waitStatus(wctx, nd.store, wf.Name(), persistence.StatusWaiting, map[actor.PID]bool{pid: true}); err != nil {
			return res, fmt.Errorf("passivation of the %d-event instance: %w", n, err)
		}
		runtime.GC()
		heap := watchHeap()
		sent := time.Now()
		if err := nd.sys.Send(ctx, pid, i); err != nil {
			heap()
			return res, err
		}
		_, err = nd.sys.AwaitDone(wctx, pid)
		grew := heap()
		if err != nil {
			return res, fmt.Errorf("the %d-event instance: %w", n, err)
		}
		woke, ok := side.woke.get(i)
		if !ok {
			return res, fmt.Errorf("the %d-event instance ended without taking its message", n)
		}
		d := woke.Sub(sent)
		if n == 1 {
			parts = append(parts, "1 event (one commit): "+fmtDur(d))
			continue
		}
		res.Metrics[fmt.Sprintf("activation_ms_%d", n)] = float64(d) / float64(time.Millisecond)
		res.Metrics[fmt.Sprintf("activation_heap_mb_%d", n)] = float64(grew) / (1 << 20)
		parts = append(parts, fmt.Sprintf("%s: %s (heap +%s)", fmtInt(int64(n)), fmtDur(d), fmtBytes(int64(grew))))
		res.Throughput, res.P50, res.P99 = rate(n, d), d, d
	}
	res.Extra = "activation + receive by history length (heap: the live Go heap's peak above where it was before the Send): " + strings.Join(parts, ", ") + "; throughput = events replayed/s at the longest"
	return res, nil
}

// watchHeap samples the live Go heap every millisecond until the returned
// function is called, which reports the peak above the heap at the start.
// It reads runtime/metrics, which does not stop the world.
func watchHeap() func() uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	base := read()
	peak := base
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				peak = max(peak, read())
			}
		}
	})
	return func() uint64 {
		close(stop)
		wg.Wait()
		return max(peak, read()) - base
	}
}
