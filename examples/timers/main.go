// Timers shows durable timers: a reminder workflow sleeps (ctx.Sleep), sends
// a reminder (an activity), then waits for an acknowledgement with a
// deadline (actor.Receive with mailbox.Timeout) and escalates if none comes.
//
// Two reminders run: alice acknowledges hers (main plays the user and sends
// the Ack with sys.Send once she has it); bob never answers, so his reminder
// times out and is escalated. Each line shows the time since the start.
//
//	go run ./examples/timers
//
// Timers are stored with their due time (by default in the SQLite file
// norn-data/norn.db, deleted first unless -fresh=false). Interrupt a run during a
// sleep and start it again with -fresh=false: the reminders carry on, and a
// timer that came due meanwhile fires at once. (The simulated users live in
// this process only: a reminder delivered before the interruption is not
// acknowledged after it, so it escalates.)
package main

import (
	"context"
	"log"
	"sync"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/examples/internal/demo"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	start = time.Now() // the timeline starts with the node
	// demo.Start (examples/internal/demo) parses -store and -fresh, opens the store and starts a node running reminderFlow.
	node, err := demo.Start(reminderFlow)
	if err != nil {
		return err
	}
	defer node.Close()
	ctx, sys := node.Ctx, node.Sys

	usersCtx, stopUsers := context.WithCancel(ctx)
	var users sync.WaitGroup
	users.Go(func() { simulateUsers(usersCtx, sys, &users) })
	defer users.Wait()
	defer stopUsers()

	reminders := []Reminder{
		{To: "alice", Text: "stand-up in 5 minutes", After: 500 * time.Millisecond, AckWithin: time.Second},
		{To: "bob", Text: "review the design doc", After: 700 * time.Millisecond, AckWithin: time.Second},
	}
	logf("spawn reminder-alice and reminder-bob")
	pids := make([]actor.PID, len(reminders))
	for i, r := range reminders {
		if pids[i], err = actor.Spawn(ctx, sys, reminderFlow, r, actor.WithID("reminder-"+r.To)); err != nil {
			return err
		}
	}
	for _, pid := range pids {
		outcome, err := actor.Await(ctx, sys, reminderFlow, pid)
		if ctx.Err() != nil {
			logf("interrupted: run again with -fresh=false to resume")
			return nil
		}
		if err != nil {
			return err
		}
		logf("%s: %s", pid, outcome)
	}
	return nil
}

// simulateUsers reads the reminders as they are delivered: alice
// acknowledges hers after 300 ms, bob ignores his.
func simulateUsers(ctx context.Context, sys *actor.System, wg *sync.WaitGroup) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-inbox:
			if r.To != "alice" {
				logf("%s reads the reminder and does nothing", r.To)
				continue
			}
			wg.Go(func() {
				select {
				case <-ctx.Done():
					return
				case <-time.After(300 * time.Millisecond):
				}
				logf("%s acknowledges: sys.Send(reminder-%s, Ack)", r.To, r.To)
				err := sys.Send(ctx, actor.PID("reminder-"+r.To), Ack{By: r.To})
				if err != nil && ctx.Err() == nil {
					logf("%s's ack failed: %v", r.To, err)
				}
			})
		}
	}
}
