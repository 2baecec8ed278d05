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
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

// A panic restarts the activation from history: it resumes at the step it
// reached, without running recorded activities again.
func TestRestartAfterPanicResumes(t *testing.T) {
	var runs, activations atomic.Int64
	step := actor.Activity("step", func(ctx context.Context, n int) (int, error) {
		runs.Add(1)
		return n + 1, nil
	})
	fast := supervisor.RestartPolicy{MaxRestarts: 3, Period: time.Minute, Backoff: supervisor.Exponential(10*time.Millisecond, 2, time.Second, 0)}
	wf := actor.Workflow("panicky", func(ctx *actor.Context, n int) (int, error) {
		n, err := step.Run(ctx, n)
		if err != nil {
			return 0, err
		}
		// Deliberately outside history: crash the first two activations here.
		if !ctx.Replaying() && activations.Add(1) <= 2 {
			panic("boom")
		}
		return step.Run(ctx, n)
	}, actor.WithRestart(fast))
	always := actor.Workflow("doomed", func(ctx *actor.Context, _ int) (int, error) { panic("out of luck") },
		actor.WithRestart(supervisor.RestartPolicy{MaxRestarts: 2, Period: time.Minute, Backoff: supervisor.Exponential(10*time.Millisecond, 1, time.Second, 0)}))
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf, always)})
	ctx := testutil.Ctx(t, 30*time.Second)

	pid, _ := actor.Spawn(ctx, sys, wf, 1)
	if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != 3 {
		t.Fatalf("Await = %d, %v", got, err)
	}
	if runs.Load() != 2 {
		t.Fatalf("activities ran %d times, want 2 (the first must not re-run after the restarts)", runs.Load())
	}
	if info, _ := sys.Inspect(ctx, pid); info.Restarts != 2 {
		t.Fatalf("Restarts = %d, want 2", info.Restarts)
	}

	pid, _ = actor.Spawn(ctx, sys, always, 0)
	_, err := actor.Await(ctx, sys, always, pid)
	var we *actor.WorkflowError
	if !errors.As(err, &we) || !strings.Contains(we.Message, "restart budget exhausted: panic: out of luck") {
		t.Fatalf("Await = %v", err)
	}
	// The panic keeps its identity through Await, and Inspect shows the
	// stack apart from the one-line error.
	var pe *actor.PanicError
	if !errors.As(err, &pe) || pe.Value != "out of luck" {
		t.Fatalf("Await error does not unwrap to the PanicError: %v", err)
	}
	info, _ := sys.Inspect(ctx, pid)
	if info.Status != persistence.StatusFailed || info.Restarts != 2 || strings.Contains(info.Error, "\n") {
		t.Fatalf("exhausted instance = %+v (want failed, 2 restarts, a one-line error)", info.Instance)
	}
	if !errors.As(info.Failure, &pe) || !strings.Contains(pe.Stack, "goroutine") {
		t.Fatalf("Inspect Failure = %#v, want a PanicError with the stack", info.Failure)
	}
}

// A NonDeterminismError stops the instance; it is not restarted.
func TestNonDeterminismStops(t *testing.T) {
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	a := actor.Activity("a", func(ctx context.Context, n int) (int, error) { return n, nil })
	b := actor.Activity("b", func(ctx context.Context, n int) (int, error) { return n, nil })
	v1 := actor.Workflow("changing", func(ctx *actor.Context, n int) (int, error) {
		if _, err := a.Run(ctx, n); err != nil {
			return 0, err
		}
		_, err := actor.Receive[int](ctx)
		return n, err
	})
	ctx := testutil.Ctx(t, 30*time.Second)
	sys1, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(v1), NodeID: "n", Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := actor.Spawn(ctx, sys1, v1, 7)
	for {
		if info, _ := sys1.Inspect(ctx, pid); info.HistoryLen >= 2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := sys1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The code changed under the running instance: it now calls b first.
	v2 := actor.Workflow("changing", func(ctx *actor.Context, n int) (int, error) {
		if _, err := b.Run(ctx, n); err != nil {
			return 0, err
		}
		return n, nil
	})
	sys2 := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(v2), NodeID: "n"})
	_, err = actor.Await(ctx, sys2, v2, pid)
	var we *actor.WorkflowError
	if !errors.As(err, &we) || !strings.Contains(we.Message, "non-deterministic") {
		t.Fatalf("Await = %v", err)
	}
	info, _ := sys2.Inspect(ctx, pid)
	if info.Restarts != 0 || info.History[1].Kind != "activity" || info.History[1].Name != "a" {
		t.Fatalf("instance = %+v, history %+v", info.Instance, info.History)
	}
}
