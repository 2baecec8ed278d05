package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
)

type subscriberInput struct {
	Channel string
	Index   int
	M       int
}

// fanoutSide is the benchmark-only side channel of the fanout workload (see
// pingTimes): subscriptions done, and when subscriber s received message i.
type fanoutSide struct {
	subscribed *doneCounter
	got        stamps // index s*M + i
	m          int
}

func subscriberWorkflow(side *fanoutSide) *actor.WorkflowDef[subscriberInput, int] {
	return actor.Workflow("subscriber", func(ctx *actor.Context, in subscriberInput) (int, error) {
		if err := ctx.Subscribe(in.Channel, mailbox.Broadcast); err != nil {
			return 0, err
		}
		side.subscribed.mark(in.Index)
		for k := range in.M {
			m, err := actor.Receive[int](ctx, mailbox.OnChannel(in.Channel))
			if err != nil {
				return k, err
			}
			if m.Value != k {
				return k, fmt.Errorf("message %d arrived as number %d", m.Value, k)
			}
			side.got.set(in.Index*side.m+m.Value, time.Now())
		}
		return in.M, nil
	})
}

// runFanout: S instances subscribe to a broadcast channel, one publisher
// publishes M messages, every subscriber receives all M and ends.
func runFanout(ctx context.Context, r *runner) (result, error) {
	s := size(100, r.opts.S)
	m := size(200, r.opts.M, r.opts.N)
	res := result{N: fmt.Sprintf("%d×%d", s, m), Unit: "deliveries/s", Metrics: map[string]float64{}}
	side := &fanoutSide{subscribed: newDoneCounter(s), got: make(stamps, s*m), m: m}
	wf := subscriberWorkflow(side)
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(wf), PassivateAfter: r.opts.PassivateAfter})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()
	channel := "news-" + runID()
	wctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()

	pids := make([]actor.PID, s)
	err = parallel(ctx, s, r.opts.Spawners, func(ctx context.Context, i int) error {
		var err error
		pids[i], err = actor.Spawn(ctx, nd.sys, wf, subscriberInput{Channel: channel, Index: i, M: m})
		return err
	})
	if err != nil {
		return res, err
	}
	if err := side.subscribed.wait(wctx); err != nil {
		return res, fmt.Errorf("subscribing: %w", err)
	}

	r.logf("publishing %d messages to %d subscribers", m, s)
	pubAt := make(stamps, m)
	t0 := time.Now()
	for i := range m {
		pubAt.set(i, time.Now())
		if _, err := nd.sys.Publish(ctx, channel, i); err != nil {
			return res, fmt.Errorf("publish: %w", err)
		}
	}
	published := time.Since(t0)
	for _, pid := range pids {
		if _, err := actor.Await(wctx, nd.sys, wf, pid); err != nil {
			return res, fmt.Errorf("subscriber %s: %w", pid, err)
		}
	}
	wall := time.Since(t0)

	lat := make([]time.Duration, 0, s*m)
	for k := range side.got {
		g, ok1 := side.got.get(k)
		p, ok2 := pubAt.get(k % m)
		if ok1 && ok2 {
			lat = append(lat, g.Sub(p))
		}
	}
	l := summarize(lat)
	missing := s*m - len(lat)
	res.Throughput, res.P50, res.P99, res.Wall = rate(s*m, wall), l.P50, l.P99, wall
	res.Metrics["missing"] = float64(missing)
	res.Metrics["publish_per_s"] = rate(m, published)
	res.Extra = fmt.Sprintf("publish→receive; 1 publisher at %s msg/s; max %s", fmtRate(rate(m, published)), fmtDur(l.Max))
	if missing > 0 {
		return res, fmt.Errorf("%d deliveries not observed", missing)
	}
	return res, nil
}
