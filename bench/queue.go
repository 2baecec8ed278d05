package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

type consumerInput struct {
	Channel  string
	Index    int
	Prefetch int
}

// queueSide is the benchmark-only side channel of the queue workload (see
// pingTimes): which consumers have subscribed, and when each message was
// first consumed. It only tells the driver when to stop; duplicates and
// losses are counted from the store.
type queueSide struct {
	subscribed *doneCounter
	consumed   *doneCounter
	at         stamps // first consumption of message i
}

func consumerWorkflow(side *queueSide) *actor.WorkflowDef[consumerInput, int] {
	return actor.Workflow("consumer", func(ctx *actor.Context, in consumerInput) (int, error) {
		if err := ctx.Subscribe(in.Channel, mailbox.Competing, mailbox.Prefetch(in.Prefetch)); err != nil {
			return 0, err
		}
		side.subscribed.mark(in.Index)
		for n := 0; ; n++ {
			m, err := actor.Receive[int](ctx, mailbox.OnChannel(in.Channel))
			if err != nil {
				return n, err
			}
			// A competing Receive returns after its claim committed.
			if side.at.set(m.Value, time.Now()) {
				side.consumed.mark(m.Value)
			}
		}
	})
}

// relayWorkflow publishes on channel each number sent to it by PID: a
// workflow's publish, as a pipeline stage makes one.
func relayWorkflow() *actor.WorkflowDef[string, int] {
	return actor.Workflow("relay", func(ctx *actor.Context, channel string) (int, error) {
		for n := 0; ; n++ {
			r, err := actor.Receive[int](ctx)
			if err != nil {
				return n, err
			}
			if _, err := ctx.Publish(channel, r.Value); err != nil {
				return n, err
			}
		}
	})
}

// runQueue: P consumers share a competing channel; M messages are published
// from several goroutines; once all are consumed (or -timeout passes) the
// consumers are cancelled and every consumer's history is read back from the
// store to count duplicates and losses.
func runQueue(ctx context.Context, r *runner) (result, error) {
	m := size(10000, r.opts.M, r.opts.N)
	p := size(8, r.opts.P)
	pubs := size(4, r.opts.Publishers)
	res := result{N: fmtInt(int64(m)), Unit: "msg/s", Metrics: map[string]float64{}}
	side := &queueSide{subscribed: newDoneCounter(p), consumed: newDoneCounter(m), at: make(stamps, m)}
	wf := consumerWorkflow(side)
	relay := relayWorkflow()
	if r.opts.Relay && r.opts.PublishBatch > 1 {
		return res, errors.New("queue: -relay publishes one message per send; drop -publish-batch")
	}
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(wf, relay), PassivateAfter: r.opts.PassivateAfter})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()
	channel := "jobs-" + runID()
	var relays []actor.PID
	if r.opts.Relay {
		for range pubs {
			pid, err := actor.Spawn(ctx, nd.sys, relay, channel)
			if err != nil {
				return res, err
			}
			relays = append(relays, pid)
		}
		defer func() {
			for _, pid := range relays {
				_ = nd.sys.Cancel(ctx, pid, "bench done")
			}
		}()
	}
	wctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()

	spawn := func() ([]actor.PID, error) {
		pids := make([]actor.PID, p)
		for i := range p {
			var err error
			if pids[i], err = actor.Spawn(ctx, nd.sys, wf, consumerInput{Channel: channel, Index: i, Prefetch: r.opts.Prefetch}); err != nil {
				return nil, err
			}
		}
		if err := side.subscribed.wait(wctx); err != nil {
			return nil, fmt.Errorf("consumers subscribing: %w", err)
		}
		return pids, nil
	}
	var pids []actor.PID
	if !r.opts.Backlog {
		if pids, err = spawn(); err != nil {
			return res, err
		}
	}

	r.logf("publishing %d messages from %d goroutines to %d consumers (backlog first: %v)", m, pubs, p, r.opts.Backlog)
	// The store's commits while the messages go through (a count that
	// load does not distort): group commits, and the writes they carried.
	commits := &writeCounter{}
	remove := nd.store.ObserveCommits(commits)
	defer remove()
	pubAt := make(stamps, m)
	t0 := time.Now()
	batch := max(1, r.opts.PublishBatch)
	err = parallel(ctx, (m+batch-1)/batch, pubs, func(ctx context.Context, c int) error {
		if batch == 1 {
			pubAt.set(c, time.Now())
			if relays != nil {
				return nd.sys.Send(ctx, relays[c%len(relays)], c)
			}
			_, err := nd.sys.Publish(ctx, channel, c)
			return err
		}
		// -publish-batch: one commit for the whole batch.
		var outs []actor.Outgoing
		now := time.Now()
		for i := c * batch; i < min((c+1)*batch, m); i++ {
			pubAt.set(i, now)
			outs = append(outs, actor.Outgoing{Channel: channel, Message: i})
		}
		_, err := nd.sys.PublishBatch(ctx, outs)
		return err
	})
	published := time.Since(t0)
	if err != nil {
		return res, fmt.Errorf("publish: %w", err)
	}
	if r.opts.Backlog {
		// Drain mode: every message is queued before any consumer exists;
		// the rate is then measured from the consumers' start.
		t0 = time.Now()
		if pids, err = spawn(); err != nil {
			return res, err
		}
	}
	waitErr := side.consumed.wait(wctx)
	nCommits, nWrites := commits.commits.Load(), commits.writes.Load()
	last := side.at.last()
	wall := last.Sub(t0)
	if waitErr != nil {
		r.logf("only %d of %d consumed: %v", side.consumed.count(), m, waitErr)
	}
	// The checks get a deadline of their own: the consumption wait may have
	// used up wctx.
	cctx, ccancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer ccancel()

	// Stop the consumers and check what the store recorded.
	for _, pid := range pids {
		if err := nd.sys.Cancel(ctx, pid, "bench done"); err != nil {
			return res, fmt.Errorf("cancel %s: %w", pid, err)
		}
	}
	counts := make([]int, m)
	var unknown int
	for _, pid := range pids {
		inst, err := nd.sys.AwaitDone(cctx, pid)
		if err != nil {
			return res, fmt.Errorf("await cancelled consumer %s: %w", pid, err)
		}
		if inst.Status != persistence.StatusCancelled {
			return res, fmt.Errorf("consumer %s ended %s: %s", pid, inst.Status, inst.Error)
		}
		info, err := nd.sys.Inspect(ctx, pid)
		if err != nil {
			return res, err
		}
		for _, e := range info.History {
			if e.Kind != "received" {
				continue
			}
			v, err := receivedInt(e.Payload)
			if err != nil || v < 0 || v >= m {
				unknown++
				continue
			}
			counts[v]++
		}
	}
	var dup, unconsumed int
	for _, c := range counts {
		if c == 0 {
			unconsumed++
		}
		dup += max(0, c-1)
	}
	// Unconsumed messages still in the channel's queue (after a timeout)
	// are late, not lost.
	waiting := 0
	stats, err := nd.sys.ChannelStats(ctx)
	if err != nil {
		return res, err
	}
	for _, s := range stats {
		if s.Channel == channel {
			waiting = s.Waiting
		}
	}
	lost := max(0, unconsumed-waiting)

	lat := make([]time.Duration, 0, m)
	for i := range m {
		c, ok1 := side.at.get(i)
		pb, ok2 := pubAt.get(i)
		if ok1 && ok2 {
			lat = append(lat, c.Sub(pb))
		}
	}
	l := summarize(lat)
	res.Throughput, res.P50, res.P99, res.Wall = rate(side.consumed.count(), wall), l.P50, l.P99, wall
	res.Metrics["dup"], res.Metrics["lost"], res.Metrics["unknown"] = float64(dup), float64(lost), float64(unknown)
	res.Metrics["unconsumed"], res.Metrics["waiting"] = float64(unconsumed), float64(waiting)
	res.Metrics["publish_per_s"] = rate(m, published)
	res.Metrics["commits_per_msg"] = float64(nCommits) / float64(m)
	res.Metrics["writes_per_msg"] = float64(nWrites) / float64(m)
	mode := ""
	if r.opts.Backlog {
		mode = "drain of a full queue; "
	}
	if r.opts.Relay {
		mode += "published by relay workflows; "
	}
	res.Extra = fmt.Sprintf("%spublish→consume; %d consumers (prefetch %d), %d publishers (%d per commit); publish %s msg/s; max %s; %.2f commits, %.2f writes per msg; store check: %d dup, %d lost",
		mode, p, max(1, r.opts.Prefetch), pubs, batch, fmtRate(rate(m, published)), fmtDur(l.Max),
		res.Metrics["commits_per_msg"], res.Metrics["writes_per_msg"], dup, lost)
	if unconsumed > 0 {
		res.Extra += fmt.Sprintf(" (%d unconsumed, %d of them still queued)", unconsumed, waiting)
	}
	if unknown > 0 {
		res.Extra += fmt.Sprintf(", %d unknown", unknown)
	}
	if waitErr != nil {
		return res, fmt.Errorf("consumption: %w", waitErr)
	}
	if dup > 0 || lost > 0 || unknown > 0 {
		return res, errors.New("store check failed: messages duplicated or lost")
	}
	return res, nil
}

// writeCounter counts a store's commits and the writes (steps) they
// carried.
type writeCounter struct{ commits, writes atomic.Int64 }

func (c *writeCounter) ObserveCommit(ci persistence.CommitInfo) {
	c.commits.Add(1)
	c.writes.Add(int64(ci.Steps))
}

// receivedInt decodes the int payload of a recorded "received" event (a
// JSON mailbox.Message whose Payload is the JSON message).
func receivedInt(payload []byte) (int, error) {
	var msg mailbox.Message
	if err := json.Unmarshal(payload, &msg); err != nil {
		return 0, err
	}
	var v int
	err := json.Unmarshal(msg.Payload, &v)
	return v, err
}
