package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
)

// Reminder is the workflow's input.
type Reminder struct {
	To        string
	Text      string
	After     time.Duration // wait this long before reminding
	AckWithin time.Duration // escalate if no Ack comes within this
}

// Ack is the message that acknowledges a reminder.
type Ack struct{ By string }

// reminderFlow sleeps, reminds, waits for an Ack and escalates when none
// comes in time. The sleep and the ack deadline are durable timers: they
// are stored with their due time and survive a restart of the program.
var reminderFlow = actor.Workflow("reminder", func(ctx *actor.Context, r Reminder) (string, error) {
	say(ctx, "%s: sleep %v (durable timer)", r.To, r.After)
	if err := ctx.Sleep(r.After); err != nil {
		return "", err
	}
	if _, err := sendReminder.Run(ctx, r); err != nil {
		return "", err
	}
	ack, err := actor.Receive[Ack](ctx, mailbox.Timeout(r.AckWithin))
	switch {
	case err == nil:
		say(ctx, "%s: ack from %s received", r.To, ack.Value.By)
		return "acknowledged", nil
	case errors.Is(err, actor.ErrTimeout):
		say(ctx, "%s: no ack within %v", r.To, r.AckWithin)
		if _, err := escalate.Run(ctx, r); err != nil {
			return "", err
		}
		return "escalated", nil
	default:
		return "", err
	}
})

// inbox stands in for the users' phones: sendReminder delivers to it and
// the simulated users in main read it.
var inbox = make(chan Reminder, 16)

var sendReminder = actor.Activity("send-reminder", func(ctx context.Context, r Reminder) (struct{}, error) {
	logf("%s: reminder sent: %q (waiting up to %v for an ack)", r.To, r.Text, r.AckWithin)
	select {
	case inbox <- r:
	default:
	}
	return struct{}{}, nil
})

var escalate = actor.Activity("escalate", func(ctx context.Context, r Reminder) (struct{}, error) {
	logf("%s: escalated to %s's manager", r.To, r.To)
	return struct{}{}, nil
})

// start is when the node started; every line shows the time since.
var start = time.Now()

func logf(format string, args ...any) {
	fmt.Printf("%5.2fs  "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
}

// say prints a line from workflow code. A workflow function runs again from
// the top whenever its instance is replayed (after a restart, or on a
// -fresh=false re-run), so nothing is printed while the calls are answered
// from history. Call it just before the durable call it announces.
func say(ctx *actor.Context, format string, args ...any) {
	if !ctx.Replaying() {
		logf(format, args...)
	}
}
