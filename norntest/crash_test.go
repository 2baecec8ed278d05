package norntest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntest"
)

// recordingTB is a testing.TB whose failures are recorded instead of
// failing the test, for tests that check the kit fails a broken test.
type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	failed []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recordingTB) Fatal(args ...any) {
	r.Errorf("%s", fmt.Sprint(args...))
	runtime.Goexit()
}

func (r *recordingTB) FailNow() { runtime.Goexit() }

func (r *recordingTB) failures() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.failed, "\n")
}

// expectFailure runs body with a recording TB and returns what it failed
// with; it fails t if body did not fail.
func expectFailure(t *testing.T, body func(tb testing.TB)) string {
	t.Helper()
	rec := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		body(rec)
	}()
	<-done
	msg := rec.failures()
	if msg == "" {
		t.Fatal("the kit passed a test it should have failed")
	}
	return msg
}

var reserve = actor.Activity("reserve", func(_ context.Context, item string) (string, error) {
	return "rsv-" + item, nil
})

var ship = actor.Activity("ship", func(_ context.Context, item string) (string, error) {
	return "trk-" + item, nil
})

// orderFlow reserves, waits a day, charges and ships.
var orderFlow = actor.Workflow("order", func(ctx *actor.Context, item string) (string, error) {
	r, err := reserve.Run(ctx, item)
	if err != nil {
		return "", err
	}
	if err := ctx.Sleep(24 * time.Hour); err != nil {
		return "", err
	}
	c, err := charge.Run(ctx, len(item))
	if err != nil {
		return "", err
	}
	s, err := ship.Run(ctx, item)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %s %s at %s", r, c, s, ctx.Now().Format(time.RFC3339)), nil
})

func mockCharge(env *norntest.Env) {
	norntest.Mock(env, charge, func(_ context.Context, cents int) (string, error) {
		return fmt.Sprintf("ch-%d", cents), nil
	})
}

func TestCrashEverywhereDeterministicWorkflowPasses(t *testing.T) {
	t.Parallel()
	rep := norntest.CrashEverywhere(t, norntest.Options{Workflows: actor.Register(orderFlow)}, orderFlow, "widget", mockCharge)
	if rep.Commits < 4 || rep.Runs != int(rep.Commits) {
		t.Fatalf("report %+v: want a run per commit boundary (and at least 4 commits)", rep)
	}
	t.Logf("%d commits, %d runs", rep.Commits, rep.Runs)
}

// wallClock records the wall clock: a replay after a crash sees another
// time.
var wallClock = actor.Workflow("wall-clock", func(ctx *actor.Context, item string) (string, error) {
	stamp := time.Now().Format(time.RFC3339Nano)
	if _, err := reserve.Run(ctx, item+"@"+stamp); err != nil {
		return "", err
	}
	if err := ctx.Sleep(time.Hour); err != nil {
		return "", err
	}
	return ship.Run(ctx, item)
})

func TestCrashEverywhereCatchesWallClock(t *testing.T) {
	t.Parallel()
	msg := expectFailure(t, func(tb testing.TB) {
		norntest.CrashEverywhere(tb, norntest.Options{Workflows: actor.Register(wallClock)}, wallClock, "widget", nil)
	})
	if !strings.Contains(msg, "crashed after commit") {
		t.Fatalf("failed, but not at a crash: %s", msg)
	}
	t.Logf("the kit failed the test with: %s", msg)
}

// mapOrder calls an activity per key of a map, in the map's order.
var mapOrder = actor.Workflow("map-order", func(ctx *actor.Context, _ string) (int, error) {
	items := map[string]bool{"a": true, "b": true, "c": true, "d": true, "e": true, "f": true, "g": true, "h": true}
	n := 0
	for item := range items {
		if _, err := reserve.Run(ctx, item); err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
})

func TestCrashEverywhereCatchesMapOrder(t *testing.T) {
	t.Parallel()
	msg := expectFailure(t, func(tb testing.TB) {
		norntest.CrashEverywhere(tb, norntest.Options{Workflows: actor.Register(mapOrder)}, mapOrder, "", nil)
	})
	if !strings.Contains(msg, "crashed after commit") {
		t.Fatalf("failed, but not at a crash: %s", msg)
	}
	t.Logf("the kit failed the test with: %s", msg)
}

func TestManualClockDoesNotSkip(t *testing.T) {
	t.Parallel()
	msg := expectFailure(t, func(tb testing.TB) {
		env := norntest.New(tb, norntest.Options{Workflows: actor.Register(approvalFlow), ManualTime: true, Timeout: 300 * time.Millisecond})
		pid := norntest.Spawn(env, approvalFlow, 1000)
		norntest.Await(env, approvalFlow, pid)
	})
	if !strings.Contains(msg, "moves only by Advance") {
		t.Fatalf("timed out, but said: %s", msg)
	}
}
