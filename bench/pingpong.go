package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
)

type pingInput struct {
	Peer actor.PID
	M    int
}

// pingpong exchanges messages by PID between a pinger and an echo instance.
//
// The pinger stamps each round trip through pingTimes, a benchmark-only
// side channel: a workflow must not touch outside state (it breaks
// determinism on replay), but nothing is replayed here, the stamps are
// skipped while replaying, and the first stamp per round wins, so a replay
// could not distort them anyway. It adds no commits, so the figures are
// those of the durable path alone.
type pingTimes struct {
	sent stamps // when the pinger was about to send ping i
	back stamps // when pong i reached the pinger
}

func pingWorkflows(tm *pingTimes) (echo *actor.WorkflowDef[int, int], ping *actor.WorkflowDef[pingInput, int]) {
	echo = actor.Workflow("echo", func(ctx *actor.Context, _ int) (int, error) {
		for n := 0; ; n++ {
			m, err := actor.Receive[int](ctx)
			if err != nil {
				return n, err
			}
			if m.Value < 0 {
				return n, nil
			}
			if err := ctx.Send(m.Sender, m.Value); err != nil {
				return n, err
			}
		}
	})
	ping = actor.Workflow("ping", func(ctx *actor.Context, in pingInput) (int, error) {
		for i := range in.M {
			if !ctx.Replaying() {
				tm.sent.set(i, time.Now())
			}
			if err := ctx.Send(in.Peer, i); err != nil {
				return i, err
			}
			m, err := actor.Receive[int](ctx, mailbox.From(in.Peer))
			if err != nil {
				return i, err
			}
			if m.Value != i {
				return i, fmt.Errorf("pong %d, want %d", m.Value, i)
			}
			if !ctx.Replaying() {
				tm.back.set(i, time.Now())
			}
		}
		return in.M, ctx.Send(in.Peer, -1)
	})
	return echo, ping
}

// runPingPong times M round trips between two instances. Each round trip is
// two commits in sequence (ping sent; ping consumed + pong sent) and two
// wake-ups, so it measures commit latency more than throughput.
func runPingPong(ctx context.Context, r *runner) (result, error) {
	m := size(2000, r.opts.M, r.opts.N)
	res := result{N: fmtInt(int64(m)), Unit: "msg/s", Metrics: map[string]float64{}}
	tm := &pingTimes{sent: make(stamps, m), back: make(stamps, m)}
	echo, ping := pingWorkflows(tm)
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(echo, ping), PassivateAfter: r.opts.PassivateAfter})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()
	actx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()

	b, err := actor.Spawn(ctx, nd.sys, echo, 0)
	if err != nil {
		return res, err
	}
	r.logf("%d round trips", m)
	t0 := time.Now()
	a, err := actor.Spawn(ctx, nd.sys, ping, pingInput{Peer: b, M: m})
	if err != nil {
		return res, err
	}
	got, err := actor.Await(actx, nd.sys, ping, a)
	wall := time.Since(t0)
	if err != nil {
		return res, fmt.Errorf("pinger: %w", err)
	}
	echoed, err := actor.Await(actx, nd.sys, echo, b)
	if err != nil {
		return res, fmt.Errorf("echo: %w", err)
	}
	if got != m || echoed != m {
		return res, fmt.Errorf("pinger did %d round trips, echo %d; want %d", got, echoed, m)
	}
	rtts := make([]time.Duration, 0, m)
	for i := range m {
		s, ok1 := tm.sent.get(i)
		e, ok2 := tm.back.get(i)
		if ok1 && ok2 {
			rtts = append(rtts, e.Sub(s))
		}
	}
	l := summarize(rtts)
	res.Throughput, res.P50, res.P99, res.Wall = rate(2*m, wall), l.P50, l.P99, wall
	res.Metrics["round_trips_per_s"] = rate(m, wall)
	res.Extra = fmt.Sprintf("round trip p50/p99 (2 msgs, 2 commits); %s round trips/s; max %s", fmtRate(rate(m, wall)), fmtDur(l.Max))
	return res, nil
}
