package actor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// retentionWorkflows: one that ends at once, one that waits for mail
// forever.
func retentionWorkflows() (*actor.WorkflowDef[int, int], *actor.WorkflowDef[int, string]) {
	quick := actor.Workflow("quick", func(_ *actor.Context, n int) (int, error) { return n * 2, nil })
	waiter := actor.Workflow("waiter", func(ctx *actor.Context, _ int) (string, error) {
		r, err := actor.Receive[string](ctx)
		return r.Value, err
	})
	return quick, waiter
}

// TestRetentionPurgesEndedInstances: with a short Retention, an ended
// instance disappears (Instance reads ErrNotFound, its history is gone)
// while a live one older than the retention stays, with its history.
func TestRetentionPurgesEndedInstances(t *testing.T) {
	t.Parallel()
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	quick, waiter := retentionWorkflows()
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(quick, waiter), Retention: time.Second})
	ctx := testutil.Ctx(t, 60*time.Second)

	live, err := actor.Spawn(ctx, sys, waiter, 0)
	if err != nil {
		t.Fatal(err)
	}
	ended, err := actor.Spawn(ctx, sys, quick, 21)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, quick, ended); err != nil || got != 42 {
		t.Fatalf("quick = %d, %v", got, err)
	}
	testutil.Eventually(t, 30*time.Second, "the ended instance purged", func() bool {
		_, err := sys.Instance(ctx, ended)
		return errors.Is(err, actor.ErrNotFound)
	})
	if h, err := st.HistoryRange(ctx, string(ended), 0, 0); err != nil || len(h) != 0 {
		t.Fatalf("purged instance's history = %d events, %v", len(h), err)
	}
	// The live instance is older than the cut-off that purged the ended
	// one (it started first), and stays.
	in, err := st.Instance(ctx, string(live))
	if err != nil || in.Status.Terminal() || in.HistoryLen == 0 {
		t.Fatalf("live instance = %+v, %v; want it kept", in, err)
	}
	if err := sys.Send(ctx, live, "bye"); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, waiter, live); err != nil || got != "bye" {
		t.Fatalf("live instance's result = %q, %v", got, err)
	}
}

// TestRetentionOff: a negative Retention never purges. The node's queue
// pruning (every QueueRetention, here 1s, on its recovery loop) is the
// clock: once it has run thrice with cut-offs after the instance ended, a
// retention of the same length would have purged it.
func TestRetentionOff(t *testing.T) {
	t.Parallel()
	ist := &testutil.InterceptStore{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t))}
	var mu sync.Mutex
	var purges int
	var cutoffs []time.Time
	ist.BeforePurge = func(persistence.PurgeFilter) {
		mu.Lock()
		purges++
		mu.Unlock()
	}
	ist.BeforePruneQueue = func(before time.Time) {
		mu.Lock()
		cutoffs = append(cutoffs, before)
		mu.Unlock()
	}
	quick, _ := retentionWorkflows()
	sys := testutil.StartNode(t, actor.Config{Store: ist, Workflows: actor.Register(quick), Retention: -1,
		QueueRetention: time.Second, RecoveryInterval: 50 * time.Millisecond})
	ctx := testutil.Ctx(t, 60*time.Second)
	pid, err := actor.Spawn(ctx, sys, quick, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Await(ctx, sys, quick, pid); err != nil {
		t.Fatal(err)
	}
	in, err := sys.Instance(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "three queue prunes past the instance's end", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range cutoffs {
			if c.After(in.UpdatedAt) {
				n++
			}
		}
		return n >= 3
	})
	mu.Lock()
	n := purges
	mu.Unlock()
	if n != 0 {
		t.Fatalf("a node with Retention -1 purged %d times", n)
	}
	if _, err := sys.Instance(ctx, pid); err != nil {
		t.Fatalf("ended instance with retention off: %v", err)
	}
}

// TestRetentionValidated: a positive Retention under a second is refused.
func TestRetentionValidated(t *testing.T) {
	t.Parallel()
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	_, err := actor.Start(context.Background(), actor.Config{Store: st, Retention: 500 * time.Millisecond})
	if !errors.Is(err, actor.ErrInvalidInput) {
		t.Fatalf("Start with Retention 500ms: %v, want ErrInvalidInput", err)
	}
}

// TestRetentionPurgesOwnBuckets: in a cluster each node purges the
// buckets it owns and no other, and together they purge every ended
// instance.
func TestRetentionPurgesOwnBuckets(t *testing.T) {
	t.Parallel()
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	net := newTableNet()
	net.set([]string{"a", "b"}, nil)
	quick, _ := retentionWorkflows()
	var mu sync.Mutex
	wrong := map[string]int{}  // purges of buckets the node does not own
	purged := map[string]int{} // purges per node
	nodes := map[string]*actor.System{}
	for _, name := range []string{"a", "b"} {
		ist := &testutil.InterceptStore{Store: st}
		ist.BeforePurge = func(f persistence.PurgeFilter) {
			mu.Lock()
			defer mu.Unlock()
			purged[name]++
			if f.Buckets == nil {
				wrong[name]++
			}
			for _, b := range f.Buckets {
				if net.owner(b) != name {
					wrong[name]++
				}
			}
		}
		nodes[name] = testutil.StartNode(t, actor.Config{Store: ist, Workflows: actor.Register(quick), NodeID: name,
			Cluster: net.node(), Retention: time.Second})
	}
	ctx := testutil.Ctx(t, 60*time.Second)
	var pids []actor.PID
	for i := range 20 {
		pid, err := actor.Spawn(ctx, nodes["a"], quick, i, actor.WithID(fmt.Sprintf("purge-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	for _, pid := range pids {
		if _, err := actor.Await(ctx, nodes["a"], quick, pid); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 30*time.Second, "every ended instance purged", func() bool {
		for _, pid := range pids {
			if _, err := st.Instance(ctx, string(pid)); !errors.Is(err, persistence.ErrNotFound) {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	if wrong["a"]+wrong["b"] != 0 || purged["a"] == 0 || purged["b"] == 0 {
		t.Fatalf("purges per node %v; purges of buckets not owned %v", purged, wrong)
	}
}
