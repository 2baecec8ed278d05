package actor_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// publishJobs publishes n messages on "jobs" in one batch (queued: a batch
// is not handed to a consumer) and returns their IDs.
func publishJobs(t *testing.T, sys *actor.System, n int) map[string]bool {
	t.Helper()
	batch := make([]actor.Outgoing, n)
	for i := range batch {
		batch[i] = actor.Outgoing{Channel: "jobs", Message: i}
	}
	sent, err := sys.PublishBatch(testutil.Ctx(t, time.Minute), batch)
	if err != nil {
		t.Fatal(err)
	}
	ids := make(map[string]bool, len(sent))
	for _, id := range sent {
		ids[id] = true
	}
	return ids
}

// TestFetchClaimsGatherConsumers: draining a backlog, one claim serves the
// node's consumers together. Each claim's consumers come back for their
// next message one after another; the first back must not claim for
// itself alone while the rest queue behind it (claims then alternate
// between one consumer and the rest, about half the consumers per claim).
// The messages are still consumed once each.
func TestFetchClaimsGatherConsumers(t *testing.T) {
	const consumers, n = 8, 480
	for _, store := range batchStores {
		t.Run(store.name, func(t *testing.T) {
			base := store.open(t)
			in := &testutil.InterceptStore{Store: base}
			var mu sync.Mutex
			claims, moved := 0, 0
			in.AfterClaimQueue = func(_ string, _ []string, qc persistence.QueueClaim, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err == nil && len(qc.Messages) > 0 && qc.More {
					// A claim under a backlog (the last ones, as the queue
					// runs out, serve fewer).
					claims++
					moved += len(qc.Messages)
				}
			}
			sys := testutil.StartNode(t, actor.Config{Store: testutil.Notify(in, base), Workflows: actor.Register(queueConsumer),
				PassivateAfter: time.Hour, RecoveryInterval: time.Hour})
			// Under load (a race build, a busy CI machine) the consumers
			// may come back more slowly than a claim takes: the bound
			// is the test's, so that it checks the batching alone.
			sys.GatherFor(time.Second)
			pids := spawnConsumers(t, testutil.Ctx(t, time.Minute), sys, consumers)
			ids := publishJobs(t, sys, n)
			consumedOnce(t, sys, pids, ids)
			mu.Lock()
			defer mu.Unlock()
			if claims == 0 {
				t.Fatal("no claim under a backlog")
			}
			// Gathered, most claims serve all 8: 7.7 to 8 consumers per
			// claim in 8 runs; 5.6 to 8 in a race build beside two busy
			// loops on 2 cores. Not gathered: 4.3 to 4.7, and 3.2 to 4.7
			// under that load. On SQLite the fetcher claims only under a
			// backlog and its consumers park between claims, woken one by
			// one, so the figure varies from run to run (1.9 to 2.9
			// without gathering, 3.6 to 8 with): there the test checks
			// the consumption alone.
			if store.name != "postgres" {
				return
			}
			if per := float64(moved) / float64(claims); per < 5.2 {
				t.Fatalf("%d claims under a backlog moved %d messages, %.1f consumers per claim; want at least 5.2 of %d", claims, moved, per, consumers)
			}
		})
	}
}

// TestFetchedTakesCommitInSteps: a consumer fed by claims never reads its
// mailbox and, while the queue lasts, never parks; its takes must still
// commit every FlushFetchedAt messages, not pile up into one step for the
// whole backlog.
func TestFetchedTakesCommitInSteps(t *testing.T) {
	const n = 3 * actor.FlushFetchedAt
	for _, store := range batchStores {
		t.Run(store.name, func(t *testing.T) {
			base := store.open(t)
			in := &testutil.InterceptStore{Store: base}
			var mu sync.Mutex
			most := 0
			in.AfterApply = func(step persistence.Step, _ persistence.StepResult, err error) {
				if err != nil {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				most = max(most, takesIn(step))
			}
			sys := testutil.StartNode(t, actor.Config{Store: testutil.Notify(in, base), Workflows: actor.Register(queueConsumer),
				PassivateAfter: time.Hour, RecoveryInterval: time.Hour})
			pids := spawnConsumers(t, testutil.Ctx(t, time.Minute), sys, 1)
			ids := publishJobs(t, sys, n)
			consumedOnce(t, sys, pids, ids)
			mu.Lock()
			defer mu.Unlock()
			if most > actor.FlushFetchedAt {
				t.Fatalf("one step committed %d takes, want at most %d", most, actor.FlushFetchedAt)
			}
		})
	}
}

// TestStopDuringGather: a node that stops while its fetcher gathers
// consumers for a claim stops (the gather does not hold it up), and the
// node after it on the same store consumes every message once.
func TestStopDuringGather(t *testing.T) {
	const consumers, n = 8, 400
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	watch := actor.WatchParks(nil)
	cfg := actor.Config{Store: st, Workflows: actor.Register(queueConsumer), NodeID: "n1", Hooks: watch,
		PassivateAfter: time.Hour, RecoveryInterval: time.Hour}
	sys := testutil.StartNode(t, cfg)
	ctx := testutil.Ctx(t, 2*time.Minute)
	pids := spawnConsumers(t, ctx, sys, consumers)

	stopped := make(chan error, 1)
	var once sync.Once
	watch.OnGather(func() {
		once.Do(func() {
			go func() { stopped <- sys.Stop(ctx) }()
			// The gather waits on once the stop has begun.
			if !testutil.Until(ctx, sys.IsStopping) {
				t.Error("the stop did not begin")
			}
		})
	})
	ids := publishJobs(t, sys, n)
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("no gather, or the stop did not end")
	}

	cfg.NodeID, cfg.Hooks = "n2", nil
	sys2 := testutil.StartNode(t, cfg)
	consumedOnce(t, sys2, pids, ids)
	if s := channelStat(t, sys2, "jobs"); s.Waiting != 0 {
		t.Fatalf("after the restart %d messages still wait", s.Waiting)
	}
}
