package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/clusternode"
)

// runCrossPingPong: two node processes on one store; P pingers on n1 each
// exchange M messages by PID with a ponger on n2, so every message is a
// commit on one node and a remote wake-up of the other. The round trips
// are read from the pingers' histories (the time each ping was sent and
// each pong received, both stamped by n1), so no side channel is needed.
func runCrossPingPong(ctx context.Context, r *runner) (result, error) {
	m := size(2000, r.opts.M, r.opts.N)
	pairs := size(1, r.opts.P)
	res := result{N: fmt.Sprintf("%s×%d", fmtInt(int64(m)), pairs), Unit: "msg/s", Metrics: map[string]float64{}}
	c, err := startCluster(ctx, r, []string{"n1", "n2"}, nodeSpec{})
	if err != nil {
		return res, err
	}
	defer c.close()

	run := runID()
	pings, pongs := c.idsOn("ping-"+run, "n1", pairs), c.idsOn("pong-"+run, "n2", pairs)
	actx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	r.logf("%d pairs × %d round trips, pingers on n1, pongers on n2", pairs, m)
	t0 := time.Now()
	for i := range pairs {
		if _, err := actor.Spawn(ctx, c.client.Sys, clusternode.Ponger, m, actor.WithID(pongs[i])); err != nil {
			return res, err
		}
		if _, err := actor.Spawn(ctx, c.client.Sys, clusternode.Pinger, clusternode.PingInput{Peer: actor.PID(pongs[i]), Times: m},
			actor.WithID(pings[i])); err != nil {
			return res, err
		}
	}
	for i := range pairs {
		got, err := actor.Await(actx, c.client.Sys, clusternode.Pinger, actor.PID(pings[i]))
		if err != nil || got != m {
			return res, fmt.Errorf("pinger %s: %d round trips, %v", pings[i], got, err)
		}
	}
	wall := time.Since(t0)
	for i := range pairs {
		got, err := actor.Await(actx, c.client.Sys, clusternode.Ponger, actor.PID(pongs[i]))
		if err != nil || got != m {
			return res, fmt.Errorf("ponger %s: %d pongs, %v", pongs[i], got, err)
		}
	}
	var rtts []time.Duration
	for _, id := range pings {
		hist, err := c.client.Sys.History(actx, actor.PID(id))
		if err != nil {
			return res, fmt.Errorf("history of %s: %w", id, err)
		}
		var sent time.Time
		n := 0
		for _, e := range hist {
			switch e.Kind {
			case actor.EventSent:
				sent = e.At
			case actor.EventReceived:
				if !sent.IsZero() {
					rtts = append(rtts, e.At.Sub(sent))
					sent = time.Time{}
					n++
				}
			}
		}
		if n != m {
			return res, fmt.Errorf("%s: %d round trips in its history, want %d", id, n, m)
		}
	}
	c.mu.Lock()
	for _, id := range append(append([]string{}, pings...), pongs...) {
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
	res.Throughput, res.P50, res.P99, res.Wall = rate(2*m*pairs, wall), l.P50, l.P99, wall
	res.Metrics["round_trips_per_s"] = rate(m*pairs, wall)
	res.Extra = fmt.Sprintf("round trip p50/p99 across nodes (2 msgs, 2 commits, 2 remote wake-ups); %s round trips/s; max %s",
		fmtRate(rate(m*pairs, wall)), fmtDur(l.Max))
	return res, nil
}
