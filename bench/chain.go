package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nornlabs/norn/actor"
)

// chainWorkflow is three trivial activities in sequence: history is
// started, activity ×3, completed.
func chainWorkflow() *actor.WorkflowDef[int, int] {
	inc := actor.Activity("inc", func(_ context.Context, n int) (int, error) { return n + 1, nil })
	return actor.Workflow("chain", func(ctx *actor.Context, n int) (int, error) {
		for range 3 {
			var err error
			if n, err = inc.Run(ctx, n); err != nil {
				return 0, err
			}
		}
		return n, nil
	})
}

// runChain spawns n chain workflows from -spawners goroutines, awaits each
// with its own goroutine (started as soon as its Spawn returns), and then
// writes as many history rows straight into a bare SQLite (or PostgreSQL)
// table for comparison.
func runChain(ctx context.Context, r *runner) (result, error) {
	n := size(10000, r.opts.N)
	res := result{N: fmtInt(int64(n)), Unit: "wf/s", Metrics: map[string]float64{}}
	wf := chainWorkflow()
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(wf), PassivateAfter: r.opts.PassivateAfter})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()

	starts := make([]time.Time, n)
	spawns := make([]time.Duration, n) // each Spawn call, to its return
	ends := make([]time.Time, n)
	var awaits sync.WaitGroup
	var mu sync.Mutex
	var bad int
	var firstErr error
	var first actor.PID
	actx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()

	r.logf("spawning %d chain workflows from %d goroutines", n, r.opts.Spawners)
	w0 := ioWritten()
	t0 := time.Now()
	err = parallel(ctx, n, r.opts.Spawners, func(ctx context.Context, i int) error {
		starts[i] = time.Now()
		pid, err := actor.Spawn(ctx, nd.sys, wf, i)
		if err != nil {
			return err
		}
		spawns[i] = time.Since(starts[i])
		if i == 0 {
			first = pid
		}
		awaits.Go(func() {
			got, err := actor.Await(actx, nd.sys, wf, pid)
			ends[i] = time.Now()
			if err == nil && got != i+3 {
				err = fmt.Errorf("%s returned %d, want %d", pid, got, i+3)
			}
			if err != nil {
				mu.Lock()
				bad++
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
		return nil
	})
	spawned := time.Since(t0)
	awaits.Wait()
	if err != nil {
		return res, fmt.Errorf("spawn: %w", err)
	}
	if bad > 0 {
		return res, fmt.Errorf("%d of %d workflows failed; first: %w", bad, n, firstErr)
	}
	var last time.Time
	lat := make([]time.Duration, n)
	for i := range n {
		lat[i] = ends[i].Sub(starts[i])
		if ends[i].After(last) {
			last = ends[i]
		}
	}
	wall := last.Sub(t0)
	peak := peakRSS()
	written := ioWritten() - w0

	// History rows Norn wrote per workflow (5: started, 3 activities, completed).
	info, err := nd.sys.Inspect(ctx, first)
	if err != nil {
		return res, fmt.Errorf("inspect %s: %w", first, err)
	}
	rowsPer := len(info.History)
	rows := n * rowsPer
	if err := nd.Close(); err != nil {
		return res, fmt.Errorf("stop: %w", err)
	}

	l := summarize(lat)
	sl := summarize(spawns)
	res.Throughput, res.P50, res.P99, res.Wall = rate(n, wall), l.P50, l.P99, wall
	res.Metrics["spawn_p50_ms"], res.Metrics["spawn_p99_ms"] = ms(sl.P50), ms(sl.P99)
	nornRows := rate(rows, wall)
	res.Metrics["activities_per_s"] = rate(3*n, wall)
	res.Metrics["history_rows_per_s"] = nornRows
	res.Metrics["spawn_per_s"] = rate(n, spawned)
	res.Metrics["peak_rss_bytes"] = float64(peak)
	res.Metrics["written_bytes_per_wf"] = float64(written) / float64(n)
	res.Extra = fmt.Sprintf("%s act/s; spawn %s/s, each p50 %s / p99 %s; max %s; peak RSS %s; wrote %s (%s/wf)", fmtRate(rate(3*n, wall)), fmtRate(rate(n, spawned)),
		fmtDur(sl.P50), fmtDur(sl.P99), fmtDur(l.Max), fmtBytes(peak), fmtBytes(written), fmtBytes(written/int64(n)))

	r.logf("raw baseline: %d history rows", rows)
	base, err := r.baseline(ctx, nd, rows, rowsPer)
	switch {
	case err != nil:
		res.Extra += "; baseline n/a (" + err.Error() + ")"
	default:
		res.Metrics["baseline_rows_per_s"] = base.rowsPerSec
		res.Metrics["baseline_pct"] = 100 * nornRows / base.rowsPerSec
		res.Extra += fmt.Sprintf("; %s hist rows/s = %.0f%% of raw %s %s rows/s", fmtRate(nornRows), 100*nornRows/base.rowsPerSec,
			base.kind, fmtRate(base.rowsPerSec))
	}
	return res, nil
}

// baseline writes rows history-shaped rows with the same durability
// settings as the store under test, next to it.
func (r *runner) baseline(ctx context.Context, nd *node, rows, rowsPer int) (baselineResult, error) {
	batch := size(5000, r.opts.BaselineBatch)
	if r.t.postgres() {
		return pgBaseline(ctx, r.t.url, rows, rowsPer, batch)
	}
	dir := filepath.Dir(nd.path)
	if nd.tmpDir != "" { // removed with the node; use the same file system's temp dir
		dir = os.TempDir()
	}
	return sqliteBaseline(ctx, filepath.Join(dir, "norn-bench-baseline-"+runID()+".db"), rows, rowsPer, batch)
}
