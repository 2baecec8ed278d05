package actor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/norntype"
	"github.com/nornlabs/norn/supervisor"
)

// actor's event kinds are untyped copies of norntype's (so that the engine
// compares them with the store's string kinds); they must not drift.
func TestEventKindsMatchNorntype(t *testing.T) {
	t.Parallel()
	pairs := []struct{ actor, norntype norntype.EventKind }{
		{actor.EventStarted, norntype.EventStarted},
		{actor.EventActivity, norntype.EventActivity},
		{actor.EventActivityRetry, norntype.EventActivityRetry},
		{actor.EventNow, norntype.EventNow},
		{actor.EventTimer, norntype.EventTimer},
		{actor.EventTimerFired, norntype.EventTimerFired},
		{actor.EventReceived, norntype.EventReceived},
		{actor.EventReceiveWait, norntype.EventReceiveWait},
		{actor.EventReceiveTimeout, norntype.EventReceiveTimeout},
		{actor.EventSent, norntype.EventSent},
		{actor.EventPublished, norntype.EventPublished},
		{actor.EventSubscribed, norntype.EventSubscribed},
		{actor.EventUnsubscribed, norntype.EventUnsubscribed},
		{actor.EventCompensating, norntype.EventCompensating},
		{actor.EventCompensation, norntype.EventCompensation},
		{actor.EventChildSpawned, norntype.EventChildSpawned},
		{actor.EventLinkedExit, norntype.EventLinkedExit},
		{actor.EventMonitor, norntype.EventMonitor},
		{actor.EventCancelSent, norntype.EventCancelSent},
		{actor.EventCancelObserved, norntype.EventCancelObserved},
		{actor.EventVersion, norntype.EventVersion},
		{actor.EventEmitted, norntype.EventEmitted},
		{actor.EventCompleted, norntype.EventCompleted},
		{actor.EventFailed, norntype.EventFailed},
		{actor.EventCancelled, norntype.EventCancelled},
	}
	for _, p := range pairs {
		if p.actor != p.norntype {
			t.Errorf("actor has %q where norntype has %q", p.actor, p.norntype)
		}
	}
}

// Replay rebuilds a recorded failure from HistoryEvent.ErrorRecord alone, so
// a history copied without its rebuilt Failure (kept in a test fixture,
// say) still takes the branch the failure took.
func TestReplayReadsErrorRecord(t *testing.T) {
	t.Parallel()
	charge := actor.Activity("charge", func(_ context.Context, n int) (int, error) {
		return 0, supervisor.Terminal(errors.New("declined"))
	})
	refund := actor.Activity("refund", func(_ context.Context, n int) (int, error) { return n, nil })
	ship := actor.Activity("ship", func(_ context.Context, n int) (int, error) { return n, nil })
	wf := actor.Workflow("pay", func(ctx *actor.Context, n int) (int, error) {
		if _, err := charge.Run(ctx, n); err != nil {
			return refund.Run(ctx, n)
		}
		return ship.Run(ctx, n)
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Await(ctx, sys, wf, pid); err != nil {
		t.Fatal(err)
	}
	hist, err := sys.History(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for i := range hist {
		if hist[i].Failure != nil {
			failed++
			if hist[i].ErrorRecord == "" {
				t.Fatalf("event %d has a Failure and no ErrorRecord", hist[i].Seq)
			}
		}
		hist[i].Failure, hist[i].Error = nil, ""
	}
	if failed != 1 {
		t.Fatalf("%d failed events in history, want 1", failed)
	}
	if err := actor.Replay(ctx, wf, hist); err != nil {
		t.Fatalf("Replay without the rebuilt failures: %v", err)
	}
	// Without the record the activity reads as a success: the replay takes
	// the other branch and diverges.
	for i := range hist {
		hist[i].ErrorRecord = ""
	}
	var nd *actor.NonDeterminismError
	if err := actor.Replay(ctx, wf, hist); !errors.As(err, &nd) {
		t.Fatalf("Replay without error records = %v, want a NonDeterminismError", err)
	}
}
