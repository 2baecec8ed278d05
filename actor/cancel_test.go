package actor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

// Cancel while an activity runs: the activity's context is cancelled, the
// workflow sees ErrCancelled, the instance ends cancelled.
func TestCancelDuringActivity(t *testing.T) {
	started := make(chan struct{})
	slow := actor.Activity("slow", func(ctx context.Context, _ int) (int, error) {
		close(started)
		<-ctx.Done()
		return 0, ctx.Err()
	})
	wf := actor.Workflow("busy", func(ctx *actor.Context, n int) (int, error) { return slow.Run(ctx, n) })
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 1)
	<-started
	if err := sys.Cancel(ctx, pid, "stop working"); err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Await(ctx, sys, wf, pid); !errors.Is(err, actor.ErrCancelled) {
		t.Fatalf("Await = %v", err)
	}
	info, _ := sys.Inspect(ctx, pid)
	for _, e := range info.History {
		if e.Kind == "activity" {
			t.Fatalf("a cancelled activity was recorded: %+v", e)
		}
	}
}

// Cancel while compensating: the compensations still all run and are
// recorded; the instance ends (failed: it had failed before the cancel).
func TestCancelWhileCompensating(t *testing.T) {
	release := make(chan struct{})
	inComp := make(chan struct{}, 1)
	book := actor.Activity("book", func(ctx context.Context, n int) (int, error) { return n, nil },
		actor.WithCompensation(func(ctx context.Context, n, _ int) error {
			if n == 2 {
				inComp <- struct{}{}
				<-release
			}
			return nil
		}))
	fail := actor.Activity("fail", func(ctx context.Context, _ int) (int, error) {
		return 0, supervisor.Terminal(errors.New("nope"))
	})
	wf := actor.Workflow("comp", func(ctx *actor.Context, _ int) (int, error) {
		for i := 1; i <= 2; i++ {
			if _, err := book.Run(ctx, i); err != nil {
				return 0, err
			}
		}
		return fail.Run(ctx, 0)
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 0)
	<-inComp
	if err := sys.Cancel(ctx, pid, "too late"); err != nil {
		t.Fatal(err)
	}
	close(release)
	inst, err := sys.AwaitDone(ctx, pid)
	if err != nil || !inst.Status.Terminal() {
		t.Fatalf("AwaitDone = %+v, %v", inst, err)
	}
	info, _ := sys.Inspect(ctx, pid)
	comps := 0
	for _, e := range info.History {
		if e.Kind == "compensation" {
			comps++
			if e.Error != "" {
				t.Fatalf("compensation failed: %+v", e)
			}
		}
	}
	if comps != 2 || info.Status != persistence.StatusFailed {
		t.Fatalf("%d compensations, status %s; want 2, failed", comps, info.Status)
	}
}
