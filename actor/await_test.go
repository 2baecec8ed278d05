package actor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// readCounter counts the instance reads that reach the store.
type readCounter struct {
	persistence.Store
	reads atomic.Int64
}

func (r *readCounter) Instance(ctx context.Context, id string) (persistence.Instance, error) {
	r.reads.Add(1)
	return r.Store.Instance(ctx, id)
}

// TestAwaitLocalReadsNothing: awaiting an instance that runs on this node
// is answered by its end, not by reading the store; one that passivates
// while awaited (its activation ends without ending it) is awaited on
// until it ends.
func TestAwaitLocalReadsNothing(t *testing.T) {
	st := &readCounter{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t))}
	release := make(chan struct{})
	blocked := actor.Activity("blocked", func(ctx context.Context, n int) (int, error) {
		<-release
		return n + 1, nil
	})
	wf := actor.Workflow("await-local", func(ctx *actor.Context, n int) (int, error) {
		return blocked.Run(ctx, n)
	})
	waiter := actor.Workflow("await-passivating", func(ctx *actor.Context, _ int) (string, error) {
		m, err := actor.Receive[string](ctx)
		return m.Value, err
	})
	passivated := make(chan struct{}, 1)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf, waiter),
		PassivateAfter: 10 * time.Millisecond, RecoveryInterval: time.Hour,
		Hooks: hookFunc(func(e actor.HookEvent) {
			if e.Kind == actor.HookInstancePassivated {
				select {
				case passivated <- struct{}{}:
				default:
				}
			}
		})})
	ctx := testutil.Ctx(t, time.Minute)

	pid, err := actor.Spawn(ctx, sys, wf, 41)
	if err != nil {
		t.Fatal(err)
	}
	before := st.reads.Load()
	got := make(chan int, 1)
	go func() {
		v, err := actor.Await(ctx, sys, wf, pid)
		if err != nil {
			t.Error(err)
		}
		got <- v
	}()
	testutil.Eventually(t, 10*time.Second, "Await waiting", func() bool { return sys.Waiters(string(pid)) == 1 })
	close(release)
	if v := <-got; v != 42 {
		t.Fatalf("Await = %d, want 42", v)
	}
	if n := st.reads.Load() - before; n != 0 {
		t.Fatalf("Await of a local instance read the store %d times", n)
	}

	pid2, err := actor.Spawn(ctx, sys, waiter, 0)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan string, 1)
	go func() {
		v, err := actor.Await(ctx, sys, waiter, pid2)
		if err != nil {
			t.Error(err)
		}
		res <- v
	}()
	select {
	case <-passivated:
	case <-ctx.Done():
		t.Fatal("the awaited instance never passivated")
	}
	if err := sys.Send(ctx, pid2, "hello"); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-res:
		if v != "hello" {
			t.Fatalf("Await = %q, want hello", v)
		}
	case <-ctx.Done():
		t.Fatal("Await of an instance that passivated and came back never returned")
	}
}
