package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/clusternode"
)

// failoverVictim is the node the failover workload kills.
const failoverVictim = "n3"

// runFailover: three node processes on one store; N sleepers whose timers
// come due shortly after the victim node is killed -9. The survivors must
// take the victim's instances over (their leases last an hour, so only the
// take-over of a dead node's leases can free them) and fire every timer,
// once. The figure is kill → timer fired, read from each instance's history.
func runFailover(ctx context.Context, r *runner) (result, error) {
	n := size(1000, r.opts.N)
	res := result{N: fmtInt(int64(n)), Unit: "fired/s", Metrics: map[string]float64{}}
	// An hour: the leases never expire during the run, and the recovery
	// scan never runs after the start, so neither hides a missed take-over.
	c, err := startCluster(ctx, r, []string{"n1", "n2", "n3"}, nodeSpec{LeaseTTL: time.Hour, Recovery: time.Hour})
	if err != nil {
		return res, err
	}
	defer c.close()

	placed := ""
	if r.opts.OnVictim {
		placed = failoverVictim
	}
	ids := c.idsOn("fo-"+runID(), placed, n)
	onVictim := map[string]bool{}
	for _, id := range ids {
		onVictim[id] = c.owner(id) == failoverVictim
	}
	lead := r.opts.Lead
	if lead <= 0 {
		lead = 3*time.Second + time.Duration(n)*3*time.Millisecond
	}
	t0 := time.Now()
	due := t0.Add(lead)
	killAt := due.Add(-r.opts.KillBefore)
	r.logf("spawning %d sleepers due in %s (%d on %s), kill %s before", n, lead, count(onVictim), failoverVictim, r.opts.KillBefore)
	err = parallel(ctx, n, r.opts.Spawners, func(ctx context.Context, i int) error {
		_, err := actor.Spawn(ctx, c.client.Sys, c.client.Sleeper, clusternode.SleepInput{Until: due}, actor.WithID(ids[i]))
		return err
	})
	if err != nil {
		return res, fmt.Errorf("spawn: %w", err)
	}
	wctx, cancel := context.WithDeadline(ctx, killAt)
	err = c.waitFor(wctx, "every sleeper live on its owner", func() bool {
		for _, id := range ids {
			if c.activated[id] != c.owner(id) {
				return false
			}
		}
		return true
	})
	cancel()
	if err != nil {
		return res, fmt.Errorf("%w (spawning took %s; raise -lead or lower -n)", err, time.Since(t0).Round(time.Millisecond))
	}
	r.logf("all live after %s; killing %s at due−%s", time.Since(t0).Round(time.Millisecond), failoverVictim, r.opts.KillBefore)
	select {
	case <-time.After(time.Until(killAt)):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	killed := time.Now()
	c.procs[failoverVictim].kill9()
	r.logf("killed %s at %s", failoverVictim, killed.UTC().Format("15:04:05.000"))

	wctx, cancel = context.WithTimeout(ctx, r.opts.Timeout)
	waitErr := c.waitFor(wctx, "every sleeper completed", func() bool { return len(c.completed) >= n })
	cancel()
	if waitErr != nil {
		r.logf("%v", waitErr)
	}

	// The store is the judge: each history must hold one timer_fired.
	type outcome struct {
		fires int
		at    time.Time
	}
	outs := make([]outcome, n)
	hctx, hcancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer hcancel()
	err = parallel(hctx, n, 16, func(ctx context.Context, i int) error {
		hist, err := c.client.Sys.History(ctx, actor.PID(ids[i]))
		if err != nil {
			return fmt.Errorf("history of %s: %w", ids[i], err)
		}
		for _, e := range hist {
			if e.Kind == actor.EventTimerFired {
				if outs[i].fires == 0 {
					outs[i].at = e.At
				}
				outs[i].fires++
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	c.mu.Lock()
	completedOn := make(map[string]string, len(c.completed))
	for k, v := range c.completed {
		completedOn[k] = v
	}
	c.mu.Unlock()
	hookFires := c.count("fired")
	res.Metrics["node_warnings"] = float64(c.logWarnings())

	var lat, late []time.Duration
	twice, lost, onDead, extraHooks := 0, 0, 0, 0
	var last time.Time
	for i, id := range ids {
		o := outs[i]
		switch {
		case o.fires == 0 || completedOn[id] == "":
			lost++
			continue
		case o.fires > 1:
			twice++
		}
		if completedOn[id] == failoverVictim {
			onDead++
		}
		extraHooks += max(0, hookFires[id]-1)
		late = append(late, o.at.Sub(due))
		if onVictim[id] {
			lat = append(lat, o.at.Sub(killed))
			if o.at.After(last) {
				last = o.at
			}
		}
	}
	l, lt := summarize(lat), summarize(late)
	r.logf("timers fired per 250ms after the kill: %s", histogram(lat, 250*time.Millisecond))
	first := time.Duration(0)
	if len(lat) > 0 {
		first = slices.Min(lat)
	}
	res.P50, res.P99 = l.P50, l.P99
	res.Throughput = rate(len(lat), last.Sub(killed))
	res.Metrics["taken_over"] = float64(count(onVictim))
	res.Metrics["fired_twice"] = float64(twice)
	res.Metrics["lost"] = float64(lost)
	res.Metrics["ran_on_killed"] = float64(onDead)
	res.Metrics["kill_to_fired_max_ms"] = float64(l.Max) / float64(time.Millisecond)
	res.Metrics["lateness_p99_ms"] = float64(lt.P99) / float64(time.Millisecond)
	res.Metrics["kill_to_first_fired_ms"] = float64(first) / float64(time.Millisecond)
	res.Extra = fmt.Sprintf("kill→fired p50/p99, first %s, max %s, of %d on the killed node (due %s after the kill); lateness p99 %s; fired twice %d, lost %d",
		fmtDur(first), fmtDur(l.Max), count(onVictim), r.opts.KillBefore, fmtDur(lt.P99), twice, lost)
	if rel := c.releaseTimes(); len(rel) > 0 {
		var names []string
		for name := range rel {
			names = append(names, name)
		}
		slices.Sort(names)
		var parts []string
		for _, name := range names {
			parts = append(parts, fmt.Sprintf("%s %s", name, fmtDur(rel[name])))
			res.Metrics["release_ms_"+name] = float64(rel[name]) / float64(time.Millisecond)
		}
		res.Extra += "; release of its leases: " + strings.Join(parts, ", ")
	}
	if extraHooks > 0 {
		res.Extra += fmt.Sprintf("; %d fire attempts fenced", extraHooks)
	}
	if twice > 0 || lost > 0 || onDead > 0 {
		return res, fmt.Errorf("%d timers fired twice, %d never fired (%v), %d ran on the killed node", twice, lost, waitErr, onDead)
	}
	return res, nil
}

// histogram counts ds in buckets of width w, from 0 to the largest, as
// "0 0 12 340 …".
func histogram(ds []time.Duration, w time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	counts := make([]string, int(slices.Max(ds)/w)+1)
	n := make([]int, len(counts))
	for _, d := range ds {
		n[max(0, int(d/w))]++
	}
	for i, c := range n {
		counts[i] = strconv.Itoa(c)
	}
	return strings.Join(counts, " ")
}

// count counts the true values of m.
func count(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}
