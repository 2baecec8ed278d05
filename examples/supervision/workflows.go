package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/supervisor"
)

// ---- (a) restart from history ----

// Report is what the report child returns to its parent.
type Report struct {
	Name  string
	Rows  int
	Pages int
}

// reportRuns counts, in this process, the activations of reportFlow that
// reached its crash point. It lives outside history, so it changes from one
// activation to the next: that is deliberate non-determinism, to simulate a
// crash that a restart gets past (a bug hit by a race, a dependency that
// panicked once). Real workflow code must not read such state.
var reportRuns atomic.Int32

// lastCrash is when reportFlow last panicked, to show the restart back-off.
var lastCrash atomic.Int64

var fetchRows = actor.Activity("fetch-rows", func(ctx context.Context, name string) (int, error) {
	say(ctx, "activity fetch-rows runs: 1200 rows")
	return 1200, nil
})

var render = actor.Activity("render", func(ctx context.Context, rows int) (int, error) {
	say(ctx, "activity render runs: %d pages", rows/50)
	return rows / 50, nil
})

// reportFlow panics on its first two activations. Each panic ends the
// activation; the runtime starts a new one after the restart policy's
// back-off (50 ms, then 100 ms), and it replays history: fetch-rows's result
// comes from history instead of running again. At most 3 restarts a minute
// are allowed; beyond that the instance would fail.
var reportFlow = actor.Workflow("report", func(ctx *actor.Context, name string) (Report, error) {
	rows, err := fetchRows.Run(ctx, name)
	if err != nil {
		return Report{}, err
	}
	n := reportRuns.Add(1)
	if n > 1 {
		sayf(ctx.InstanceID(), "activation %d, %v after the crash: fetch-rows replayed from history",
			n, time.Since(time.Unix(0, lastCrash.Load())).Round(10*time.Millisecond))
	}
	if n <= 2 {
		sayf(ctx.InstanceID(), "activation %d panics (simulated crash)", n)
		lastCrash.Store(time.Now().UnixNano())
		panic(fmt.Sprintf("simulated crash %d", n))
	}
	pages, err := render.Run(ctx, rows)
	if err != nil {
		return Report{}, err
	}
	return Report{Name: name, Rows: rows, Pages: pages}, nil
}, actor.WithRestart(supervisor.RestartPolicy{MaxRestarts: 3, Period: time.Minute,
	Backoff: supervisor.Exponential(50*time.Millisecond, 2, time.Second, 0)}))

// boss spawns the report as a linked child and waits for its typed result
// with actor.AwaitChild; the child's restarts are invisible to it.
var boss = actor.Workflow("boss", func(ctx *actor.Context, name string) (Report, error) {
	child, err := actor.SpawnChild(ctx, reportFlow, name)
	if err != nil {
		return Report{}, err
	}
	return actor.AwaitChild(ctx, reportFlow, child)
})

// ---- (b) restart budget ----

var doomedRuns atomic.Int32

// doomed panics on every activation (again on purpose, and again outside
// history). Its budget is 2 restarts a minute: the third panic fails it.
var doomed = actor.Workflow("doomed", func(ctx *actor.Context, _ struct{}) (string, error) {
	n := doomedRuns.Add(1)
	sayf(ctx.InstanceID(), "activation %d panics", n)
	panic("out of luck")
}, actor.WithRestart(supervisor.RestartPolicy{MaxRestarts: 2, Period: time.Minute,
	Backoff: supervisor.Exponential(50*time.Millisecond, 2, time.Second, 0)}))

// ---- (c) links ----

// chargeCard fails: it returns an error (no panic, no restart).
var chargeCard = actor.Workflow("charge-card", func(ctx *actor.Context, cents int) (string, error) {
	return "", errors.New("card declined")
})

// trapper traps exits: its child's failure arrives as a mailbox.Down message
// on mailbox.DownChannel, and it carries on.
var trapper = actor.Workflow("trapper", func(ctx *actor.Context, cents int) (string, error) {
	ctx.TrapExits()
	if _, err := actor.SpawnChild(ctx, chargeCard, cents); err != nil {
		return "", err
	}
	m, err := actor.Receive[mailbox.Down](ctx, mailbox.OnChannel(mailbox.DownChannel))
	if err != nil {
		return "", err
	}
	d := m.Value
	if !ctx.Replaying() {
		sayf(ctx.InstanceID(), "Down from %s", describe(d))
	}
	return "sent an invoice instead", nil
})

// Approval is a message the untrapped parent waits for; it never comes.
type Approval struct{ By string }

// untrapped does not trap exits: while it waits for something else, its
// child's failure ends it too, as failed. (The receive names its channel:
// one without a channel filter takes any message, a Down included, and
// would consume the child's Down as an Approval.)
var untrapped = actor.Workflow("untrapped", func(ctx *actor.Context, cents int) (string, error) {
	if _, err := actor.SpawnChild(ctx, chargeCard, cents); err != nil {
		return "", err
	}
	if _, err := actor.Receive[Approval](ctx, mailbox.OnChannel("approvals"), mailbox.Timeout(5*time.Second)); err != nil {
		return "", err
	}
	return "approved", nil
})

// ---- (d) monitor ----

// job runs a while, then fails.
var job = actor.Workflow("job", func(ctx *actor.Context, d time.Duration) (string, error) {
	if err := ctx.Sleep(d); err != nil {
		return "", err
	}
	return "", errors.New("disk full")
})

// watchdog monitors instances that are not its children: it gets one Down
// per Monitor call when the instance ends (at once if it has already ended),
// whatever the status, and is never ended by it.
var watchdog = actor.Workflow("watchdog", func(ctx *actor.Context, pids []actor.PID) (int, error) {
	for _, pid := range pids {
		if err := ctx.Monitor(pid); err != nil {
			return 0, err
		}
	}
	for range pids {
		m, err := actor.Receive[mailbox.Down](ctx, mailbox.OnChannel(mailbox.DownChannel))
		if err != nil {
			return 0, err
		}
		if d := m.Value; !ctx.Replaying() {
			sayf(ctx.InstanceID(), "Down from %s", describe(d))
		}
	}
	return len(pids), nil
})

// describe shows a Down: its PID, status, and error or result.
func describe(d mailbox.Down) string {
	if d.Error != "" {
		return fmt.Sprintf("%s: status %s, error %q", d.PID, d.Status, d.Error)
	}
	return fmt.Sprintf("%s: status %s, output %s", d.PID, d.Status, d.Output)
}

// say prints a line from an activity, tagged with its instance.
func say(ctx context.Context, format string, args ...any) {
	info, _ := actor.Info(ctx)
	sayf(info.InstanceID, format, args...)
}

func sayf(instance, format string, args ...any) {
	fmt.Printf("  %-14s "+format+"\n", append([]any{instance}, args...)...)
}
