package actor_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

type scaled struct{ Factor int }

// counter adds up the ints it receives and answers queries about the sum;
// "boom" panics; a negative int ends it. runs counts the executions of its
// code (a replay is one).
func counter(runs *atomic.Int64) *actor.WorkflowDef[int, int] {
	return actor.Workflow("counter", func(ctx *actor.Context, start int) (int, error) {
		runs.Add(1)
		sum, seen := start, 0
		if err := actor.HandleQuery(ctx, "sum", func(struct{}) (int, error) { return sum, nil }); err != nil {
			return 0, err
		}
		if err := actor.HandleQuery(ctx, "scaled", func(a scaled) (int, error) {
			if a.Factor == 0 {
				return 0, errors.New("factor 0")
			}
			return sum * a.Factor, nil
		}); err != nil {
			return 0, err
		}
		for {
			m, err := actor.Receive[int](ctx)
			if err != nil {
				return 0, err
			}
			if m.Value < 0 {
				return sum, nil
			}
			sum += m.Value
			seen++
			if seen == 2 {
				// Registered part-way: a replay registers it at the same point.
				if err := actor.HandleQuery(ctx, "boom", func(struct{}) (int, error) { panic("kaboom") }); err != nil {
					return 0, err
				}
			}
		}
	})
}

// countingStore counts the steps applied to the store.
type countingStore struct {
	persistence.Store
	steps atomic.Int64
}

func (c *countingStore) Apply(ctx context.Context, s persistence.Step) (persistence.StepResult, error) {
	c.steps.Add(1)
	return c.Store.Apply(ctx, s)
}

// A query is answered by the live activation without a write, by a
// replay once the instance has passivated or ended, and the same way by
// QueryHistory from a history alone; bad queries fail with typed errors and
// a panicking handler leaves the instance running.
func TestQueryLiveAndPassivated(t *testing.T) {
	t.Parallel()
	st := &countingStore{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t))}
	var runs atomic.Int64
	wf := counter(&runs)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), PassivateAfter: time.Hour})
	ctx := testutil.Ctx(t, liveWait)
	pid, err := actor.Spawn(ctx, sys, wf, 10, actor.WithID("c1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2} {
		if err := sys.Send(ctx, pid, n); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, liveWait, "the counter takes both messages", func() bool {
		got, err := actor.Query[int](ctx, sys, pid, "sum", nil)
		return err == nil && got == 13
	})
	info, err := sys.Inspect(ctx, pid)
	if err != nil || !info.Active {
		t.Fatalf("Inspect: active %v, %v; want a live activation", info.Active, err)
	}
	before, runsBefore := st.steps.Load(), runs.Load()
	if got, err := actor.Query[int](ctx, sys, pid, "scaled", scaled{Factor: 3}); err != nil || got != 39 {
		t.Fatalf("live scaled = %d, %v; want 39", got, err)
	}
	if _, err := sys.Query(ctx, pid, "nope", nil); !errors.Is(err, actor.ErrUnknownQuery) || !strings.Contains(err.Error(), "boom, scaled, sum") {
		t.Fatalf("unknown query: %v; want ErrUnknownQuery naming the handlers", err)
	}
	if _, err := sys.Query(ctx, pid, "scaled", []byte(`{"Factr":2}`)); !errors.Is(err, actor.ErrInvalidInput) {
		t.Fatalf("misspelt argument: %v; want ErrInvalidInput", err)
	}
	if _, err := sys.Query(ctx, pid, "scaled", []byte(`{`)); !errors.Is(err, actor.ErrInvalidInput) {
		t.Fatalf("argument that is not JSON: %v; want ErrInvalidInput", err)
	}
	if _, err := sys.Query(ctx, pid, "scaled", []byte(`{"Factor":0}`)); err == nil || err.Error() != "factor 0" {
		t.Fatalf("handler error: %v; want factor 0", err)
	}
	var pe *actor.PanicError
	if _, err := sys.Query(ctx, pid, "boom", nil); !errors.As(err, &pe) || pe.Value != "kaboom" {
		t.Fatalf("panicking handler: %v; want a *PanicError", err)
	}
	if n := st.steps.Load() - before; n != 0 {
		t.Fatalf("live queries wrote %d steps, want none", n)
	}
	if n := runs.Load() - runsBefore; n != 0 {
		t.Fatalf("live queries ran the workflow's code %d times, want none (answered from memory)", n)
	}
	// Still running after the panic: it takes more mail.
	if err := sys.Send(ctx, pid, 5); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, liveWait, "the counter takes the next message", func() bool {
		got, err := actor.Query[int](ctx, sys, pid, "sum", nil)
		return err == nil && got == 18
	})

	// Another node without the activation (the store shared, the instance
	// passivated as far as it knows): answered by replay, nothing written.
	other := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), Client: true, NodeID: "reader"})
	before = st.steps.Load()
	if got, err := actor.Query[int](ctx, other, pid, "scaled", scaled{Factor: 2}); err != nil || got != 36 {
		t.Fatalf("replayed scaled = %d, %v; want 36", got, err)
	}
	if _, err := other.Query(ctx, pid, "boom", nil); !errors.As(err, &pe) {
		t.Fatalf("replayed panicking handler: %v; want a *PanicError", err)
	}
	if n := st.steps.Load() - before; n != 0 {
		t.Fatalf("replayed queries wrote %d steps, want none", n)
	}
	if _, err := other.Query(ctx, "ghost", "sum", nil); !errors.Is(err, actor.ErrNotFound) {
		t.Fatalf("query of a missing instance: %v; want ErrNotFound", err)
	}
	bare := testutil.StartNode(t, actor.Config{Store: st, Client: true, NodeID: "bare"})
	if _, err := bare.Query(ctx, pid, "sum", nil); !errors.Is(err, actor.ErrUnknownWorkflow) {
		t.Fatalf("query without the workflow's code: %v; want ErrUnknownWorkflow", err)
	}

	// Ended: replayed to its end.
	if err := sys.Send(ctx, pid, -1); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != 18 {
		t.Fatalf("Await = %d, %v", got, err)
	}
	if got, err := actor.Query[int](ctx, sys, pid, "sum", nil); err != nil || got != 18 {
		t.Fatalf("query of the ended instance = %d, %v; want 18", got, err)
	}
	hist, err := sys.History(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	out, err := actor.QueryHistory(ctx, wf, pid, hist, "scaled", []byte(`{"Factor":10}`))
	if err != nil || string(out) != "180" {
		t.Fatalf("QueryHistory = %s, %v; want 180", out, err)
	}
	if _, err := actor.QueryHistory(ctx, wf, pid, hist[:2], "boom", nil); !errors.Is(err, actor.ErrUnknownQuery) {
		t.Fatalf("QueryHistory before the handler was registered: %v; want ErrUnknownQuery", err)
	}
	var raw json.RawMessage
	if raw, err = actor.QueryHistory(ctx, wf, pid, hist[:2], "sum", nil); err != nil || string(raw) != "11" {
		t.Fatalf("QueryHistory of the first message = %s, %v; want 11", raw, err)
	}
}

// A passivated instance is answered by replay and stays passivated.
func TestQueryPassivated(t *testing.T) {
	t.Parallel()
	st := &countingStore{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t))}
	var runs atomic.Int64
	wf := counter(&runs)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), PassivateAfter: 10 * time.Millisecond})
	ctx := testutil.Ctx(t, liveWait)
	pid, err := actor.Spawn(ctx, sys, wf, 1, actor.WithID("p1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Send(ctx, pid, 4); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, liveWait, "the counter passivates with its message taken", func() bool {
		info, err := sys.Inspect(ctx, pid)
		return err == nil && !info.Active && info.Status == actor.StatusWaiting && info.MailboxDepth == 0
	})
	before, runsBefore := st.steps.Load(), runs.Load()
	if got, err := actor.Query[int](ctx, sys, pid, "sum", nil); err != nil || got != 5 {
		t.Fatalf("query of the passivated instance = %d, %v; want 5", got, err)
	}
	if n := st.steps.Load() - before; n != 0 {
		t.Fatalf("the query wrote %d steps, want none", n)
	}
	if n := runs.Load() - runsBefore; n != 1 {
		t.Fatalf("the query ran the workflow's code %d times, want one replay", n)
	}
	if info, err := sys.Inspect(ctx, pid); err != nil || info.Active {
		t.Fatalf("after the query: active %v, %v; want still passivated", info.Active, err)
	}
}
