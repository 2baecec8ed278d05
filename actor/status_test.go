package actor_test

import (
	"context"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// TestParkedIsWaitingAtOnce: an instance parked in a Receive, a Sleep or an
// Await of a child is listed as waiting while its activation is still live
// (long before it passivates), and as running while an activity of its runs.
func TestParkedIsWaitingAtOnce(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	block := actor.Activity("block", func(ctx context.Context, _ int) (int, error) {
		started <- struct{}{}
		select {
		case <-release:
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	child := actor.Workflow("status-child", func(ctx *actor.Context, _ int) (int, error) {
		m, err := actor.Receive[int](ctx)
		return m.Value, err
	})
	parent := actor.Workflow("status-parent", func(ctx *actor.Context, _ int) (int, error) {
		if _, err := actor.Receive[int](ctx); err != nil { // 1: parked in a receive
			return 0, err
		}
		if _, err := block.Run(ctx, 0); err != nil { // 2: running an activity
			return 0, err
		}
		pid, err := actor.SpawnChild(ctx, child, 0)
		if err != nil {
			return 0, err
		}
		return actor.AwaitChild(ctx, child, pid) // 3: parked on its child
	})
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(parent, child), PassivateAfter: time.Hour})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, parent, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitStatus := func(what string, pid actor.PID, want actor.Status) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, what, func() bool {
			info, err := sys.Inspect(ctx, pid)
			return err == nil && info.Active && info.Status == want
		})
		page, err := sys.List(ctx, actor.ListQuery{Statuses: []actor.Status{want}})
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range page.Instances {
			if in.ID == string(pid) {
				return
			}
		}
		t.Fatalf("%s: a listing of %s instances misses %s", what, want, pid)
	}
	waitStatus("parked in its first receive, live", pid, persistence.StatusWaiting)

	if err := sys.Send(ctx, pid, 1); err != nil {
		t.Fatal(err)
	}
	<-started
	waitStatus("running its activity", pid, persistence.StatusRunning)
	close(release)

	var childPID actor.PID
	testutil.Eventually(t, 20*time.Second, "the child is spawned", func() bool {
		page, err := sys.List(ctx, actor.ListQuery{Workflow: "status-child"})
		if err != nil || len(page.Instances) == 0 {
			return false
		}
		childPID = actor.PID(page.Instances[0].ID)
		return true
	})
	waitStatus("parked on its child", pid, persistence.StatusWaiting)
	waitStatus("the child parked in its receive", childPID, persistence.StatusWaiting)

	if err := sys.Send(ctx, childPID, 7); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, parent, pid); err != nil || got != 7 {
		t.Fatalf("Await = %d, %v; want 7", got, err)
	}
}

// TestSleepingIsWaiting: a durable sleep is waiting; the instance is
// running again once it wakes and runs on.
func TestSleepingIsWaiting(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	woke := make(chan struct{}, 1)
	hold := actor.Activity("hold", func(ctx context.Context, _ int) (int, error) {
		woke <- struct{}{}
		select {
		case <-gate:
			return 0, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	wf := actor.Workflow("status-sleep", func(ctx *actor.Context, _ int) (int, error) {
		if err := ctx.Sleep(300 * time.Millisecond); err != nil {
			return 0, err
		}
		return hold.Run(ctx, 0)
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf), PassivateAfter: time.Hour})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, 0)
	if err != nil {
		t.Fatal(err)
	}
	sawWaiting := false
	for !sawWaiting {
		select {
		case <-woke:
			t.Fatal("the sleep ended before the instance was seen waiting")
		default:
		}
		info, err := sys.Inspect(ctx, pid)
		if err != nil {
			t.Fatal(err)
		}
		sawWaiting = info.Status == persistence.StatusWaiting && info.Active
	}
	<-woke
	testutil.Eventually(t, 20*time.Second, "running once the sleep is over", func() bool {
		info, err := sys.Inspect(ctx, pid)
		return err == nil && info.Status == persistence.StatusRunning
	})
	close(gate)
	if _, err := actor.Await(ctx, sys, wf, pid); err != nil {
		t.Fatal(err)
	}
}
