package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/events"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
	"github.com/nornlabs/norn/supervisor"
)

const testTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// traceFlow handles an order under a trace (as ingress sets it) and emits
// one event about it.
var traceFlow = actor.Workflow("traced", func(ctx *actor.Context, order string) (string, error) {
	ctx.SetLocal(events.TraceParentKey{}, testTraceParent)
	e := event.New()
	e.SetType("com.example.traced")
	e.SetSubject(order)
	if err := e.SetData(event.ApplicationJSON, map[string]string{"order": order}); err != nil {
		return "", err
	}
	return events.Emit(ctx, e)
})

// outbox lists every outbox record.
func outbox(t *testing.T, st persistence.Store) []persistence.OutboxRecord {
	t.Helper()
	recs, err := st.(persistence.Outbox).ListOutbox(context.Background(), "", "", 0)
	if err != nil {
		t.Fatalf("ListOutbox: %v", err)
	}
	return recs
}

// decode reads a stored event.
func decode(t *testing.T, rec persistence.OutboxRecord) event.Event {
	t.Helper()
	var e event.Event
	if err := json.Unmarshal(rec.Data, &e); err != nil {
		t.Fatalf("outbox record %s does not hold a CloudEvent: %v\n%s", rec.ID, err, rec.Data)
	}
	return e
}

// TestEmitDefaults: an event with only a type and data is completed and
// recorded; after a restart, replay emits nothing twice and the IDs carry
// on where they were.
func TestEmitDefaults(t *testing.T) {
	noLeaks(t)
	st := openSQLite(t)
	start := func() *actor.System {
		sys, err := actor.Start(context.Background(), actor.Config{Store: st, Workflows: actor.Register(emitFlow),
			NodeID: "emit-node", LeaseTTL: 2 * time.Second, Logger: testutil.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		return sys
	}
	ctx := testutil.Ctx(t, time.Minute)
	sys := start()
	before := time.Now()
	pid, err := actor.Spawn(ctx, sys, emitFlow, emitInput{Count: 2, Type: "com.example.default", Hold: true}, actor.WithID("defaults"))
	if err != nil {
		t.Fatal(err)
	}
	// The first event commits with the step that parks in Receive.
	testutil.Eventually(t, 30*time.Second, "the first event recorded", func() bool { return len(outbox(t, st)) == 1 })
	if err := sys.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	sys = start()
	defer func() {
		if err := sys.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	if err := sys.Send(ctx, pid, "go on"); err != nil {
		t.Fatal(err)
	}
	ids, err := actor.Await(ctx, sys, emitFlow, pid)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"defaults/emit:1", "defaults/emit:2"}
	if len(ids) != 2 || ids[0] != want[0] || ids[1] != want[1] {
		t.Fatalf("Emit returned %v, want %v", ids, want)
	}
	recs := outbox(t, st)
	if len(recs) != 2 {
		t.Fatalf("%d outbox records, want 2: %+v", len(recs), recs)
	}
	for i, rec := range recs {
		if rec.ID != want[i] || rec.Instance != "defaults" || rec.Type != "com.example.default" || rec.Status != persistence.OutboxPending {
			t.Errorf("record %d: %s from %q, type %q, %s", i, rec.ID, rec.Instance, rec.Type, rec.Status)
		}
		e := decode(t, rec)
		if e.SpecVersion() != event.CloudEventsVersionV1 || e.Source() != "norn://defaults" || e.Type() != "com.example.default" {
			t.Errorf("record %d: specversion %q, source %q, type %q", i, e.SpecVersion(), e.Source(), e.Type())
		}
		// The ID is the record's, put in by the relayer.
		if e.ID() != "" {
			t.Errorf("record %d holds ID %q; want none (the record's ID is the event's)", i, e.ID())
		}
		if e.Time().Before(before.Add(-time.Second)) || e.Time().After(time.Now()) {
			t.Errorf("record %d: time %v, want the emit's", i, e.Time())
		}
		var data map[string]int
		if err := e.DataAs(&data); err != nil || data["n"] != i {
			t.Errorf("record %d: data %v (%v)", i, data, err)
		}
		if _, ok := e.Extensions()["traceparent"]; ok {
			t.Errorf("record %d has a traceparent, but the workflow had none", i)
		}
	}
}

// optionsFlow emits with an explicit ID, with an ID option, and with a
// traceparent of its own, all under an activation trace.
var optionsFlow = actor.Workflow("options", func(ctx *actor.Context, _ int) ([]string, error) {
	ctx.SetLocal(events.TraceParentKey{}, testTraceParent)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mk := func(typ string) event.Event {
		e := event.New()
		e.SetType(typ)
		e.SetSource("https://shop.example.com/orders")
		e.SetTime(at)
		return e
	}
	var ids []string
	e := mk("com.example.own-id")
	e.SetID("options/order-1")
	id, err := events.Emit(ctx, e)
	ids = append(ids, id)
	if err != nil {
		return nil, err
	}
	e = mk("com.example.option-id")
	e.SetID("replaced")
	if id, err = events.Emit(ctx, e, events.WithEventID("options/order-2")); err != nil {
		return nil, err
	}
	ids = append(ids, id)
	e = mk("com.example.own-trace")
	e.SetExtension("traceparent", "00-11111111111111111111111111111111-2222222222222222-01")
	e.SetSpecVersion(event.CloudEventsVersionV03)
	if id, err = events.Emit(ctx, e); err != nil {
		return nil, err
	}
	return append(ids, id), nil
})

func TestEmitOptions(t *testing.T) {
	noLeaks(t)
	st := openSQLite(t)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(optionsFlow)})
	ctx := testutil.Ctx(t, time.Minute)
	pid, err := actor.Spawn(ctx, sys, optionsFlow, 0, actor.WithID("options"))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := actor.Await(ctx, sys, optionsFlow, pid)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"options/order-1", "options/order-2", "options/emit:3"}
	if len(ids) != 3 || ids[0] != want[0] || ids[1] != want[1] || ids[2] != want[2] {
		t.Fatalf("Emit returned %v, want %v", ids, want)
	}
	recs := map[string]event.Event{}
	for _, rec := range outbox(t, st) {
		recs[rec.ID] = decode(t, rec)
	}
	if len(recs) != 3 {
		t.Fatalf("%d outbox records, want 3", len(recs))
	}
	for i, id := range want {
		e, found := recs[id]
		if !found {
			t.Fatalf("no record %s", id)
		}
		if i < 2 && e.ID() != id {
			t.Errorf("event %s holds ID %q", id, e.ID())
		}
		if e.Source() != "https://shop.example.com/orders" || !e.Time().Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
			t.Errorf("event %s: source %q, time %v; want the event's own", id, e.Source(), e.Time())
		}
		tp, _ := e.Extensions()["traceparent"].(string)
		switch {
		case i < 2 && tp != testTraceParent:
			t.Errorf("event %s: traceparent %q, want the activation's", id, tp)
		case i == 2 && tp != "00-11111111111111111111111111111111-2222222222222222-01":
			t.Errorf("event %s: traceparent %q, want its own", id, tp)
		}
		if e.SpecVersion() != event.CloudEventsVersionV1 {
			t.Errorf("event %s: specversion %q", id, e.SpecVersion())
		}
	}
}

// invalidFlow emits events that are not valid CloudEvents and reports
// which errors matched actor.ErrInvalidInput.
var invalidFlow = actor.Workflow("invalid", func(ctx *actor.Context, _ int) ([]bool, error) {
	var out []bool
	try := func(e event.Event, opts ...events.EmitOption) {
		_, err := events.Emit(ctx, e, opts...)
		out = append(out, errors.Is(err, actor.ErrInvalidInput))
	}
	try(event.New()) // no type
	e := event.New()
	e.SetType("com.example.t")
	e.SetSource("%zz") // not a URI reference
	try(e)
	e = event.New()
	e.SetType("com.example.t")
	e.SetDataContentType("not a media type;;")
	try(e)
	e = event.New()
	e.SetType("com.example.t")
	try(e, events.WithEventID("bad\x00id")) // the store takes no NUL
	try(event.Event{})                      // no context at all, so no type either
	return out, nil
})

func TestEmitInvalid(t *testing.T) {
	noLeaks(t)
	st := openSQLite(t)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(invalidFlow)})
	ctx := testutil.Ctx(t, time.Minute)
	pid, err := actor.Spawn(ctx, sys, invalidFlow, 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := actor.Await(ctx, sys, invalidFlow, pid)
	if err != nil {
		t.Fatal(err)
	}
	for i, matched := range res {
		if !matched {
			t.Errorf("invalid event %d: the error does not match actor.ErrInvalidInput", i)
		}
	}
	if len(res) != 5 {
		t.Fatalf("%d results, want 5", len(res))
	}
	if recs := outbox(t, st); len(recs) != 0 {
		t.Fatalf("invalid events were recorded: %+v", recs)
	}
}

// crashFlow emits, then panics before anything commits the step the emit
// belongs to.
var crashFlow = actor.Workflow("crasher", func(ctx *actor.Context, _ int) (int, error) {
	e := event.New()
	e.SetType("com.example.never")
	if _, err := events.Emit(ctx, e); err != nil {
		return 0, err
	}
	panic("crash before the step commits")
}, actor.WithRestart(supervisor.RestartPolicy{MaxRestarts: 0, Period: time.Minute, Backoff: supervisor.NoRetry()}))

func TestEmitInFailedStepLeavesNothing(t *testing.T) {
	noLeaks(t)
	st := openSQLite(t)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(crashFlow)})
	ctx := testutil.Ctx(t, time.Minute)
	pid, err := actor.Spawn(ctx, sys, crashFlow, 0)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := sys.AwaitDone(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Status != persistence.StatusFailed {
		t.Fatalf("crasher ended %s, want failed", inst.Status)
	}
	if recs := outbox(t, st); len(recs) != 0 {
		t.Fatalf("the failed step's event is in the outbox: %+v", recs)
	}
}

// failEmitOnce fails the first step that carries events, as a store that
// lost its connection mid-commit would.
type failEmitOnce struct {
	persistence.Store
	failed atomic.Bool
}

func (f *failEmitOnce) Apply(ctx context.Context, s persistence.Step) (persistence.StepResult, error) {
	if len(s.Emit) > 0 && f.failed.CompareAndSwap(false, true) {
		return persistence.StepResult{}, errors.New("injected: connection lost")
	}
	return f.Store.Apply(ctx, s)
}

// TestEmitAfterFailedCommit: the step carrying the event fails to commit;
// the workflow runs again from history and emits it again, under the same
// ID, once.
func TestEmitAfterFailedCommit(t *testing.T) {
	noLeaks(t)
	st := openSQLite(t)
	fail := &failEmitOnce{Store: st}
	sys := testutil.StartNode(t, actor.Config{Store: fail, Workflows: actor.Register(emitFlow)})
	ctx := testutil.Ctx(t, time.Minute)
	// The first event goes with the step that parks in Receive: that
	// commit fails, and the instance restarts from history.
	pid, err := actor.Spawn(ctx, sys, emitFlow, emitInput{Count: 2, Type: "com.example.once", Hold: true}, actor.WithID("retried-commit"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the first event recorded", func() bool { return len(outbox(t, st)) == 1 })
	if !fail.failed.Load() {
		t.Fatal("no commit failed")
	}
	if err := sys.Send(ctx, pid, "go on"); err != nil {
		t.Fatal(err)
	}
	ids, err := actor.Await(ctx, sys, emitFlow, pid)
	if err != nil {
		t.Fatal(err)
	}
	recs := outbox(t, st)
	if len(recs) != 2 || recs[0].ID != "retried-commit/emit:1" || recs[1].ID != "retried-commit/emit:2" || len(ids) != 2 || ids[0] != recs[0].ID {
		t.Fatalf("outbox %+v, Emit returned %v; want retried-commit/emit:1 and 2, once each", recs, ids)
	}
}

// errDeclined is what failFlow's workflow returns.
var errDeclined = errors.New("payment declined")

// chargeCard fails for good: the activity of the failure-path case.
var chargeCard = actor.Activity("charge-card", func(context.Context, string) (int, error) {
	return 0, errDeclined
}, actor.WithRetry(supervisor.NoRetry()))

// reserveStock is a compensable activity: the saga case.
var reserveStock = actor.Activity("reserve-stock", func(context.Context, string) (int, error) {
	return 1, nil
}, actor.WithCompensation(func(context.Context, string, int) error { return nil }))

// failFlow emits and then fails by returning an error, in four ways:
// "return" emits and returns at once; "wait" emits, waits durably, then
// returns; "saga" reserves (compensably), emits and returns, so that the
// compensation runs; "announce" announces the failure of an activity
// before returning it.
var failFlow = actor.Workflow("failer", func(ctx *actor.Context, mode string) (int, error) {
	e := event.New()
	e.SetType("com.example.order.confirmed")
	if mode == "saga" {
		if _, err := reserveStock.Run(ctx, "o-1"); err != nil {
			return 0, err
		}
	}
	if mode == "announce" {
		if _, err := chargeCard.Run(ctx, "o-1"); err != nil {
			e.SetType("com.example.order.failed")
			if err := e.SetData(event.TextPlain, "o-1"); err != nil {
				return 0, err
			}
			if _, err := events.Emit(ctx, e); err != nil {
				return 0, err
			}
			return 0, err
		}
		return 1, nil
	}
	if _, err := events.Emit(ctx, e); err != nil {
		return 0, err
	}
	if mode == "wait" {
		if err := ctx.Sleep(time.Millisecond); err != nil {
			return 0, err
		}
	}
	return 0, errDeclined
})

// TestEmitThenReturnError: an event emitted before the workflow returns an
// error is sent (it commits with the failure, or with the step that starts
// the saga's compensations), whether or not a durable wait came in
// between, and an event announcing the failure is sent too.
// Retry resumes from the failed run's history, which holds the emit: the
// event is neither lost nor emitted twice. On SQLite and PostgreSQL.
func TestEmitThenReturnError(t *testing.T) {
	noLeaks(t)
	stores := map[string]func(t *testing.T) persistence.Store{
		"sqlite": openSQLite,
		"postgres": func(t *testing.T) persistence.Store {
			st, err := postgres.Open(testutil.Ctx(t, time.Minute), testutil.PostgresURL(t), postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
	cases := []struct{ mode, typ, data string }{
		{"return", "com.example.order.confirmed", ""},
		{"wait", "com.example.order.confirmed", ""},
		{"saga", "com.example.order.confirmed", ""},
		{"announce", "com.example.order.failed", "o-1"},
	}
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			st := stores[name](t)
			sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(failFlow)})
			ctx := testutil.Ctx(t, time.Minute)
			for _, c := range cases {
				pid, err := actor.Spawn(ctx, sys, failFlow, c.mode, actor.WithID("fail-"+c.mode))
				if err != nil {
					t.Fatal(err)
				}
				inst, err := sys.AwaitDone(ctx, pid)
				if err != nil || inst.Status != persistence.StatusFailed || !strings.Contains(inst.Error, errDeclined.Error()) {
					t.Fatalf("%s: ended %s (%q), %v; want failed with %q", c.mode, inst.Status, inst.Error, err, errDeclined)
				}
				recs, err := st.(persistence.Outbox).ListOutbox(ctx, "", "", 0)
				if err != nil {
					t.Fatal(err)
				}
				var mine []persistence.OutboxRecord
				for _, r := range recs {
					if r.Instance == string(pid) {
						mine = append(mine, r)
					}
				}
				if len(mine) != 1 || mine[0].ID != string(pid)+"/emit:1" || mine[0].Type != c.typ || mine[0].Status != persistence.OutboxPending {
					t.Fatalf("%s: outbox %+v; want one pending %s event %s/emit:1", c.mode, mine, c.typ, pid)
				}
				if c.mode == "saga" {
					hist, err := sys.HistoryPage(ctx, pid, 0, 0)
					if err != nil || !slices.ContainsFunc(hist, func(h actor.HistoryEvent) bool { return h.Kind == actor.EventCompensation }) {
						t.Fatalf("saga: no compensation ran (%v): %+v", err, hist)
					}
				}
				if e := decode(t, mine[0]); e.Type() != c.typ || string(e.Data()) != c.data {
					t.Errorf("%s: recorded event %s with data %q; want %s with %q", c.mode, e.Type(), e.Data(), c.typ, c.data)
				}
			}

			// Retry replays the emit from history and fails again: the
			// event stays recorded once.
			pid := actor.PID("fail-return")
			if err := sys.Retry(ctx, pid); err != nil {
				t.Fatal(err)
			}
			if inst, err := sys.AwaitDone(ctx, pid); err != nil || inst.Status != persistence.StatusFailed {
				t.Fatalf("retried run ended %s, %v; want failed again", inst.Status, err)
			}
			recs, err := st.(persistence.Outbox).ListOutbox(ctx, "", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, r := range recs {
				if r.Instance == string(pid) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("after Retry the instance has %d outbox records; want the one of the first run", n)
			}
		})
	}
}
