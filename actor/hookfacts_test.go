package actor_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

// fenceOnce takes the lease of one instance away from its node (as a
// cluster does for a node it declared failed: ReleaseLeases bumps the
// epoch) just before the first step of that instance that hit commits, so
// that the real store rejects the step with ErrFenced.
type fenceOnce struct {
	persistence.Store
	id, node string
	hit      func(persistence.Step) bool

	mu     sync.Mutex
	fenced bool
	done   chan struct{}
}

func (s *fenceOnce) Apply(ctx context.Context, step persistence.Step) (persistence.StepResult, error) {
	s.mu.Lock()
	fence := !s.fenced && step.Instance == s.id && s.hit(step)
	if fence {
		s.fenced = true
	}
	s.mu.Unlock()
	if fence {
		if err := s.ReleaseLeases(ctx, s.node); err != nil {
			return persistence.StepResult{}, err
		}
		defer close(s.done)
	}
	return s.Store.Apply(ctx, step)
}

// Hooks report facts: a timer firing, a consumed message, a retried and a
// failed activity whose step is fenced away report nothing, and the
// activation that redoes the work reports it once. Hook counts equal the
// history's, whatever node wrote it.
func TestFencedStepsReportNothing(t *testing.T) {
	t.Parallel()
	failing := actor.Activity("refuse", func(context.Context, int) (int, error) {
		return 0, supervisor.Terminal(errors.New("refused"))
	})
	cases := []struct {
		name  string
		hook  actor.HookKind
		event actor.EventKind
		wf    func(ctx *actor.Context, n int) (int, error)
		send  bool
		hit   func(persistence.Step) bool
	}{
		{"timer", actor.HookTimerFired, actor.EventTimerFired,
			func(ctx *actor.Context, n int) (int, error) { return n, ctx.Sleep(20 * time.Millisecond) }, false,
			func(s persistence.Step) bool { return len(s.FireTimers) > 0 }},
		{"message", actor.HookMessageConsumed, actor.EventReceived,
			func(ctx *actor.Context, n int) (int, error) {
				_, err := actor.Receive[int](ctx)
				return n, err
			}, true,
			func(s persistence.Step) bool { return len(s.Consume) > 0 }},
		{"activity failure", actor.HookActivityFailed, actor.EventActivity,
			func(ctx *actor.Context, n int) (int, error) {
				_, err := failing.Run(ctx, n)
				return n, err
			}, false,
			func(s persistence.Step) bool { return hasKind(s, string(actor.EventActivity)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			id := "fenced-" + c.hook
			wf := actor.Workflow("fenced", c.wf)
			st := &fenceOnce{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), id: string(id), node: "a",
				hit: c.hit, done: make(chan struct{})}
			var mu sync.Mutex
			seen := 0
			hooks := hookFunc(func(e actor.HookEvent) {
				if e.Kind == c.hook && e.Instance == string(id) {
					mu.Lock()
					seen++
					mu.Unlock()
				}
			})
			sys := testutil.StartNode(t, actor.Config{Store: st, NodeID: "a", Workflows: actor.Register(wf),
				Hooks: hooks, RecoveryInterval: 50 * time.Millisecond})
			ctx := testutil.Ctx(t, time.Minute)
			pid, err := actor.Spawn(ctx, sys, wf, 1, actor.WithID(string(id)))
			if err != nil {
				t.Fatal(err)
			}
			if c.send {
				if err := sys.Send(ctx, pid, 7); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-st.done:
			case <-ctx.Done():
				t.Fatal("the step was never fenced")
			}
			// The node's recovery scan takes the released instance again
			// and redoes the step.
			if _, err := actor.Await(ctx, sys, wf, pid); err != nil && c.hook != actor.HookActivityFailed {
				t.Fatal(err)
			}
			hist, err := sys.History(ctx, pid)
			if err != nil {
				t.Fatal(err)
			}
			inHistory := 0
			for _, e := range hist {
				if e.Kind == c.event && (c.event != actor.EventActivity || e.Error != "") {
					inHistory++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if inHistory != 1 || seen != inHistory {
				t.Fatalf("%s reported %d times; history holds %d %s events (want 1 each)", c.hook, seen, inHistory, c.event)
			}
		})
	}
}

func hasKind(s persistence.Step, kind string) bool {
	for _, e := range s.History {
		if e.Kind == kind {
			return true
		}
	}
	return false
}
