package actor_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/supervisor"
)

type recordingHooks struct {
	mu    sync.Mutex
	kinds map[actor.HookKind]int
}

func (h *recordingHooks) Observe(_ context.Context, e actor.HookEvent) {
	h.mu.Lock()
	h.kinds[e.Kind]++
	h.mu.Unlock()
}

func (h *recordingHooks) count(k actor.HookKind) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.kinds[k]
}

func TestHooksSeeLiveWork(t *testing.T) {
	h := &recordingHooks{kinds: map[actor.HookKind]int{}}
	tries := 0
	act := actor.Activity("flaky", func(ctx context.Context, n int) (int, error) {
		if tries++; tries == 1 {
			return 0, errors.New("once")
		}
		return n, nil
	}, actor.WithRetry(supervisor.Exponential(time.Millisecond, 1, time.Millisecond, 3)))
	wf := actor.Workflow("hooked", func(ctx *actor.Context, n int) (int, error) {
		if err := ctx.Send(ctx.PID(), 1); err != nil {
			return 0, err
		}
		if _, err := actor.Receive[int](ctx); err != nil {
			return 0, err
		}
		if err := ctx.Sleep(time.Millisecond); err != nil {
			return 0, err
		}
		return act.Run(ctx, n)
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf), Hooks: h})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 3)
	if _, err := actor.Await(ctx, sys, wf, pid); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[actor.HookKind]int{
		actor.HookInstanceStarted: 1, actor.HookInstanceCompleted: 1, actor.HookActivityStarted: 2,
		actor.HookActivityFinished: 2, actor.HookActivityRetried: 1, actor.HookMessageSent: 1,
		actor.HookMessageConsumed: 1, actor.HookTimerFired: 1,
	} {
		if got := h.count(k); got != want {
			t.Errorf("%s observed %d times, want %d", k, got, want)
		}
	}
}
