package main

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntest"
)

// fastActivities replaces the activities, which stand in for slow remote
// calls, with instant ones that keep their behaviour: the charge of every
// third order fails its first attempt.
func fastActivities(env *norntest.Env) {
	norntest.Mock(env, reserve, func(_ context.Context, o Order) (string, error) { return "rsv-" + o.ID(), nil })
	norntest.Mock(env, charge, func(ctx context.Context, o Order) (Receipt, error) {
		if info, _ := actor.Info(ctx); o.N%3 == 0 && info.Attempt == 1 {
			return Receipt{}, errors.New("card network timeout")
		}
		return Receipt{ChargeID: "ch-" + o.ID(), Cents: o.Qty * o.Cents}, nil
	})
	norntest.Mock(env, ship, func(_ context.Context, o Order) (string, error) { return "TRK-" + o.ID(), nil })
}

func TestOrderRetriesTheCharge(t *testing.T) {
	t.Parallel()
	env := norntest.New(t, norntest.Options{Workflows: actor.Register(orderFlow)})
	fastActivities(env)
	pid := norntest.Spawn(env, orderFlow, Order{N: 3, Item: "gizmo", Qty: 3, Cents: 1200}, actor.WithID("order-3"))
	got, err := norntest.Await(env, orderFlow, pid)
	if err != nil {
		t.Fatal(err)
	}
	if got != (Result{Tracking: "TRK-order-3", Cents: 3600}) {
		t.Fatalf("result %+v", got)
	}
	if n := env.Executions(pid, "charge:1"); n != 2 {
		t.Fatalf("charge ran %d times, want 2 (one failure, one retry)", n)
	}
	// The failed attempt is in history as a retry, then the result.
	want := []string{"started", "activity", "activity_retry", "activity", "activity", "completed"}
	if got := env.HistoryKinds(pid); !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
}

func TestOrderCrashEverywhere(t *testing.T) {
	t.Parallel()
	rep := norntest.CrashEverywhere(t, norntest.Options{Workflows: actor.Register(orderFlow)}, orderFlow,
		Order{N: 3, Item: "gizmo", Qty: 3, Cents: 1200}, fastActivities)
	if rep.Runs < 2 {
		t.Fatalf("%d runs: no crash was tried", rep.Runs)
	}
	t.Logf("%d runs over %d commits", rep.Runs, rep.Commits)
}
