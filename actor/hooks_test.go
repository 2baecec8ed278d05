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

type tagKey struct{}

// taggingHooks puts the attempt number into each activity attempt's
// context and records which activity events were observed with it.
type taggingHooks struct {
	recordingHooks
	tagged map[actor.HookKind]int
}

func (h *taggingHooks) ActivityContext(ctx context.Context, e actor.HookEvent) context.Context {
	return context.WithValue(ctx, tagKey{}, e.Attempt)
}

func (h *taggingHooks) Observe(ctx context.Context, e actor.HookEvent) {
	h.recordingHooks.Observe(ctx, e)
	if n, ok := ctx.Value(tagKey{}).(int); ok && n == e.Attempt {
		h.mu.Lock()
		h.tagged[e.Kind]++
		h.mu.Unlock()
	}
}

// TestMultiHooksAndActivityContext checks that MultiHooks hands every event
// to each of its hooks, that an ActivityContexter among them shapes the
// context the activity runs with and its events are observed with, and
// the stopped and failed events.
func TestMultiHooksAndActivityContext(t *testing.T) {
	plain := &recordingHooks{kinds: map[actor.HookKind]int{}}
	tagging := &taggingHooks{recordingHooks: recordingHooks{kinds: map[actor.HookKind]int{}}, tagged: map[actor.HookKind]int{}}
	tag := actor.Activity("tag", func(ctx context.Context, _ int) (int, error) {
		n, _ := ctx.Value(tagKey{}).(int)
		return n, nil
	})
	refuse := actor.Activity("refuse", func(ctx context.Context, _ int) (int, error) {
		return 0, supervisor.Terminal(errors.New("no"))
	})
	wf := actor.Workflow("tagged", func(ctx *actor.Context, fail bool) (int, error) {
		if fail {
			return refuse.Run(ctx, 0)
		}
		return tag.Run(ctx, 0)
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf),
		Hooks: actor.MultiHooks(plain, nil, tagging)})
	ctx := testutil.Ctx(t, 30*time.Second)
	ok, _ := actor.Spawn(ctx, sys, wf, false)
	if n, err := actor.Await(ctx, sys, wf, ok); err != nil || n != 1 {
		t.Fatalf("the activity saw attempt %d in its context (err %v), want 1", n, err)
	}
	bad, _ := actor.Spawn(ctx, sys, wf, true)
	if _, err := actor.Await(ctx, sys, wf, bad); err == nil {
		t.Fatal("the refused call succeeded")
	}
	// Stopped follows the end, after Await may have returned.
	testutil.Eventually(t, 10*time.Second, "both activations stopped", func() bool {
		return plain.count(actor.HookInstanceStopped) == 2 && tagging.count(actor.HookInstanceStopped) == 2
	})
	for _, h := range []*recordingHooks{plain, &tagging.recordingHooks} {
		for k, want := range map[actor.HookKind]int{actor.HookInstanceActivated: 2, actor.HookInstanceCompleted: 1,
			actor.HookInstanceFailed: 1, actor.HookActivityStarted: 2, actor.HookActivityFailed: 1} {
			if got := h.count(k); got != want {
				t.Errorf("%s observed %d times, want %d", k, got, want)
			}
		}
	}
	tagging.mu.Lock()
	defer tagging.mu.Unlock()
	if tagging.tagged[actor.HookActivityStarted] != 2 || tagging.tagged[actor.HookActivityFinished] != 2 {
		t.Errorf("activity events observed with the attempt's context: %v", tagging.tagged)
	}
}
