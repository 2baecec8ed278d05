package actor_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

// TestTerminateParkedInstance: a live instance parked in a receive ends
// at once as cancelled ("terminated: …"), its compensation does not run,
// its activation goes, and its parent hears of it.
func TestTerminateParkedInstance(t *testing.T) {
	t.Parallel()
	var undone atomic.Int32
	book := actor.Activity("book", func(_ context.Context, n int) (int, error) { return n, nil },
		actor.WithCompensation(func(context.Context, int, int) error { undone.Add(1); return nil }))
	child := actor.Workflow("term-child", func(ctx *actor.Context, n int) (int, error) {
		if _, err := book.Run(ctx, n); err != nil {
			return 0, err
		}
		m, err := actor.Receive[int](ctx)
		return m.Value, err
	})
	parent := actor.Workflow("term-parent", func(ctx *actor.Context, n int) (string, error) {
		pid, err := actor.SpawnChild(ctx, child, n)
		if err != nil {
			return "", err
		}
		_, err = actor.AwaitChild(ctx, child, pid)
		return "child: " + err.Error(), nil
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)),
		Workflows: actor.Register(parent, child), PassivateAfter: time.Hour})
	ctx := testutil.Ctx(t, 30*time.Second)
	ppid, err := actor.Spawn(ctx, sys, parent, 3)
	if err != nil {
		t.Fatal(err)
	}
	var cpid actor.PID
	testutil.Eventually(t, 20*time.Second, "the child parks, live", func() bool {
		page, err := sys.List(ctx, actor.ListQuery{Workflow: "term-child", Statuses: []actor.Status{persistence.StatusWaiting}})
		if err != nil || len(page.Instances) == 0 {
			return false
		}
		cpid = actor.PID(page.Instances[0].ID)
		info, err := sys.Inspect(ctx, cpid)
		return err == nil && info.Active
	})
	if err := sys.Terminate(ctx, cpid, "stuck\nfor days"); err != nil {
		t.Fatal(err)
	}
	_, err = actor.Await(ctx, sys, child, cpid)
	if !errors.Is(err, actor.ErrCancelled) || !strings.Contains(err.Error(), "terminated: stuck") {
		t.Fatalf("Await of the terminated child = %v, want a cancellation saying terminated", err)
	}
	got, err := actor.Await(ctx, sys, parent, ppid)
	if err != nil || !strings.Contains(got, "terminated: stuck") {
		t.Fatalf("parent = %q, %v; want it to hear the child was terminated", got, err)
	}
	testutil.Eventually(t, 20*time.Second, "the child's activation goes", func() bool {
		info, err := sys.Inspect(ctx, cpid)
		return err == nil && !info.Active && info.Status == persistence.StatusCancelled
	})
	if n := undone.Load(); n != 0 {
		t.Fatalf("terminate ran %d compensations, want none", n)
	}
	if err := sys.Terminate(ctx, cpid, "again"); !errors.Is(err, actor.ErrInstanceDone) {
		t.Fatalf("second Terminate = %v, want ErrInstanceDone", err)
	}
	if err := sys.Terminate(ctx, "nobody", "x"); !errors.Is(err, actor.ErrNotFound) {
		t.Fatalf("Terminate of nothing = %v, want ErrNotFound", err)
	}
	if err := sys.Terminate(ctx, "bad\x00id", "x"); !errors.Is(err, actor.ErrInvalidInput) {
		t.Fatalf("Terminate of a bad ID = %v, want ErrInvalidInput", err)
	}
}

// TestRetryResumesFailedInstance: an instance failed by an activity whose
// retries ran out is resumed once the activity works: the work recorded
// before is not done again, the failing activity runs with its retries
// afresh, and the instance completes with the same PID.
func TestRetryResumesFailedInstance(t *testing.T) {
	t.Parallel()
	var charged, shipTries atomic.Int32
	var shipOK atomic.Bool
	charge := actor.Activity("charge", func(_ context.Context, n int) (int, error) { charged.Add(1); return n * 10, nil })
	ship := actor.Activity("ship", func(_ context.Context, n int) (int, error) {
		shipTries.Add(1)
		if !shipOK.Load() {
			return 0, errors.New("carrier down")
		}
		return n + 1, nil
	}, actor.WithRetry(supervisor.Exponential(time.Millisecond, 1, time.Millisecond, 2)))
	wf := actor.Workflow("retry-order", func(ctx *actor.Context, n int) (int, error) {
		c, err := charge.Run(ctx, n)
		if err != nil {
			return 0, err
		}
		return ship.Run(ctx, c)
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Await(ctx, sys, wf, pid); err == nil {
		t.Fatal("the order did not fail")
	}
	if err := sys.Restart(ctx, "nobody"); !errors.Is(err, actor.ErrNotFound) {
		t.Fatalf("Restart of nothing = %v", err)
	}
	shipOK.Store(true)
	tries := shipTries.Load()
	if err := sys.Retry(ctx, pid); err != nil {
		t.Fatal(err)
	}
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil || got != 41 {
		t.Fatalf("retried order = %d, %v; want 41", got, err)
	}
	if n := charged.Load(); n != 1 {
		t.Fatalf("charged %d times, want once: a retry keeps the work recorded before the failure", n)
	}
	if n := shipTries.Load() - tries; n != 1 {
		t.Fatalf("ship ran %d more times, want 1", n)
	}
	info, err := sys.Inspect(ctx, pid)
	if err != nil || info.Run != 1 || info.Status != persistence.StatusCompleted {
		t.Fatalf("after retry: run %d, status %s, %v", info.Run, info.Status, err)
	}
	if err := sys.Retry(ctx, pid); !errors.Is(err, actor.ErrNotFailed) {
		t.Fatalf("Retry of a completed instance = %v, want ErrNotFailed", err)
	}

	// Restart runs it again from its start, with the same input.
	if err := sys.Restart(ctx, pid); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != 41 {
		t.Fatalf("restarted order = %d, %v; want 41", got, err)
	}
	if n := charged.Load(); n != 2 {
		t.Fatalf("charged %d times after a restart, want 2", n)
	}
}

// TestResetRestoresTimersAndSubscriptions: a run reset to a point after a
// Sleep was set and a channel subscribed, and before either was used, gets
// the timer and the subscription back: the sleep ends and a message
// published on the channel arrives.
func TestResetRestoresTimersAndSubscriptions(t *testing.T) {
	t.Parallel()
	wf := actor.Workflow("reset-sub", func(ctx *actor.Context, _ int) (string, error) {
		if err := ctx.Subscribe("news", mailbox.Broadcast); err != nil {
			return "", err
		}
		if err := ctx.Sleep(time.Second); err != nil {
			return "", err
		}
		m, err := actor.Receive[string](ctx, mailbox.OnChannel("news"))
		return m.Value, err
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, 0)
	if err != nil {
		t.Fatal(err)
	}
	// End it while it sleeps: history is started, subscribed, timer.
	var keep int64
	testutil.Eventually(t, 20*time.Second, "the instance sleeps", func() bool {
		info, err := sys.Inspect(ctx, pid)
		if err != nil || len(info.History) != 3 || info.History[2].Kind != actor.EventTimer {
			t.Logf("history %+v", info.History)
			return false
		}
		keep = 3
		return sys.Terminate(ctx, pid, "operator") == nil
	})
	if err := sys.Reset(ctx, pid, 0); !errors.Is(err, actor.ErrInvalidInput) {
		t.Fatalf("Reset keeping nothing = %v, want ErrInvalidInput", err)
	}
	if err := sys.Reset(ctx, pid, 4); !errors.Is(err, actor.ErrInvalidInput) {
		t.Fatalf("Reset keeping the end = %v, want ErrInvalidInput", err)
	}
	if err := sys.Reset(ctx, pid, keep); err != nil {
		t.Fatal(err)
	}
	if err := sys.Reset(ctx, pid, keep); !errors.Is(err, actor.ErrInstanceLive) {
		t.Fatalf("Reset of a running instance = %v, want ErrInstanceLive", err)
	}
	// The timer fires (it was restored), and then the receive waits on the
	// restored subscription.
	testutil.Eventually(t, 20*time.Second, "the new run sleeps, then waits for news", func() bool {
		info, err := sys.Inspect(ctx, pid)
		if err != nil {
			return false
		}
		for _, e := range info.History {
			if e.Kind == actor.EventTimerFired {
				return true
			}
		}
		return false
	})
	if _, err := sys.Publish(ctx, "news", "extra!"); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != "extra!" {
		t.Fatalf("reset run = %q, %v; want the news", got, err)
	}
}
