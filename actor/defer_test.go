package actor_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// takesPerStep counts, for one instance, the committed steps that record
// takes and the takes they record.
type takesPerStep struct {
	id           string
	steps, takes atomic.Int64
}

// takesIn is how many messages step records taken.
func takesIn(step persistence.Step) int {
	n := 0
	for _, e := range step.History {
		if e.Kind == actor.EventReceived {
			n++
		}
	}
	return n
}

func (c *takesPerStep) watch(in *testutil.InterceptStore) {
	in.AfterApply = func(step persistence.Step, _ persistence.StepResult, err error) {
		if err != nil || step.Instance != c.id {
			return
		}
		if n := takesIn(step); n > 0 {
			c.steps.Add(1)
			c.takes.Add(int64(n))
		}
	}
}

// TestParkedTakesCommitTogether: a consumer that parks after each message
// handed to it commits its takes together, not one step per message, and
// each take still commits on its own once the consumer has waited a while
// with nothing new: every message ends up recorded, once.
func TestParkedTakesCommitTogether(t *testing.T) {
	const n = 40
	for _, store := range batchStores {
		t.Run(store.name, func(t *testing.T) {
			base := store.open(t)
			in := &testutil.InterceptStore{Store: base}
			c := &takesPerStep{id: "consumer-0"}
			c.watch(in)
			sys := testutil.StartNode(t, actor.Config{Store: testutil.Notify(in, base), Workflows: actor.Register(queueConsumer),
				PassivateAfter: time.Hour, RecoveryInterval: time.Hour})
			ctx := testutil.Ctx(t, time.Minute)
			pids := spawnConsumers(t, ctx, sys, 1)
			ids := map[string]bool{}
			for i := range n {
				// One at a time: each is handed to the consumer, which
				// takes it and parks again.
				id, err := sys.Publish(ctx, "jobs", i)
				if err != nil {
					t.Fatal(err)
				}
				ids[id] = true
			}
			consumedOnce(t, sys, pids, ids)
			// The hook sees a commit just after the store shows it.
			testutil.Eventually(t, 30*time.Second, "every take seen committed", func() bool { return c.takes.Load() >= n })
			if got := c.takes.Load(); got != n {
				t.Fatalf("%d takes committed, want %d", got, n)
			}
			if steps := c.steps.Load(); steps >= n {
				t.Fatalf("%d messages taken in %d steps: every take committed alone", n, steps)
			}
		})
	}
}

// TestDeferredTakesCommitBeforeStop: a node that stops while a consumer
// has takes it has not committed yet commits them first: the store has
// the take once the stop returns, and the node after it does not take the
// message again.
func TestDeferredTakesCommitBeforeStop(t *testing.T) {
	path := testutil.SQLitePath(t)
	base := testutil.OpenSQLite(t, path)
	in := &testutil.InterceptStore{Store: base}
	c := &takesPerStep{id: "consumer-0"}
	c.watch(in)
	watch := actor.WatchParks(nil)
	cfg := actor.Config{Store: testutil.Notify(in, base), Workflows: actor.Register(queueConsumer), NodeID: "n1", Hooks: watch,
		PassivateAfter: time.Hour, RecoveryInterval: time.Hour}
	sys := testutil.StartNode(t, cfg)
	ctx := testutil.Ctx(t, time.Minute)
	pids := spawnConsumers(t, ctx, sys, 1)
	waitIdle(t, sys, pids) // parked: its next park follows its take

	// Stop as the consumer parks with its take pending.
	stopped := make(chan error, 1)
	var once sync.Once
	var armed atomic.Bool
	watch.OnPark(func(id string) {
		if id != c.id || !armed.Load() {
			return
		}
		once.Do(func() { go func() { stopped <- sys.Stop(ctx) }() })
	})
	armed.Store(true)
	published := make(chan struct{})
	go func() {
		defer close(published)
		if _, err := sys.Publish(ctx, "jobs", 1); err != nil {
			t.Error(err)
		}
	}()
	<-published
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the consumer did not park after its take")
	}
	if got := c.takes.Load(); got != 1 {
		t.Fatalf("after the stop %d takes are committed, want 1", got)
	}
	cfg.NodeID, cfg.Hooks = "n2", nil
	sys2 := testutil.StartNode(t, cfg)
	if _, err := sys2.Publish(ctx, "jobs", 2); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "second message taken", func() bool { return c.takes.Load() == 2 })
	if got := len(receivedRefs(inspect(t, sys2, pids[0]).History)); got != 2 {
		t.Fatalf("the consumer's history records %d takes, want 2", got)
	}
}

// TestInspectCommitsTakesFirst: a take the instance holds back is
// committed before Inspect on its node reads it, so that the node running
// it shows what it took at once rather than up to deferTakesFor later.
func TestInspectCommitsTakesFirst(t *testing.T) {
	took := make(chan int)
	wf := actor.Workflow("taker", func(ctx *actor.Context, _ struct{}) (struct{}, error) {
		for {
			m, err := actor.Receive[int](ctx)
			if err != nil {
				return struct{}{}, err
			}
			select { // not on replay: the test has read what it needs
			case took <- m.Value:
			case <-time.After(time.Second):
			}
		}
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf),
		PassivateAfter: time.Hour, RecoveryInterval: time.Hour})
	ctx := testutil.Ctx(t, time.Minute)
	pid, err := actor.Spawn(ctx, sys, wf, struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := sys.Send(ctx, pid, i); err != nil {
			t.Fatal(err)
		}
		<-took // taken, and about to park with the take held back
		info, err := sys.Inspect(ctx, pid)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range info.History {
			if e.Kind == actor.EventReceived {
				n++
			}
		}
		if n != i+1 {
			t.Fatalf("after %d messages taken, Inspect shows %d", i+1, n)
		}
	}
}
