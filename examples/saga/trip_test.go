package main

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntest"
)

var rome = Trip{ID: "trip-rome", From: "OSL", To: "FCO", City: "Rome", Nights: 3}

func TestTripWithoutCarIsUndone(t *testing.T) {
	t.Parallel()
	env := norntest.New(t, norntest.Options{Workflows: actor.Register(tripFlow)})
	pid := norntest.Spawn(env, tripFlow, rome, actor.WithID(rome.ID))
	if _, err := norntest.Await(env, tripFlow, pid); err == nil {
		t.Fatal("the trip to FCO succeeded; want it failed (no cars)")
	}
	// The car failed terminally: one attempt, then both bookings undone,
	// newest first.
	if n := env.Executions(pid, "book-car:1"); n != 1 {
		t.Fatalf("book-car ran %d times, want 1 (terminal errors are not retried)", n)
	}
	var undone []string
	for _, e := range env.History(pid) {
		if e.Kind == actor.EventCompensation {
			undone = append(undone, e.Ref)
		}
	}
	if want := []string{"book-hotel:1", "book-flight:1"}; !slices.Equal(undone, want) {
		t.Fatalf("compensations %v, want %v", undone, want)
	}
}

func TestTripUnpaidFor72HoursIsUndone(t *testing.T) {
	t.Parallel()
	env := norntest.New(t, norntest.Options{Workflows: actor.Register(tripFlow)})
	oslo := Trip{ID: "trip-oslo", From: "BER", To: "OSL", City: "Oslo", Nights: 2, PayWithin: 72 * time.Hour}
	start := env.Now()
	pid := norntest.Spawn(env, tripFlow, oslo, actor.WithID(oslo.ID))
	_, err := norntest.Await(env, tripFlow, pid)
	if !errors.Is(err, actor.ErrTimeout) {
		t.Fatalf("unpaid trip = %v, want ErrTimeout", err)
	}
	if d := env.Now().Sub(start); d != 72*time.Hour {
		t.Fatalf("the payment deadline passed after %v of virtual time, want 72h", d)
	}
	if got := env.HistoryKinds(pid); !slices.Contains(got, string(actor.EventCompensating)) {
		t.Fatalf("history %v: the bookings were not undone", got)
	}
}

func TestTripCrashEverywhere(t *testing.T) {
	t.Parallel()
	rep := norntest.CrashEverywhere(t, norntest.Options{Workflows: actor.Register(tripFlow)}, tripFlow, rome, nil)
	t.Logf("%d runs over %d commits", rep.Runs, rep.Commits)
}
