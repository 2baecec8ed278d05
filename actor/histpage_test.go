package actor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// historyReads is a real store that counts its history reads.
type historyReads struct {
	persistence.Store
	mu       sync.Mutex
	whole    int // History calls
	pages    int // HistoryRange calls
	maxLimit int // largest HistoryRange limit (0: none asked)
}

func (r *historyReads) History(ctx context.Context, id string, from int64) ([]persistence.Event, error) {
	r.mu.Lock()
	r.whole++
	r.mu.Unlock()
	return r.Store.History(ctx, id, from)
}

func (r *historyReads) HistoryRange(ctx context.Context, id string, from int64, limit int) ([]persistence.Event, error) {
	r.mu.Lock()
	r.pages++
	if limit <= 0 {
		limit = 1 << 30
	}
	r.maxLimit = max(r.maxLimit, limit)
	r.mu.Unlock()
	return r.Store.HistoryRange(ctx, id, from, limit)
}

func (r *historyReads) reset() {
	r.mu.Lock()
	r.whole, r.pages, r.maxLimit = 0, 0, 0
	r.mu.Unlock()
}

// A passivated instance whose history is many pages long is woken: the
// activation reads its history a page at a time (never whole) and replays
// across every page boundary, version markers and parallel activity
// results included, to the same result.
func TestActivationReadsHistoryInPages(t *testing.T) {
	const page = 3
	inc := actor.Activity("inc", func(_ context.Context, n int) (int, error) { return n + 1, nil })
	wf := actor.Workflow("long", func(ctx *actor.Context, n int) (int, error) {
		for i := range 12 {
			if i%4 == 1 {
				// Markers land at every offset within a page.
				n += ctx.Version(fmt.Sprintf("change-%d", i), 1)
			}
			// Two in parallel: their results follow each other in
			// history, possibly across a page boundary.
			a, b := inc.Go(ctx, n), inc.Go(ctx, n*2)
			x, err := a.Get(ctx)
			if err != nil {
				return 0, err
			}
			y, err := b.Get(ctx)
			if err != nil {
				return 0, err
			}
			n = x + y%7
		}
		m, err := actor.Receive[int](ctx)
		if err != nil {
			return 0, err
		}
		return inc.Run(ctx, n+m.Value)
	})
	want := func() int {
		n := 5
		for i := range 12 {
			if i%4 == 1 {
				n++
			}
			n = (n + 1) + (n*2+1)%7
		}
		return n + 100 + 1
	}()

	rc := &historyReads{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t))}
	sys := testutil.StartNode(t, actor.Config{Store: rc, Workflows: actor.Register(wf), PassivateAfter: 50 * time.Millisecond, HistoryPage: page})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, 5)
	if err != nil {
		t.Fatal(err)
	}
	var hlen int64
	testutil.Eventually(t, 20*time.Second, "the instance passivates in its Receive", func() bool {
		info, err := sys.Inspect(ctx, pid)
		hlen = info.HistoryLen
		return err == nil && !info.Active && info.Status == persistence.StatusWaiting
	})
	if hlen < 8*page {
		t.Fatalf("history of %d events: too short to span many pages", hlen)
	}

	rc.reset()
	if err := sys.Send(ctx, pid, 100); err != nil {
		t.Fatal(err)
	}
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil || got != want {
		t.Fatalf("Await = %d, %v; want %d", got, err, want)
	}
	rc.mu.Lock()
	whole, pages, maxLimit := rc.whole, rc.pages, rc.maxLimit
	rc.mu.Unlock()
	if whole != 0 || maxLimit > page || int64(pages) < hlen/page {
		t.Fatalf("reactivation read history whole %d times and in %d pages of at most %d events; want 0 whole reads and at least %d pages of at most %d",
			whole, pages, maxLimit, hlen/page, page)
	}

	// The offline check reads the stored history the same way.
	rc.reset()
	if err := sys.Replay(ctx, pid); err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if rc.whole != 0 || rc.maxLimit > page {
		t.Fatalf("Replay read history whole %d times, pages of up to %d", rc.whole, rc.maxLimit)
	}
}

// Replay finds an activity called with another input than history recorded
// for it, including when the call's result is far ahead (parallel calls).
func TestReplayFindsActivityWithAnotherInput(t *testing.T) {
	inc := actor.Activity("inc", func(_ context.Context, n int) (int, error) { return n + 1, nil })
	mk := func(second int) *actor.WorkflowDef[int, int] {
		return actor.Workflow("par", func(ctx *actor.Context, n int) (int, error) {
			a, b := inc.Go(ctx, n), inc.Go(ctx, second)
			x, err := a.Get(ctx)
			if err != nil {
				return 0, err
			}
			y, err := b.Get(ctx)
			return x + y, err
		})
	}
	wf := mk(10)
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 1)
	if _, err := actor.Await(ctx, sys, wf, pid); err != nil {
		t.Fatal(err)
	}
	hist, err := sys.History(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := actor.Replay(ctx, mk(10), hist); err != nil {
		t.Fatalf("Replay of the same code: %v", err)
	}
	err = actor.Replay(ctx, mk(11), hist)
	var nd *actor.NonDeterminismError
	if !errors.As(err, &nd) || !strings.Contains(nd.Error(), "with another input") {
		t.Fatalf("Replay with another input = %v, want a NonDeterminismError naming it", err)
	}
}
