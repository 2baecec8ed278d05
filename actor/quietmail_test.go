package actor_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// A workflow spawned here that waits for mail first parks without reading
// its mailbox (nothing can be there yet: any message from now on wakes it),
// and still gets a message sent at any moment of its start: while it is
// being launched, or between its (skipped) look and its park, from this
// node or from another process.
func TestNewInstanceParksWithoutReadingMailbox(t *testing.T) {
	type moment int
	const (
		launching moment = iota
		beforePark
	)
	for _, store := range []struct {
		name string
		open func(*testing.T) gapStores
	}{{"sqlite", sqliteGapStores}, {"postgres", postgresGapStores}} {
		for _, tc := range []struct {
			name   string
			at     moment
			remote bool
		}{
			{"launching/local", launching, false},
			{"launching/remote", launching, true},
			{"beforePark/local", beforePark, false},
			{"beforePark/remote", beforePark, true},
		} {
			t.Run(store.name+"/"+tc.name, func(t *testing.T) {
				wf := waiterWF()
				s := store.open(t)
				const id = "q1"
				var reads atomic.Int64
				s.inner.AfterMailbox = func(got string, _ []persistence.Message, _ error) {
					if got == id {
						reads.Add(1)
					}
				}
				// As the spawn's commit returns: the instance is created
				// under this node's lease, its activation not launched.
				var created atomic.Pointer[func()]
				s.inner.AfterApply = func(step persistence.Step, _ persistence.StepResult, err error) {
					if fn := created.Load(); fn != nil && step.Create != nil && step.Create.ID == id && err == nil {
						(*fn)()
					}
				}
				// The new instance makes no store call between its
				// creation and its park: only the park watch sees that.
				parks := actor.WatchParks(nil)
				sys := testutil.StartNode(t, slowNets(actor.Config{Store: s.node, Workflows: actor.Register(wf), Hooks: parks}))
				testutil.Eventually(t, liveWait, "listening", func() bool { return s.node.Listening() > 0 })
				ctx := testutil.Ctx(t, liveWait)
				// Another process sends as a client System does: its
				// commit reaches this node as a wake request or
				// notification.
				from := sys
				if tc.remote {
					from = testutil.StartNode(t, actor.Config{Store: s.remote, Client: true})
				}
				var fired atomic.Bool
				var readsAtPark atomic.Int64
				send := func() {
					if err := from.Send(context.Background(), id, "hello"); err != nil {
						t.Error(err)
					}
				}
				parks.OnPark(func(got string) {
					if got != id || !fired.CompareAndSwap(false, true) {
						return
					}
					readsAtPark.Store(reads.Load())
					if tc.at == beforePark {
						send()
					}
				})
				if tc.at == launching {
					created.Store(&send)
				}
				pid, err := actor.Spawn(ctx, sys, wf, 0, actor.WithID(id))
				if err != nil {
					t.Fatal(err)
				}
				if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != "hello" {
					t.Fatalf("Await = %q, %v; want hello", got, err)
				}
				if !fired.Load() {
					t.Fatal("the instance never parked")
				}
				if n := readsAtPark.Load(); n != 0 {
					t.Fatalf("the new instance read its mailbox %d times before its first park; want 0", n)
				}
				if reads.Load() == 0 {
					t.Fatal("the message was taken without a mailbox read")
				}
			})
		}
	}
}

// A new instance that parked without reading its mailbox and is stopped
// with the node still gets a message sent meanwhile: the next node's
// activation replays it and reads the mailbox.
func TestNewInstanceStoppedBeforeItsFirstRead(t *testing.T) {
	wf := waiterWF()
	s := sqliteGapStores(t)
	const id = "q2"
	parks := actor.WatchParks(nil) // the new instance parks without a store call
	sys := testutil.StartNode(t, slowNets(actor.Config{Store: s.node, Workflows: actor.Register(wf), Hooks: parks}))
	stopped := make(chan error, 1)
	var fired atomic.Bool
	parks.OnPark(func(got string) {
		if got != id || !fired.CompareAndSwap(false, true) {
			return
		}
		go func() { stopped <- sys.Stop(context.Background()) }()
		testutil.Eventually(t, liveWait, "stop begins", sys.IsStopping)
		remoteSend(t, s.remote, id, "late")
	})
	ctx := testutil.Ctx(t, liveWait)
	pid, err := actor.Spawn(ctx, sys, wf, 0, actor.WithID(id))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	next := testutil.StartNode(t, actor.Config{Store: s.remote, Workflows: actor.Register(wf)})
	if got, err := actor.Await(ctx, next, wf, pid); err != nil || got != "late" {
		t.Fatalf("Await on the next node = %q, %v; want late", got, err)
	}
}
