package actor_test

import (
	"context"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
)

// On PostgreSQL a passivated instance is loaded with its mailbox as read
// at that moment (persistence.Loader). Mail that comes after the load, and
// whose wake the activation takes while it waits for something else, is
// still received: here the instance is woken by its timer, mail arrives
// while an activity it then runs is under way, and only after that does
// it receive.
func TestMailAfterLoadIsReceived(t *testing.T) {
	url := testutil.PostgresURL(t)
	started, release := make(chan struct{}, 1), make(chan struct{})
	block := actor.Activity("block", func(ctx context.Context, _ int) (int, error) {
		started <- struct{}{}
		select {
		case <-release:
			return 0, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	wf := actor.Workflow("late-mail", func(ctx *actor.Context, _ int) (string, error) {
		if err := ctx.Sleep(300 * time.Millisecond); err != nil {
			return "", err
		}
		if _, err := block.Run(ctx, 0); err != nil {
			return "", err
		}
		m, err := actor.Receive[string](ctx)
		return m.Value, err
	})
	passivated := make(chan struct{}, 1)
	sys := testutil.StartNode(t, actor.Config{Store: openPostgres(t, url), Workflows: actor.Register(wf),
		PassivateAfter: 20 * time.Millisecond, RecoveryInterval: time.Hour,
		Hooks: hookFunc(func(e actor.HookEvent) {
			if e.Kind == actor.HookInstancePassivated {
				select {
				case passivated <- struct{}{}:
				default:
				}
			}
		})})
	ctx := testutil.Ctx(t, liveWait)
	pid, err := actor.Spawn(ctx, sys, wf, 0)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-passivated: // parked in its sleep, then passivated: the timer loads it
	case <-ctx.Done():
		t.Fatal("the instance never passivated")
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the activity never started")
	}
	if err := sys.Send(ctx, pid, "late"); err != nil {
		t.Fatal(err)
	}
	close(release)
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil || got != "late" {
		t.Fatalf("Await = %q, %v; want late", got, err)
	}
}

// Mail that arrives while a passivated instance is being loaded (after the
// store read its mailbox, before the activation is registered) is
// received: sent from this node, and from another process (its
// notification comes through PostgreSQL).
func TestMailDuringLoadIsReceived(t *testing.T) {
	two := actor.Workflow("two", func(ctx *actor.Context, _ int) (string, error) {
		a, err := actor.Receive[string](ctx)
		if err != nil {
			return "", err
		}
		b, err := actor.Receive[string](ctx)
		return a.Value + b.Value, err
	})
	for _, remote := range []bool{false, true} {
		t.Run(map[bool]string{false: "local send", true: "remote send"}[remote], func(t *testing.T) {
			url := testutil.PostgresURL(t)
			st, other := openPostgres(t, url), openPostgres(t, url)
			ctx := testutil.Ctx(t, liveWait)
			// Park it in its first receive until it passivates (waiting,
			// no lease), then stop that node.
			passivated := make(chan struct{}, 1)
			first, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(two), Logger: testutil.Logger(),
				PassivateAfter: 20 * time.Millisecond, RecoveryInterval: time.Hour,
				Hooks: hookFunc(func(e actor.HookEvent) {
					if e.Kind == actor.HookInstancePassivated {
						passivated <- struct{}{}
					}
				})})
			if err != nil {
				t.Fatal(err)
			}
			pid, err := actor.Spawn(ctx, first, two, 0, actor.WithID("l1"))
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-passivated:
			case <-ctx.Done():
				t.Fatal("the instance never passivated")
			}
			if err := first.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			remoteSend(t, other, pid, "a")
			// The next node's start-up pass loads it (one read of instance,
			// history and mailbox); it pauses there.
			g := newPausePoint()
			sys := testutil.StartNode(t, slowNets(actor.Config{Store: st, Workflows: actor.Register(two),
				Hooks: pauseAt(g, actor.HookInstanceActivated, "l1")}))
			g.wait(t)
			if remote {
				remoteSend(t, other, pid, "b")
			} else if err := sys.Send(ctx, pid, "b"); err != nil {
				t.Fatal(err)
			}
			g.open()
			got, err := actor.Await(ctx, sys, two, pid)
			if err != nil || got != "ab" {
				t.Fatalf("Await = %q, %v; want ab", got, err)
			}
		})
	}
}
