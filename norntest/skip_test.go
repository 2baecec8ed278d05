package norntest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntest"
	"github.com/nornlabs/norn/persistence"
)

var slowCall = actor.Activity("slow-call", func(_ context.Context, n int) (int, error) { return n, nil })

// raceFlow races an activity against an hour's timer: on the virtual clock
// the activity must win, however long it takes in real time, since time
// does not move while it runs.
var raceFlow = actor.Workflow("race", func(ctx *actor.Context, n int) (string, error) {
	call := slowCall.Go(ctx, n)
	timer := ctx.Timer(time.Hour)
	i, err := actor.Select(ctx, call, timer)
	if err != nil {
		return "", err
	}
	if i == 1 {
		return "timer", nil
	}
	// Then a second hour passes for real (on the clock), to make sure
	// the skip that follows an activity's outcome does happen.
	if err := ctx.Sleep(time.Hour); err != nil {
		return "", err
	}
	return "activity", nil
})

// TestNoSkipWhileActivityInFlight runs many instances whose activities
// finish at scattered real moments (some at once, some later) while the
// kit is skipping time for the others: a skip taken while any activity
// is in flight, or while its outcome waits to be recorded, lets a timer win.
func TestNoSkipWhileActivityInFlight(t *testing.T) {
	t.Parallel()
	env := norntest.New(t, norntest.Options{Workflows: actor.Register(raceFlow)})
	norntest.Mock(env, slowCall, func(ctx context.Context, n int) (int, error) {
		if n%3 == 0 {
			return n, nil // at once: the outcome races the workflow's park
		}
		t := time.NewTimer(time.Duration(n%7) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return n, nil
	})
	start := env.Now()
	const n = 40
	pids := make([]actor.PID, n)
	for i := range pids {
		pids[i] = norntest.Spawn(env, raceFlow, i, actor.WithID(fmt.Sprintf("race-%d", i)))
	}
	for i, pid := range pids {
		got, err := norntest.Await(env, raceFlow, pid)
		if err != nil || got != "activity" {
			t.Fatalf("instance %d: %q, %v: the clock moved while its activity ran", i, got, err)
		}
	}
	// Each instance slept an hour after its activity; they all parked at
	// the same virtual time, so one skip of an hour ends them all.
	if d := env.Now().Sub(start); d != time.Hour {
		t.Fatalf("virtual time moved %v, want 1h", d)
	}
}

var takeOne = actor.Workflow("take-one", func(ctx *actor.Context, _ int) (int, error) {
	m, err := actor.Receive[int](ctx)
	return m.Value, err
})

// TestIdleAfterInstancesEndWithWakesPending ends instances while wakes for
// them are still arriving (each gets three messages and takes one): the
// node must count none of those wakes as work once the instances are gone,
// or the kit would never see it idle again and time would stop moving.
func TestIdleAfterInstancesEndWithWakesPending(t *testing.T) {
	t.Parallel()
	env := norntest.New(t, norntest.Options{Workflows: actor.Register(takeOne, raceFlow)})
	pids := make([]actor.PID, 20)
	for i := range pids {
		pids[i] = norntest.Spawn(env, takeOne, i)
	}
	for i, pid := range pids {
		for m := range 3 {
			// The first message may end the instance before the others.
			if err := env.System().Send(env.Ctx(), pid, i*10+m); err != nil && !errors.Is(err, persistence.ErrInstanceDone) {
				t.Fatal(err)
			}
		}
	}
	for _, pid := range pids {
		env.AwaitEnd(pid)
	}
	// Time still moves: an hour's timer after all that fires.
	start := env.Now()
	pid := norntest.Spawn(env, raceFlow, 0)
	if got, err := norntest.Await(env, raceFlow, pid); err != nil || got != "activity" {
		t.Fatalf("race after the ends: %q, %v", got, err)
	}
	if d := env.Now().Sub(start); d != time.Hour {
		t.Fatalf("virtual time moved %v, want 1h", d)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !env.System().Idle() {
		if time.Now().After(deadline) {
			t.Fatal("the node never became idle: some work is counted that nothing will finish")
		}
		time.Sleep(time.Millisecond)
	}
}
