package actor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

// A long retry back-off waits on a durable timer: it survives a restart of
// the node, and the attempts before the restart are not repeated.
func TestDurableRetryBackoffSurvivesRestart(t *testing.T) {
	path := testutil.SQLitePath(t)
	var attempts atomic.Int64
	flaky := actor.Activity("flaky", func(ctx context.Context, _ int) (string, error) {
		n := attempts.Add(1)
		if i, _ := actor.Info(ctx); int64(i.Attempt) != n {
			return "", supervisor.Terminal(errors.New("attempt number not carried across the restart"))
		}
		if n < 3 {
			return "", errors.New("not yet")
		}
		return "ok", nil
	}, actor.WithRetry(supervisor.Exponential(400*time.Millisecond, 1, time.Second, 5)))
	wf := actor.Workflow("retrying", func(ctx *actor.Context, _ int) (string, error) { return flaky.Run(ctx, 0) })
	cfg := func(st persistence.Store) actor.Config {
		return actor.Config{Store: st, Workflows: actor.Register(wf), NodeID: "n1", DurableBackoff: 100 * time.Millisecond}
	}

	st1 := testutil.OpenSQLite(t, path)
	sys1, err := actor.Start(context.Background(), cfg(st1))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys1, wf, 0)
	if err != nil {
		t.Fatal(err)
	}
	for attempts.Load() < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the first wait is committed and parked
	if err := sys1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := attempts.Load(); got != 1 {
		t.Fatalf("attempts before restart = %d, want 1", got)
	}
	sys2 := testutil.StartNode(t, cfg(st1))
	got, err := actor.Await(ctx, sys2, wf, pid)
	if err != nil || got != "ok" {
		t.Fatalf("Await = %q, %v", got, err)
	}
	if attempts.Load() != 3 {
		t.Fatalf("attempts = %d, want 3", attempts.Load())
	}
	info, _ := sys2.Inspect(ctx, pid)
	retries := 0
	for _, e := range info.History {
		if e.Kind == actor.EventActivityRetry {
			retries++
		}
	}
	if retries != 2 {
		t.Fatalf("history has %d recorded failed attempts, want 2", retries)
	}
}
