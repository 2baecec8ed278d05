package norntest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntest"
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
