package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
)

// say prints a line from workflow code. A workflow function runs again from
// the top whenever its instance is replayed (after a restart, or on a
// -fresh=false re-run), so nothing is printed while the calls are answered
// from history. Call it just before the durable call it announces.
func say(ctx *actor.Context, format string, args ...any) {
	if !ctx.Replaying() {
		fmt.Printf("  "+format+"\n", args...)
	}
}

// (a) broadcast

// Newsroom is the newsroom's input.
type Newsroom struct {
	Readers   int
	Headlines []string
}

// newsroom waits until every reader has subscribed (a broadcast reaches only
// the subscribers it finds), then publishes the headlines.
var newsroom = actor.Workflow("newsroom", func(ctx *actor.Context, n Newsroom) (int, error) {
	for range n.Readers {
		if _, err := actor.Receive[string](ctx); err != nil { // "ready"
			return 0, err
		}
	}
	for _, h := range n.Headlines {
		say(ctx, "newsroom publishes %q", h)
		if _, err := ctx.Publish("news", h); err != nil {
			return 0, err
		}
	}
	return len(n.Headlines), nil
})

// Reader is a reader's input.
type Reader struct {
	Newsroom actor.PID
	Want     int
}

var reader = actor.Workflow("reader", func(ctx *actor.Context, r Reader) ([]string, error) {
	if err := ctx.Subscribe("news", mailbox.Broadcast); err != nil {
		return nil, err
	}
	say(ctx, "%s subscribed", ctx.PID())
	if err := ctx.Send(r.Newsroom, "ready"); err != nil {
		return nil, err
	}
	var got []string
	for len(got) < r.Want {
		m, err := actor.Receive[string](ctx, mailbox.OnChannel("news"))
		if err != nil {
			return got, err
		}
		got = append(got, m.Value)
	}
	return got, nil
})

// (b) competing

// worker takes jobs from the "jobs" queue until it gets "stop" (sent to its
// PID) or is cancelled. It returns the jobs it did.
var worker = actor.Workflow("worker", func(ctx *actor.Context, _ struct{}) ([]string, error) {
	if err := ctx.Subscribe("jobs", mailbox.Competing); err != nil {
		return nil, err
	}
	var done []string
	for {
		// Any message: a job from the channel, or a stop sent to this PID.
		m, err := actor.Receive[string](ctx)
		if err != nil {
			return done, err
		}
		if m.Channel != "jobs" {
			return done, nil
		}
		if _, err := process.Run(ctx, m.Value); err != nil {
			return done, err
		}
		done = append(done, m.Value)
	}
})

var process = actor.Activity("process", func(ctx context.Context, job string) (struct{}, error) {
	info, _ := actor.Info(ctx)
	select {
	case <-time.After(400 * time.Millisecond): // the work
	case <-ctx.Done():
		return struct{}{}, ctx.Err()
	}
	fmt.Printf("  %s took %s\n", info.InstanceID, job)
	return struct{}{}, nil
})

// (c) direct

// Ball goes back and forth.
type Ball struct{ N int }

// Rally is the pinger's input.
type Rally struct {
	Peer   actor.PID
	Rounds int
}

var pinger = actor.Workflow("pinger", func(ctx *actor.Context, r Rally) (int, error) {
	back := 0
	for n := 1; n <= r.Rounds; n++ {
		say(ctx, "%s → %s  ball %d", ctx.PID(), r.Peer, n)
		if err := ctx.Send(r.Peer, Ball{N: n}); err != nil {
			return back, err
		}
		// Only the peer's answer: other mail would stay in the mailbox.
		if _, err := actor.Receive[Ball](ctx, mailbox.From(r.Peer)); err != nil {
			return back, err
		}
		back++
	}
	return back, nil
})

var ponger = actor.Workflow("ponger", func(ctx *actor.Context, rounds int) (int, error) {
	for range rounds {
		m, err := actor.Receive[Ball](ctx)
		if err != nil {
			return 0, err
		}
		say(ctx, "%s → %s  ball %d", ctx.PID(), m.Sender, m.Value.N)
		if err := ctx.Send(m.Sender, m.Value); err != nil { // reply to whoever sent it
			return 0, err
		}
	}
	return rounds, nil
})

// (d) selective receive

// picky sends itself "b" and then "a" (Erlang's self() ! b; from outside a
// workflow it would be sys.Send), then takes "a" first.
var picky = actor.Workflow("picky", func(ctx *actor.Context, _ struct{}) ([]string, error) {
	for _, s := range []string{"b", "a"} {
		say(ctx, "%s ← %q", ctx.PID(), s)
		if err := ctx.Send(ctx.PID(), s); err != nil {
			return nil, err
		}
	}
	a, err := actor.Receive[string](ctx, is("a"))
	if err != nil {
		return nil, err
	}
	say(ctx, "took %q; \"b\" is skipped and stays in the mailbox", a.Value)
	b, err := actor.Receive[string](ctx)
	if err != nil {
		return nil, err
	}
	return []string{a.Value, b.Value}, nil
})

// is matches messages whose payload is the string s. Filters must be
// deterministic: replay checks that the recorded message still matches.
func is(s string) mailbox.Filter {
	return mailbox.Match(func(m mailbox.Message) bool {
		var v string
		return json.Unmarshal(m.Payload, &v) == nil && v == s
	})
}
