package actor_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// drainer receives n messages by PID and returns them in order.
var drainer = actor.Workflow("drainer", func(ctx *actor.Context, n int) ([]int, error) {
	var got []int
	for range n {
		m, err := actor.Receive[int](ctx)
		if err != nil {
			return got, err
		}
		got = append(got, m.Value)
	}
	return got, nil
})

// TestDrainReadsFewRowsPerMessage: a workflow that finds a backlog of mail
// takes one message per receive and records its takes in a step it
// commits later; until then the messages it took are still in the store,
// at the head of its mailbox. Each read must stay a few rows long (a first
// page of the mailbox), not grow with what the pending step consumed:
// that made draining a backlog quadratic (a subscriber with 1,000 waiting
// broadcast copies read 20 times more rows than it took). The messages
// still arrive once each, in order.
func TestDrainReadsFewRowsPerMessage(t *testing.T) {
	const n, page = 200, 8 // page: the first read of a mailbox scan
	for _, store := range batchStores {
		t.Run(store.name, func(t *testing.T) {
			base := store.open(t)
			in := &testutil.InterceptStore{Store: base}
			var mu sync.Mutex
			most := 0
			const pid = actor.PID("drainer-1")
			in.AfterMailbox = func(id string, msgs []persistence.Message, _ error) {
				mu.Lock()
				defer mu.Unlock()
				if id == string(pid) {
					most = max(most, len(msgs))
				}
			}
			sys := testutil.StartNode(t, actor.Config{Store: testutil.Notify(in, base), Workflows: actor.Register(drainer)})
			ctx := testutil.Ctx(t, liveWait)
			if _, err := actor.Spawn(ctx, sys, drainer, n, actor.WithID(string(pid))); err != nil {
				t.Fatal(err)
			}
			batch := make([]actor.Outgoing, n)
			for i := range batch {
				batch[i] = actor.Outgoing{Target: pid, Message: i}
			}
			// One commit: the whole backlog is there when it next reads.
			if _, err := sys.PublishBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
			got, err := actor.Await(ctx, sys, drainer, pid)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]int, n)
			for i := range want {
				want[i] = i
			}
			if !slices.Equal(got, want) {
				t.Fatalf("received %v, want 0..%d in order", got, n-1)
			}
			mu.Lock()
			defer mu.Unlock()
			if most > page {
				t.Fatalf("a mailbox read returned %d rows while draining %d messages, want at most %d", most, n, page)
			}
		})
	}
}
