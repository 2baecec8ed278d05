package actor_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// Queries hammer an instance that passivates soon after each park, so
// that they arrive at every point of its park, its settle, its
// passivation and its next load, while messages keep coming: no query may
// cost the instance a wake. Each message is summed before the next is
// sent (the sum read by a query too); every other one goes to the
// instance once it has passivated, the others while it is parked live.
func TestQueriesDuringPassivationLoseNoWake(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		open func(t *testing.T) persistence.Store
	}{
		{"sqlite", func(t *testing.T) persistence.Store { return testutil.OpenSQLite(t, testutil.SQLitePath(t)) }},
		{"postgres", func(t *testing.T) persistence.Store { return openPostgres(t, testutil.PostgresURL(t)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int64
			wf := counter(&runs)
			var passivated atomic.Int64
			sys := testutil.StartNode(t, actor.Config{Store: c.open(t), Workflows: actor.Register(wf), PassivateAfter: 10 * time.Millisecond,
				Hooks: hookFunc(func(e actor.HookEvent) {
					if e.Kind == actor.HookInstancePassivated {
						passivated.Add(1)
					}
				})})
			ctx := testutil.Ctx(t, liveWait)
			pid, err := actor.Spawn(ctx, sys, wf, 0, actor.WithID("q"))
			if err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			defer func() { close(stop); wg.Wait() }()
			for range 4 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						_, _ = actor.Query[int](ctx, sys, pid, "sum", nil)
					}
				})
			}
			const n = 60
			for i := 1; i <= n; i++ {
				before := passivated.Load()
				if err := sys.Send(ctx, pid, 1); err != nil {
					t.Fatal(err)
				}
				testutil.Eventually(t, 15*time.Second, fmt.Sprintf("message %d summed", i), func() bool {
					sum, err := actor.Query[int](ctx, sys, pid, "sum", nil)
					return err == nil && sum == i
				})
				if i%2 == 1 {
					// A passivation after the send (or just before it:
					// then the send found the instance passivated).
					testutil.Eventually(t, 15*time.Second, fmt.Sprintf("passivation after message %d", i), func() bool {
						return passivated.Load() > before
					})
				}
			}
		})
	}
}
