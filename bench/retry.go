package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/supervisor"
)

// retryWorkflow charges (an activity that always works) and ships (one
// that fails, without retries, until ok is set): history is started,
// activity, activity (failed), failed.
func retryWorkflow(ok *atomic.Bool) *actor.WorkflowDef[int, int] {
	charge := actor.Activity("charge", func(_ context.Context, n int) (int, error) { return n + 1, nil })
	ship := actor.Activity("ship", func(_ context.Context, n int) (int, error) {
		if !ok.Load() {
			return 0, errors.New("carrier down")
		}
		return n + 1, nil
	}, actor.WithRetry(supervisor.NoRetry()))
	return actor.Workflow("retry", func(ctx *actor.Context, n int) (int, error) {
		c, err := charge.Run(ctx, n)
		if err != nil {
			return 0, err
		}
		return ship.Run(ctx, c)
	})
}

// runRetry: n instances fail on an activity (the carrier is down); once it
// works again, each is resumed with System.Retry from -spawners goroutines
// and awaited. The rate is retried instances run to completion per second,
// from the first Retry to the last completion; the work recorded before the
// failure (charge) must not run again.
func runRetry(ctx context.Context, r *runner) (result, error) {
	n := size(2000, r.opts.N)
	res := result{N: fmtInt(int64(n)), Unit: "retries/s", Metrics: map[string]float64{}}
	var ok atomic.Bool
	wf := retryWorkflow(&ok)
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(wf), PassivateAfter: r.opts.PassivateAfter})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()
	actx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()

	r.logf("spawning %d workflows that fail", n)
	pids := make([]actor.PID, n)
	err = parallel(ctx, n, r.opts.Spawners, func(ctx context.Context, i int) error {
		pid, err := actor.Spawn(ctx, nd.sys, wf, i)
		if err != nil {
			return err
		}
		pids[i] = pid
		if _, err := actor.Await(actx, nd.sys, wf, pid); err == nil {
			return fmt.Errorf("%s did not fail", pid)
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("spawn: %w", err)
	}

	ok.Store(true)
	r.logf("retrying %d failed workflows", n)
	var mu sync.Mutex
	lat := make([]time.Duration, n)
	var last time.Time
	t0 := time.Now()
	err = parallel(ctx, n, r.opts.Spawners, func(ctx context.Context, i int) error {
		start := time.Now()
		if err := nd.sys.Retry(ctx, pids[i]); err != nil {
			return err
		}
		got, err := actor.Await(actx, nd.sys, wf, pids[i])
		if err != nil {
			return err
		}
		if got != i+2 {
			return fmt.Errorf("%s returned %d, want %d", pids[i], got, i+2)
		}
		end := time.Now()
		lat[i] = end.Sub(start)
		mu.Lock()
		if end.After(last) {
			last = end
		}
		mu.Unlock()
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("retry: %w", err)
	}
	wall := last.Sub(t0)
	info, err := nd.sys.Inspect(ctx, pids[0])
	if err != nil {
		return res, err
	}
	charges := 0
	for _, e := range info.History {
		if e.Kind == actor.EventActivity && e.Name == "charge" {
			charges++
		}
	}
	if info.Run != 1 || charges != 1 {
		return res, fmt.Errorf("%s after retry: run %d, %d charges recorded; want run 1 and 1 charge", pids[0], info.Run, charges)
	}
	l := summarize(lat)
	res.Throughput, res.P50, res.P99, res.Wall = rate(n, wall), l.P50, l.P99, wall
	res.Extra = fmt.Sprintf("retry → completed; max %s", fmtDur(l.Max))
	return res, nil
}
