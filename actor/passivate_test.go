package actor_test

import (
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// A parked activation passivates (status waiting, no lease, no goroutine);
// a message or a timer brings it back through replay.
func TestPassivationAndWake(t *testing.T) {
	wf := actor.Workflow("idle", func(ctx *actor.Context, _ int) (string, error) {
		m, err := actor.Receive[string](ctx)
		if err != nil {
			return "", err
		}
		if err := ctx.Sleep(300 * time.Millisecond); err != nil {
			return "", err
		}
		return m.Value + " after sleep", nil
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf),
		PassivateAfter: 50 * time.Millisecond})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 0)
	waitPassivated := func() {
		t.Helper()
		for {
			info, err := sys.Inspect(ctx, pid)
			if err != nil {
				t.Fatal(err)
			}
			if !info.Active && info.Status == persistence.StatusWaiting && info.Node == "" {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("never passivated: %+v", info.Instance)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitPassivated()
	if err := sys.Send(ctx, pid, "hello"); err != nil {
		t.Fatal(err)
	}
	// It wakes, consumes, starts sleeping, passivates again; the timer wakes it.
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil || got != "hello after sleep" {
		t.Fatalf("Await = %q, %v", got, err)
	}
	info, _ := sys.Inspect(ctx, pid)
	received := 0
	for _, e := range info.History {
		if e.Kind == "received" {
			received++
		}
	}
	if received != 1 {
		t.Fatalf("received %d times", received)
	}
}
