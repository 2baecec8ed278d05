package main

import (
	"context"
	"fmt"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nornlabs/norn/actor"
)

// recurWindow is how many sent messages the driver lets wait unconsumed, so
// that the mailbox stays small however long the run.
const recurWindow = 64

// recurSpan is how many iterations each checkpoint's per-iteration time is
// averaged over (the span ending at the checkpoint).
const recurSpan = 1000

// recurCheckpoints are the iteration counts at which the per-iteration time
// and RSS are read; those beyond -n are skipped and -n itself is always last.
var recurCheckpoints = []int{1000, 10000, 100000}

// recurSide is the benchmark-only side channel of the recur workload (see
// pingTimes): when iteration i consumed its message, how many iterations
// have, and a wake-up for the driver waiting for room in its window.
type recurSide struct {
	at       stamps
	consumed atomic.Int64
	wake     chan struct{}
}

func recurWorkflow(side *recurSide) *actor.WorkflowDef[int, int] {
	return actor.Workflow("recur", func(ctx *actor.Context, state int) (int, error) {
		m, err := actor.Receive[int](ctx)
		if err != nil {
			return state, err
		}
		if m.Value < 0 {
			return state, nil
		}
		if m.Value != state {
			return state, fmt.Errorf("iteration %d received %d", state, m.Value)
		}
		if !ctx.Replaying() && side.at.set(state, time.Now()) {
			side.consumed.Store(int64(state) + 1)
			select {
			case side.wake <- struct{}{}:
			default:
			}
		}
		return 0, actor.Recur(ctx, state+1)
	})
}

// runRecur: one instance receives one message per run and continues as new
// (actor.Recur) with its count + 1, n times; the driver feeds it with
// sys.Send, at most recurWindow messages ahead of consumption. History starts
// over every iteration, so the per-iteration time and memory must stay flat
// however many iterations came before; a final negative message ends it, and
// the store must then show run n with a fresh, short history.
func runRecur(ctx context.Context, r *runner) (result, error) {
	n := size(1000000, r.opts.N)
	res := result{N: fmtInt(int64(n)), Unit: "iter/s", Metrics: map[string]float64{}}
	side := &recurSide{at: make(stamps, n), wake: make(chan struct{}, 1)}
	wf := recurWorkflow(side)
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(wf), PassivateAfter: r.opts.PassivateAfter})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()

	var cps []int
	for _, c := range recurCheckpoints {
		if c < n {
			cps = append(cps, c)
		}
	}
	cps = append(cps, n)
	rss := make([]int64, len(cps))
	heap := make([]int64, len(cps))
	// The process's CPU time at the start and end of each checkpoint's span,
	// with the iterations done when it was read: unlike the wall-clock
	// figures, CPU per iteration does not swing with fsync latency.
	type cpuMark struct {
		done  int
		cpu   time.Duration
		taken bool
	}
	cpuFrom, cpuTo := make([]cpuMark, len(cps)), make([]cpuMark, len(cps))
	next := 0 // first checkpoint whose RSS is not taken yet
	checkpoints := func() {
		done := int(side.consumed.Load())
		for k, c := range cps {
			if !cpuFrom[k].taken && done >= max(0, c-recurSpan) {
				cpuFrom[k] = cpuMark{done: done, cpu: processCPU(), taken: true}
			}
		}
		for next < len(cps) && done >= cps[next] {
			cpuTo[next] = cpuMark{done: done, cpu: processCPU(), taken: true}
			rss[next], heap[next] = currentRSS(), heapLive()
			r.logf("%s iterations, RSS %s, live heap %s", fmtInt(int64(cps[next])), fmtBytes(rss[next]), fmtBytes(heap[next]))
			next++
		}
	}
	// waitFor waits until at least target iterations are done; it fails if
	// none is done for -timeout, or if the instance ends (a failed check in
	// the workflow) first.
	ended := make(chan struct{})
	var endedAs actor.Instance
	stall := time.NewTimer(r.opts.Timeout)
	defer stall.Stop()
	waitFor := func(target int) error {
		if int(side.consumed.Load()) >= target {
			return nil
		}
		stall.Reset(r.opts.Timeout)
		for int(side.consumed.Load()) < target {
			select {
			case <-side.wake:
				stall.Reset(r.opts.Timeout)
				checkpoints()
			case <-ended:
				return fmt.Errorf("instance ended after %d of %d iterations: %s %s", side.consumed.Load(), n, endedAs.Status, endedAs.Error)
			case <-stall.C:
				return fmt.Errorf("no progress for %s: %d of %d iterations", r.opts.Timeout, side.consumed.Load(), n)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}

	r.logf("%d iterations, at most %d messages in flight", n, recurWindow)
	checkpoints()
	t0 := time.Now()
	pid, err := actor.Spawn(ctx, nd.sys, wf, 0)
	if err != nil {
		return res, err
	}
	ectx, ecancel := context.WithCancel(ctx)
	defer ecancel()
	go func() {
		if inst, err := nd.sys.AwaitDone(ectx, pid); err == nil {
			endedAs = inst
			close(ended)
		}
	}()
	for i := range n {
		if err := waitFor(i - recurWindow + 1); err != nil {
			return res, err
		}
		checkpoints()
		if err := nd.sys.Send(ctx, pid, i); err != nil {
			return res, fmt.Errorf("send %d: %w", i, err)
		}
	}
	if err := waitFor(n); err != nil {
		return res, err
	}
	checkpoints()
	if err := nd.sys.Send(ctx, pid, -1); err != nil {
		return res, fmt.Errorf("send stop: %w", err)
	}
	actx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	got, err := actor.Await(actx, nd.sys, wf, pid)
	wall := time.Since(t0)
	if err != nil {
		return res, fmt.Errorf("await: %w", err)
	}
	peak := peakRSS()
	info, err := nd.sys.Inspect(ctx, pid)
	if err != nil {
		return res, fmt.Errorf("inspect: %w", err)
	}
	disk, _ := nd.diskBytes(ctx)

	// Per-iteration times: steps[i-1] is the time between the consumptions
	// of iterations i-1 and i (all n are stamped: waitFor saw n). Each
	// checkpoint c gets the mean and the median over the recurSpan steps up
	// to iteration c.
	steps := make([]time.Duration, n-1)
	for i := 1; i < n; i++ {
		a, _ := side.at.get(i - 1)
		b, _ := side.at.get(i)
		steps[i-1] = b.Sub(a)
	}
	per := make([]time.Duration, len(cps))
	med := make([]time.Duration, len(cps))
	cpu := make([]time.Duration, len(cps))
	for k, c := range cps {
		if f, t := cpuFrom[k], cpuTo[k]; t.done > f.done {
			cpu[k] = (t.cpu - f.cpu) / time.Duration(t.done-f.done)
		}
		hi := c - 1
		win := steps[max(0, hi-recurSpan):hi]
		if len(win) > 0 {
			a, _ := side.at.get(hi - len(win))
			b, _ := side.at.get(hi)
			per[k] = b.Sub(a) / time.Duration(len(win))
			med[k] = summarize(win).P50
		}
	}
	ratio, medRatio := 1.0, 1.0
	if per[0] > 0 && med[0] > 0 {
		ratio = float64(per[len(per)-1]) / float64(per[0])
		medRatio = float64(med[len(med)-1]) / float64(med[0])
	}

	l := summarize(steps)
	res.Throughput, res.P50, res.P99, res.Wall = rate(n, wall), l.P50, l.P99, wall
	var perS, cpuS, rssS []string
	for k, c := range cps {
		label := shortCount(c)
		perS = append(perS, fmt.Sprintf("@%s %s", label, fmtDur(per[k])))
		cpuS = append(cpuS, fmt.Sprintf("@%s %s", label, fmtDur(cpu[k])))
		rssS = append(rssS, fmt.Sprintf("@%s %s", label, fmtBytes(rss[k])))
		res.Metrics[fmt.Sprintf("us_per_iter_%d", c)] = float64(per[k]) / float64(time.Microsecond)
		res.Metrics[fmt.Sprintf("median_us_per_iter_%d", c)] = float64(med[k]) / float64(time.Microsecond)
		res.Metrics[fmt.Sprintf("cpu_us_per_iter_%d", c)] = float64(cpu[k]) / float64(time.Microsecond)
		res.Metrics[fmt.Sprintf("rss_bytes_%d", c)] = float64(rss[k])
		res.Metrics[fmt.Sprintf("heap_live_bytes_%d", c)] = float64(heap[k])
	}
	res.Metrics["last_first_ratio"] = ratio
	res.Metrics["median_last_first_ratio"] = medRatio
	res.Metrics["peak_rss_bytes"] = float64(peak)
	res.Metrics["run"] = float64(info.Run)
	res.Metrics["history_len"] = float64(len(info.History))
	res.Metrics["mailbox_depth"] = float64(info.MailboxDepth)
	res.Metrics["disk_bytes"] = float64(disk)
	res.Extra = fmt.Sprintf("p50/p99 between iterations; per iter (mean of the %s up to) %s, last/first %.2f (medians %.2f); CPU per iter %s; RSS %s, peak %s; final run %s, history %d events; store %s",
		fmtInt(recurSpan), strings.Join(perS, " "), ratio, medRatio, strings.Join(cpuS, " "), strings.Join(rssS, " "), fmtBytes(peak),
		fmtInt(info.Run), len(info.History), fmtBytes(disk))

	if got != n {
		return res, fmt.Errorf("workflow counted %d iterations, want %d", got, n)
	}
	if info.Run != int64(n) {
		return res, fmt.Errorf("final run %d, want %d", info.Run, n)
	}
	if len(info.History) > 3 {
		return res, fmt.Errorf("final history has %d events, want at most 3", len(info.History))
	}
	return res, nil
}

// processCPU is the process's user + system CPU time so far (0 if unknown).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapLive is the Go heap still live at the last garbage collection
// (runtime/metrics, no collection forced), -1 if unknown.
func heapLive() int64 {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return -1
	}
	return int64(sample[0].Value.Uint64())
}

// shortCount prints round counts short: 1k, 100k, 1M.
func shortCount(n int) string {
	switch {
	case n >= 1000000 && n%1000000 == 0:
		return fmt.Sprintf("%dM", n/1000000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	default:
		return fmtInt(int64(n))
	}
}
