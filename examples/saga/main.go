// Saga shows compensations: a trip booking workflow books a flight, a hotel
// and a car, three activities registered with actor.WithCompensation. When a
// later step fails, or the trip is cancelled, Norn undoes the bookings that
// succeeded by running their compensations in reverse order.
//
//	(1) trip-rome: the car rental answers "no cars left", an error wrapped in
//	    supervisor.Terminal, so it is not retried; the trip fails, the hotel
//	    and then the flight are cancelled, and the instance ends failed.
//	    Its history tail (sys.Inspect) shows the compensating and
//	    compensation events.
//	(2) trip-oslo: everything is booked and the trip waits for a payment
//	    confirmation (actor.Receive). While it waits, main cancels it with
//	    sys.Cancel: the car, hotel and flight are cancelled, the instance
//	    ends cancelled, and actor.Await returns an error that
//	    errors.Is(err, actor.ErrCancelled).
//
//	go run ./examples/saga
//
// Bookings, compensations and the cancel request are recorded in the store
// (default: the SQLite file norn-data/norn.db, deleted first unless
// -fresh=false). A compensation that has run is recorded and never runs
// again; a crash part-way through compensating resumes with the next one.
// The runtime logs failed instances as warnings on stderr.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
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
	// demo.Start (examples/internal/demo) parses -store and -fresh, opens the store and starts a node running tripFlow.
	node, err := demo.Start(tripFlow)
	if err != nil {
		return err
	}
	defer node.Close()
	ctx, sys := node.Ctx, node.Sys
	fmt.Printf("two trips on %s; steps, printed by the activities and compensations as they run:\n", node.StoreURL)

	for _, part := range []func(context.Context, *actor.System) error{carFails, customerCancels} {
		if err := part(ctx, sys); err != nil {
			if ctx.Err() != nil {
				fmt.Println("interrupted: run again with -fresh=false to resume")
				return nil
			}
			return err
		}
	}
	return nil
}

// carFails is trip (1): a terminal failure part-way through the saga.
func carFails(ctx context.Context, sys *actor.System) error {
	fmt.Println("(1) trip-rome: the car rental fails with a terminal error")
	t := Trip{ID: "trip-rome", From: "LHR", To: "FCO", City: "Rome", Nights: 3}
	pid, err := actor.Spawn(ctx, sys, tripFlow, t, actor.WithID(t.ID))
	if err != nil {
		return err
	}
	_, err = actor.Await(ctx, sys, tripFlow, pid)
	var wfErr *actor.WorkflowError
	if !errors.As(err, &wfErr) {
		return fmt.Errorf("%s: want a failed workflow, got %v", pid, err)
	}
	fmt.Printf("  actor.Await: %v\n", err)

	info, err := sys.Inspect(ctx, pid)
	if err != nil {
		return err
	}
	fmt.Printf("  sys.Inspect: status %s; history from the failed booking on:\n", info.Status)
	tail := info.History
	for i, e := range tail {
		if e.Kind == "activity" && e.Name == "book-car" {
			tail = tail[i:]
			break
		}
	}
	for _, e := range tail {
		line := fmt.Sprintf("    %d %-13s %-12s %-14s %s", e.Seq, e.Kind, e.Name, e.Ref, e.Error)
		fmt.Println(strings.TrimRight(line, " "))
	}
	return nil
}

// customerCancels is trip (2): a cancel that arrives while the saga waits.
func customerCancels(ctx context.Context, sys *actor.System) error {
	fmt.Println("(2) trip-oslo: the customer cancels while the trip waits for payment")
	t := Trip{ID: "trip-oslo", From: "LHR", To: "OSL", City: "Oslo", Nights: 2, PayWithin: time.Minute}
	pid, err := actor.Spawn(ctx, sys, tripFlow, t, actor.WithID(t.ID))
	if err != nil {
		return err
	}
	// The receive deadline is a durable timer recorded as a receive_wait
	// event: once it is in history, the trip is parked in actor.Receive.
	if err := waitForEvent(ctx, sys, pid, "receive_wait"); err != nil {
		return err
	}
	fmt.Printf("  main       sys.Cancel(%s, \"customer changed plans\")\n", pid)
	// A re-run with -fresh=false finds the trip already cancelled.
	if err := sys.Cancel(ctx, pid, "customer changed plans"); err != nil && !errors.Is(err, actor.ErrInstanceDone) {
		return err
	}
	_, err = actor.Await(ctx, sys, tripFlow, pid)
	if !errors.Is(err, actor.ErrCancelled) {
		return fmt.Errorf("%s: want a cancelled workflow, got %v", pid, err)
	}
	fmt.Printf("  actor.Await: %v (errors.Is(err, actor.ErrCancelled) = true)\n", err)
	info, err := sys.Inspect(ctx, pid)
	if err != nil {
		return err
	}
	fmt.Printf("  sys.Inspect: status %s, error %q\n", info.Status, info.Error)
	return nil
}

// waitForEvent polls the instance's history until it holds an event of the
// given kind, or the instance has ended.
func waitForEvent(ctx context.Context, sys *actor.System, pid actor.PID, kind actor.EventKind) error {
	for {
		info, err := sys.Inspect(ctx, pid)
		if err != nil {
			return err
		}
		if info.Status.Terminal() {
			return nil
		}
		for _, e := range info.History {
			if e.Kind == kind {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
