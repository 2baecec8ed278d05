package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence"
)

type sleepInput struct {
	Index int
	D     time.Duration
	Until time.Time // instead of D: an absolute due time (-due-within)
}

// timerSide is the benchmark-only side channel of the timers workload (see
// pingTimes): which instances reached their sleep, each one's due time and
// when it woke up. Each slot is written once, by the instance's goroutine,
// before the counter marks it; the times keep their monotonic clock reading,
// so lateness is immune to wall-clock steps.
type timerSide struct {
	parked *doneCounter
	fired  *doneCounter
	due    []time.Time
	woke   []time.Time
}

func newTimerSide(n int) *timerSide {
	return &timerSide{parked: newDoneCounter(n), fired: newDoneCounter(n), due: make([]time.Time, n), woke: make([]time.Time, n)}
}

func sleeperWorkflow(side *timerSide) *actor.WorkflowDef[sleepInput, int] {
	return actor.Workflow("sleeper", func(ctx *actor.Context, in sleepInput) (int, error) {
		due := ctx.Now().Add(in.D)
		if !in.Until.IsZero() {
			due = in.Until
		}
		if !side.parked.flags[in.Index].Load() {
			side.due[in.Index] = due
			side.parked.mark(in.Index)
		}
		if err := ctx.SleepUntil(due); err != nil {
			return 0, err
		}
		if !side.fired.flags[in.Index].Load() {
			side.woke[in.Index] = time.Now()
			side.fired.mark(in.Index)
		}
		return in.Index, nil
	})
}

// runTimers: K instances each sleep once for a random 1–5 s (durable timer)
// and report how late they woke. Then a second System on a fresh store
// spawns -pending instances that sleep an hour, to show the memory and
// goroutines 100k pending timers cost before and after passivation.
func runTimers(ctx context.Context, r *runner) (result, error) {
	k := size(10000, r.opts.K, r.opts.N)
	res := result{N: fmtInt(int64(k)), Unit: "fired/s", Metrics: map[string]float64{}}
	side := newTimerSide(k)
	wf := sleeperWorkflow(side)
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(wf), PassivateAfter: r.opts.PassivateAfter})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()

	rng := rand.New(rand.NewPCG(1, 2))
	durs := make([]time.Duration, k)
	for i := range durs {
		durs[i] = r.opts.SleepMin + time.Duration(rng.Int64N(max(int64(r.opts.SleepMax-r.opts.SleepMin), 0)+1))
	}
	// -due-within: every timer is pending at once, due in one window that
	// opens -sleep-min after the start (the spawning must end before).
	t0 := time.Now()
	window := r.opts.DueWithin
	if window > 0 {
		r.logf("spawning %d sleepers due within %s from %s after the start", k, window, r.opts.SleepMin)
	} else {
		r.logf("spawning %d sleepers (%s–%s)", k, r.opts.SleepMin, r.opts.SleepMax)
	}
	pids := make([]actor.PID, k)
	err = parallel(ctx, k, r.opts.Spawners, func(ctx context.Context, i int) error {
		in := sleepInput{Index: i, D: durs[i]}
		if window > 0 {
			in.Until = t0.Add(r.opts.SleepMin + time.Duration(int64(window)*int64(i)/int64(k)))
		}
		var err error
		pids[i], err = actor.Spawn(ctx, nd.sys, wf, in)
		return err
	})
	if err != nil {
		return res, err
	}
	if window > 0 {
		if spent := time.Since(t0); spent > r.opts.SleepMin {
			return res, fmt.Errorf("spawning took %s, longer than -sleep-min %s: the first timers were due before their sleep began", spent.Round(time.Millisecond), r.opts.SleepMin)
		}
		r.logf("all %d spawned after %s; the timers come due from %s on", k, time.Since(t0).Round(time.Millisecond), r.opts.SleepMin)
	}
	wctx, cancel := context.WithTimeout(ctx, max(r.opts.SleepMax, r.opts.SleepMin+window)+r.opts.Timeout)
	defer cancel()
	if err := side.fired.wait(wctx); err != nil {
		return res, fmt.Errorf("timers firing: %w", err)
	}
	// Completion is checked afterwards with a bounded pool, so that k
	// waiters do not load the store while the timers fire.
	if failed, first := awaitAll(wctx, nd.sys, pids, r.opts.Spawners); failed > 0 {
		return res, fmt.Errorf("%d sleepers did not complete; first: %w", failed, first)
	}
	if err := nd.Close(); err != nil {
		return res, err
	}
	late := make([]time.Duration, k)
	early := 0
	firstDue, lastWoke := side.due[0], side.woke[0]
	for i := range k {
		late[i] = side.woke[i].Sub(side.due[i])
		if late[i] < 0 {
			early++
		}
		if side.due[i].Before(firstDue) {
			firstDue = side.due[i]
		}
		if side.woke[i].After(lastWoke) {
			lastWoke = side.woke[i]
		}
	}
	l := summarize(late)
	// fired/s is over the span in which the timers came due and fired; it is
	// bounded by the offered rate (K over the sleep spread), so lateness is
	// the figure that shows whether the node kept up.
	span := lastWoke.Sub(firstDue)
	res.Throughput, res.P50, res.P99 = rate(k, span), l.P50, l.P99
	res.Metrics["late_max_ms"] = float64(l.Max) / float64(time.Millisecond)
	res.Metrics["early"] = float64(early)
	res.Extra = fmt.Sprintf("lateness; max %s", fmtDur(l.Max))
	if window > 0 {
		res.Extra = fmt.Sprintf("lateness, all %s pending at once, due within %s; max %s", fmtInt(int64(k)), window, fmtDur(l.Max))
	}
	if early > 0 {
		return res, fmt.Errorf("%d timers fired early (min lateness %s)", early, slices.Min(late))
	}

	if r.opts.Pending > 0 {
		extra, err := pendingTimers(ctx, r, res.Metrics)
		res.Extra += "; " + extra
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// pendingTimers is the second phase of the timers workload.
func pendingTimers(ctx context.Context, r *runner, metrics map[string]float64) (string, error) {
	n := r.opts.Pending
	passivate := r.opts.passivate(time.Second)
	side := newTimerSide(n)
	wf := sleeperWorkflow(side)
	settle()
	resetPeakRSS()
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(wf), PassivateAfter: passivate})
	if err != nil {
		return "", err
	}
	defer func() { _ = nd.Close() }()
	base := runtime.NumGoroutine()
	smp := startSampler(50 * time.Millisecond)

	r.logf("spawning %d instances sleeping 1h (PassivateAfter %s)", n, passivate)
	pids := make([]actor.PID, n)
	ids := make(map[actor.PID]bool, n)
	t0 := time.Now()
	err = parallel(ctx, n, r.opts.Spawners, func(ctx context.Context, i int) error {
		var err error
		pids[i], err = actor.Spawn(ctx, nd.sys, wf, sleepInput{Index: i, D: time.Hour})
		return err
	})
	spawned := time.Since(t0)
	if err != nil {
		smp.Stop()
		return "", err
	}
	for _, p := range pids {
		ids[p] = true
	}
	wctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	if err := side.parked.wait(wctx); err != nil {
		smp.Stop()
		return "", fmt.Errorf("sleepers parking: %w", err)
	}
	stored, err := waitTimers(wctx, nd.store, ids)
	activeG, activeRSS := smp.Stop()
	peak := peakRSS()
	if err != nil {
		return "", fmt.Errorf("%d of %d timers stored: %w", stored, n, err)
	}
	r.logf("%d timers stored; waiting for passivation", stored)
	waiting, err := waitStatus(wctx, nd.store, wf.Name(), persistence.StatusWaiting, ids)
	if err != nil {
		return "", fmt.Errorf("passivation: %w", err)
	}
	g := waitGoroutines(wctx, base+50)
	settle()
	rss := currentRSS()
	r.heapProfile()
	disk, _ := nd.diskBytes(ctx)
	if !r.t.temp() {
		// Leave a shared database as we found it: no hour-long sleepers.
		r.logf("cancelling the %d sleepers", n)
		for _, pid := range pids {
			if err := nd.sys.Cancel(ctx, pid, "bench cleanup"); err != nil {
				return "", err
			}
		}
		_, _ = awaitAll(wctx, nd.sys, pids, r.opts.Spawners)
	}
	metrics["pending"] = float64(n)
	metrics["pending_spawn_per_s"] = rate(n, spawned)
	metrics["pending_peak_goroutines"] = float64(activeG)
	metrics["pending_peak_rss_bytes"] = float64(max(peak, activeRSS))
	metrics["pending_goroutines_passivated"] = float64(g)
	metrics["pending_rss_passivated_bytes"] = float64(rss)
	metrics["pending_waiting"] = float64(waiting)
	metrics["pending_disk_bytes"] = float64(disk)
	extra := fmt.Sprintf("%s pending (1h, spawn %s/s): active peak %s goroutines, RSS %s; passivated (%s/%s waiting) %s goroutines, RSS %s; disk %s",
		fmtInt(int64(n)), fmtRate(rate(n, spawned)), fmtInt(int64(activeG)), fmtBytes(max(peak, activeRSS)),
		fmtInt(int64(waiting)), fmtInt(int64(n)), fmtInt(int64(g)), fmtBytes(rss), fmtBytes(disk))
	if g > base+50 {
		return extra, fmt.Errorf("%d goroutines still running after %s (%d before spawning)", g, r.opts.Timeout, base)
	}
	return extra, nil
}

// waitTimers polls the store until every instance in ids has its timer
// stored (the sleep's commit), and returns how many have.
func waitTimers(ctx context.Context, st persistence.Store, ids map[actor.PID]bool) (int, error) {
	for {
		ts, err := st.DueTimers(ctx, time.Now().Add(2*time.Hour), nil, len(ids)+10000)
		if err != nil {
			return 0, err
		}
		n := 0
		for _, t := range ts {
			if ids[actor.PID(t.Instance)] {
				n++
			}
		}
		if n == len(ids) {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
