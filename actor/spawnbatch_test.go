package actor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// batchStorePairs open two stores on one fresh database, as a node and a
// client in two processes would.
var batchStorePairs = []struct {
	name string
	open func(*testing.T) (persistence.Store, persistence.Store)
}{
	{"sqlite", func(t *testing.T) (persistence.Store, persistence.Store) {
		path := testutil.SQLitePath(t)
		return testutil.OpenSQLite(t, path), testutil.OpenSQLite(t, path)
	}},
	{"postgres", func(t *testing.T) (persistence.Store, persistence.Store) {
		url := testutil.PostgresURL(t)
		return openPostgres(t, url), openPostgres(t, url)
	}},
}

// runCounter counts the live (not replayed) runs of each instance of the
// workflow it makes.
type runCounter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *runCounter) workflow(name string) *actor.WorkflowDef[int, int] {
	return actor.Workflow(name, func(ctx *actor.Context, n int) (int, error) {
		if !ctx.Replaying() {
			c.mu.Lock()
			if c.runs == nil {
				c.runs = map[string]int{}
			}
			c.runs[ctx.InstanceID()]++
			c.mu.Unlock()
		}
		return 2 * n, nil
	})
}

func (c *runCounter) count() (instances, runs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.runs {
		runs += n
	}
	return len(c.runs), runs
}

// hookCounter counts the hook events of each kind.
type hookCounter struct {
	mu    sync.Mutex
	kinds map[actor.HookKind]int
}

func (h *hookCounter) Observe(_ context.Context, e actor.HookEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.kinds == nil {
		h.kinds = map[actor.HookKind]int{}
	}
	h.kinds[e.Kind]++
}

func (h *hookCounter) get(k actor.HookKind) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.kinds[k]
}

// Every instance of a batch runs to completion, with its own input, and
// reports one start.
func TestSpawnBatchRuns(t *testing.T) {
	for _, store := range batchStores {
		t.Run(store.name, func(t *testing.T) {
			var runs runCounter
			var hooks hookCounter
			wf := runs.workflow("double")
			sys := testutil.StartNode(t, actor.Config{Store: store.open(t), Workflows: actor.Register(wf), Hooks: &hooks})
			ctx := testutil.Ctx(t, liveWait)
			inputs := make([]int, 200)
			for i := range inputs {
				inputs[i] = i
			}
			pids, err := actor.SpawnBatch(ctx, sys, wf, inputs)
			if err != nil {
				t.Fatal(err)
			}
			if len(pids) != len(inputs) {
				t.Fatalf("%d PIDs for %d inputs", len(pids), len(inputs))
			}
			for i, pid := range pids {
				out, err := actor.Await(ctx, sys, wf, pid)
				if err != nil || out != 2*i {
					t.Fatalf("instance %d (%s): %d, %v; want %d", i, pid, out, err, 2*i)
				}
			}
			ranOnceEach(t, &runs, &hooks, len(inputs))
		})
	}
}

// A client runs nothing: the instances of its batch are created without a
// lease and run by the node, which hears of them through the store alone.
func TestSpawnBatchFromClient(t *testing.T) {
	for _, store := range batchStorePairs {
		t.Run(store.name, func(t *testing.T) {
			var runs runCounter
			wf := runs.workflow("double")
			nodeStore, clientStore := store.open(t)
			// No recovery scan: only the wake-ups of the creation start them.
			node := testutil.StartNode(t, actor.Config{Store: nodeStore, Workflows: actor.Register(wf), RecoveryInterval: time.Hour})
			client := testutil.StartNode(t, actor.Config{Store: clientStore, Client: true, NodeID: "the-client"})
			ctx := testutil.Ctx(t, liveWait)
			// Its start-up scan is over: it would find the instances too.
			testutil.Eventually(t, liveWait, "the node's start-up scan", node.Idle)
			pids, err := actor.SpawnBatch(ctx, client, wf, []int{1, 2, 3, 4, 5})
			if err != nil {
				t.Fatal(err)
			}
			for i, pid := range pids {
				out, err := actor.Await(ctx, client, wf, pid)
				if err != nil || out != 2*(i+1) {
					t.Fatalf("instance %d: %d, %v", i, out, err)
				}
			}
		})
	}
}

// A batch with IDs run again creates nothing twice: the items that exist
// say so, the new ones start, and every instance ran once.
func TestSpawnBatchIDIdempotent(t *testing.T) {
	for _, store := range batchStores {
		t.Run(store.name, func(t *testing.T) {
			var runs runCounter
			var hooks hookCounter
			wf := runs.workflow("double")
			st := store.open(t)
			sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), Hooks: &hooks})
			ctx := testutil.Ctx(t, liveWait)
			items := make([]actor.SpawnItem[int], 30)
			for i := range items {
				items[i] = actor.SpawnItem[int]{ID: fmt.Sprintf("order-%03d", i), Input: i}
			}
			first, err := actor.SpawnBatchID(ctx, sys, wf, items[:20])
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range first {
				if s.Existed || s.PID != actor.PID(items[i].ID) {
					t.Fatalf("first batch, item %d: %+v", i, s)
				}
			}
			// Half of them have ended when the batch is repeated, half may
			// still run.
			for _, s := range first[:10] {
				if _, err := actor.Await(ctx, sys, wf, s.PID); err != nil {
					t.Fatal(err)
				}
			}
			again, err := actor.SpawnBatchID(ctx, sys, wf, items)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range again {
				if s.Existed != (i < 20) || s.PID != actor.PID(items[i].ID) {
					t.Fatalf("repeated batch, item %d: %+v", i, s)
				}
			}
			for i, s := range again {
				out, err := actor.Await(ctx, sys, wf, s.PID)
				if err != nil || out != 2*i {
					t.Fatalf("item %d: %d, %v", i, out, err)
				}
				h, err := st.History(ctx, items[i].ID, 0)
				if err != nil || len(h) == 0 || h[0].Kind != actor.EventStarted {
					t.Fatalf("history of %s: %+v, %v", items[i].ID, h, err)
				}
				for _, e := range h[1:] {
					if e.Kind == actor.EventStarted {
						t.Fatalf("%s started twice: %+v", items[i].ID, h)
					}
				}
			}
			ranOnceEach(t, &runs, &hooks, len(items))
		})
	}
}

// One bad item fails the whole batch with an error naming it, and nothing
// of the batch is written: not the items before it, not those after.
func TestSpawnBatchErrorWritesNothing(t *testing.T) {
	for _, store := range batchStores {
		t.Run(store.name, func(t *testing.T) {
			var runs runCounter
			var hooks hookCounter
			wf := runs.workflow("double")
			other := actor.Workflow("other", func(ctx *actor.Context, n int) (int, error) { return n, nil })
			unregistered := actor.Workflow("unregistered", func(ctx *actor.Context, n int) (int, error) { return n, nil })
			big := actor.Workflow("big", func(ctx *actor.Context, s string) (string, error) { return s, nil })
			st := store.open(t)
			sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf, other, big), Hooks: &hooks, MaxPayload: 1024})
			ctx := testutil.Ctx(t, liveWait)
			if _, err := actor.SpawnID(ctx, sys, other, "taken", 1); err != nil {
				t.Fatal(err)
			}
			started := hooks.get(actor.HookInstanceStarted)
			items := func(ids ...string) []actor.SpawnItem[int] {
				out := make([]actor.SpawnItem[int], len(ids))
				for i, id := range ids {
					out[i] = actor.SpawnItem[int]{ID: id, Input: i}
				}
				return out
			}
			cases := []struct {
				name  string
				spawn func() error
				index int
				is    error
			}{
				{"ID of another workflow", func() error {
					_, err := actor.SpawnBatchID(ctx, sys, wf, items("a", "b", "taken", "c"))
					var conflict *actor.IDConflictError
					if errors.As(err, &conflict) && (conflict.ID != "taken" || conflict.Workflow != "other" || conflict.Requested != "double") {
						t.Errorf("conflict = %+v", conflict)
					}
					return err
				}, 2, actor.ErrIDConflict},
				{"ID given twice", func() error {
					_, err := actor.SpawnBatchID(ctx, sys, wf, items("a", "b", "a"))
					return err
				}, 2, actor.ErrInvalidInput},
				{"empty ID", func() error {
					_, err := actor.SpawnBatchID(ctx, sys, wf, items("a", ""))
					return err
				}, 1, actor.ErrInvalidInput},
				{"invalid ID", func() error {
					_, err := actor.SpawnBatchID(ctx, sys, wf, items("a", "b", "c\n"))
					return err
				}, 2, actor.ErrInvalidInput},
				{"payload too large", func() error {
					_, err := actor.SpawnBatch(ctx, sys, big, []string{"small", strings.Repeat("x", 2000), "small"})
					return err
				}, 1, actor.ErrPayloadTooLarge},
				{"unregistered workflow", func() error {
					_, err := actor.SpawnBatch(ctx, sys, unregistered, []int{1, 2})
					return err
				}, -1, actor.ErrUnknownWorkflow},
			}
			for _, tc := range cases {
				err := tc.spawn()
				if !errors.Is(err, tc.is) {
					t.Fatalf("%s: err = %v, want %v", tc.name, err, tc.is)
				}
				var be *actor.BatchError
				if got := errors.As(err, &be); got != (tc.index >= 0) || got && be.Index != tc.index {
					t.Fatalf("%s: err = %#v, want a *BatchError naming item %d", tc.name, err, tc.index)
				}
			}
			all, err := st.List(ctx, persistence.ListFilter{})
			if err != nil {
				t.Fatal(err)
			}
			if len(all) != 1 || all[0].ID != "taken" {
				t.Fatalf("instances after failed batches: %+v", all)
			}
			if got := hooks.get(actor.HookInstanceStarted); got != started {
				t.Fatalf("%d %s hooks after failed batches, want %d", got, actor.HookInstanceStarted, started)
			}
			if n, _ := runs.count(); n != 0 {
				t.Fatalf("%d instances of a failed batch ran", n)
			}
		})
	}
}

const batchCrashItems = 300

// batchCrashWorkflow runs one activity; in the child it blocks until the
// process is killed, so that every instance is mid-flight then.
func batchCrashWorkflow(block bool) *actor.WorkflowDef[int, int] {
	step := actor.Activity("batch-crash-step", func(ctx context.Context, n int) (int, error) {
		if block {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return n + 1, nil
	})
	return actor.Workflow("batch-crash", func(ctx *actor.Context, n int) (int, error) { return step.Run(ctx, n) })
}

func batchCrashItemsOf() []actor.SpawnItem[int] {
	items := make([]actor.SpawnItem[int], batchCrashItems)
	for i := range items {
		items[i] = actor.SpawnItem[int]{ID: fmt.Sprintf("job-%03d", i), Input: i}
	}
	return items
}

func init() {
	registerChildRole("spawn-batch", func() int {
		ctx := context.Background()
		st, err := sqlite.Open(ctx, os.Getenv("NORN_CHILD_DB"), sqlite.Options{})
		if err != nil {
			return childFail("open: %v", err)
		}
		wf := batchCrashWorkflow(true)
		sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(wf), NodeID: "batch-child", LeaseTTL: time.Hour,
			Logger: testutil.Logger()})
		if err != nil {
			return childFail("start: %v", err)
		}
		if _, err := actor.SpawnBatchID(ctx, sys, wf, batchCrashItemsOf()); err != nil {
			return childFail("spawn batch: %v", err)
		}
		childSay("SPAWNED")
		select {}
	})
}

// A node killed right after its batch committed (every instance created
// under its lease, started here) leaves nothing behind: the node back
// under its ID runs each instance once, and the batch repeated creates
// nothing.
func TestSpawnBatchKill9(t *testing.T) {
	path := testutil.SQLitePath(t)
	child := startChild(t, "spawn-batch", "NORN_CHILD_DB="+path)
	child.waitLine(t, "SPAWNED", time.Minute)
	child.kill9(t)

	st := testutil.OpenSQLite(t, path)
	wf := batchCrashWorkflow(false)
	// A lease far longer than the test: only the node's own takeover of
	// its leases can run them.
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), NodeID: "batch-child", LeaseTTL: time.Hour})
	ctx := testutil.Ctx(t, liveWait)
	again, err := actor.SpawnBatchID(ctx, sys, wf, batchCrashItemsOf())
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range again {
		if !s.Existed {
			t.Fatalf("item %d created again after the crash", i)
		}
		if out, err := actor.Await(ctx, sys, wf, s.PID); err != nil || out != i+1 {
			t.Fatalf("%s = %d, %v; want %d", s.PID, out, err, i+1)
		}
	}
}

// ranOnceEach fails unless n instances ran, each once, and n started hooks
// fired.
func ranOnceEach(t *testing.T, runs *runCounter, hooks *hookCounter, n int) {
	t.Helper()
	if got, r := runs.count(); got != n || r != n {
		t.Fatalf("%d instances ran %d times, want %d once each", got, r, n)
	}
	if got := hooks.get(actor.HookInstanceStarted); got != n {
		t.Fatalf("%d %s hooks, want %d", got, actor.HookInstanceStarted, n)
	}
}
