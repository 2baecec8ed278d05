package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nornlabs/norn/actor"
)

// runStats: load N instances (default 100,000, as the list workload makes
// them: ten workflows, mostly ended), then time System.CountInstances (the
// counts by workflow and status behind `norn stats` and the viewer's
// header) and, beside it, Store.Stats (the live counts metrics read), each
// the median of 5 calls.
func runStats(ctx context.Context, r *runner) (result, error) {
	n := size(100000, r.opts.N)
	res := result{N: fmtInt(int64(n)), Metrics: map[string]float64{}}
	nd, err := r.start(ctx, actor.Config{Client: true})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()
	r.logf("loading %d instances", n)
	if err := loadInstances(ctx, r.t, nd.path, n, listRows(n, time.Now())); err != nil {
		return res, fmt.Errorf("load instances: %w", err)
	}
	median := func(f func() error) (time.Duration, error) {
		var ds []time.Duration
		for range 5 {
			start := time.Now()
			if err := f(); err != nil {
				return 0, err
			}
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		return ds[len(ds)/2], nil
	}
	var groups, total int
	count, err := median(func() error {
		counts, err := nd.sys.CountInstances(ctx)
		groups, total = len(counts), 0
		for _, c := range counts {
			total += c.Count
		}
		return err
	})
	if err != nil {
		return res, fmt.Errorf("count instances: %w", err)
	}
	if total != n {
		return res, fmt.Errorf("CountInstances counted %d instances of %d", total, n)
	}
	live, err := median(func() error { _, err := nd.store.Stats(ctx); return err })
	if err != nil {
		return res, fmt.Errorf("stats: %w", err)
	}
	res.Metrics["count_instances_ms"] = ms(count)
	res.Metrics["store_stats_ms"] = ms(live)
	res.Metrics["groups"] = float64(groups)
	res.P50 = count
	res.Throughput, res.Unit = float64(time.Second)/float64(count), "counts/s"
	res.Extra = fmt.Sprintf("CountInstances (median of 5) %s over %d workflow×status groups; Store.Stats (live instances, timers, messages) %s",
		fmtDur(count), groups, fmtDur(live))
	r.logf("CountInstances %s, Stats %s", fmtDur(count), fmtDur(live))
	return res, nil
}
