package actor_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// batchStores are the drivers every batch test runs on.
var batchStores = []struct {
	name string
	open func(*testing.T) persistence.Store
}{
	{"sqlite", func(t *testing.T) persistence.Store { return testutil.OpenSQLite(t, testutil.SQLitePath(t)) }},
	{"postgres", func(t *testing.T) persistence.Store { return openPostgres(t, testutil.PostgresURL(t)) }},
}

// got is what batchSink received: channel, type, payload and one metadata
// value of each message.
type got struct{ Channel, Type, Payload, Meta string }

// batchSink subscribes to "fan" (broadcast), then takes n messages of any
// type from its mailbox and returns them in arrival order.
func batchSink(subscribed chan<- struct{}) *actor.WorkflowDef[int, []got] {
	return actor.Workflow("sink", func(ctx *actor.Context, n int) ([]got, error) {
		if err := ctx.Subscribe("fan", mailbox.Broadcast); err != nil {
			return nil, err
		}
		if !ctx.Replaying() {
			subscribed <- struct{}{}
		}
		var out []got
		for range n {
			m, err := actor.Receive[[]byte](ctx)
			if err != nil {
				return out, err
			}
			out = append(out, got{m.Channel, m.Type, string(m.Payload), m.Metadata["k"]})
		}
		return out, nil
	})
}

// One batch delivers to every kind of address at once: a broadcast
// channel, a queue, a PID and a direct channel; typed messages and raw
// payloads keep their type names and metadata.
func TestPublishBatchDelivers(t *testing.T) {
	for _, store := range batchStores {
		t.Run(store.name, func(t *testing.T) {
			subscribed := make(chan struct{}, 1)
			wf := batchSink(subscribed)
			st := store.open(t)
			sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf)})
			ctx := testutil.Ctx(t, liveWait)
			pid, err := actor.Spawn(ctx, sys, wf, 3)
			if err != nil {
				t.Fatal(err)
			}
			<-subscribed
			ids, err := sys.PublishBatch(ctx, []actor.Outgoing{
				{Channel: "fan", Message: 1, Metadata: map[string]string{"k": "a"}},
				{Channel: "queue", Payload: []byte("raw"), Type: "text"},
				{Target: pid, Payload: []byte(`{"x":1}`), Type: "x.json", ID: "given"},
				{Channel: "direct", Target: pid, Message: "s", Metadata: map[string]string{"k": "d"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(ids) != 4 || ids[2] != "given" || slices.Contains(ids, "") {
				t.Fatalf("ids = %q", ids)
			}
			out, err := actor.Await(ctx, sys, wf, pid)
			if err != nil {
				t.Fatal(err)
			}
			want := []got{{"fan", "int", "1", "a"}, {"", "x.json", `{"x":1}`, ""}, {"direct", "string", `"s"`, "d"}}
			if !slices.Equal(out, want) {
				t.Fatalf("received %+v; want %+v", out, want)
			}
			if n := waitingOn(t, sys, "queue"); n != 1 {
				t.Fatalf("queue holds %d messages; want 1", n)
			}
		})
	}
}

// A batch that fails on one message delivers none, and the error names it.
func TestPublishBatchAllOrNothing(t *testing.T) {
	for _, store := range batchStores {
		t.Run(store.name, func(t *testing.T) {
			done := actor.Workflow("done", func(ctx *actor.Context, _ int) (int, error) { return 0, nil })
			st := store.open(t)
			sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(done), MaxPayload: 64})
			ctx := testutil.Ctx(t, liveWait)
			ended, err := actor.Spawn(ctx, sys, done, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := actor.Await(ctx, sys, done, ended); err != nil {
				t.Fatal(err)
			}
			ok := actor.Outgoing{Channel: "q", Message: 1, ID: "kept-back"}
			for _, c := range []struct {
				name  string
				bad   actor.Outgoing
				is    error
				index int
			}{
				{"unknown target", actor.Outgoing{Target: "nobody", Message: 1}, actor.ErrNotFound, 2},
				{"ended target", actor.Outgoing{Channel: "d", Target: ended, Message: 1}, actor.ErrInstanceDone, 2},
				{"no address", actor.Outgoing{Message: 1}, actor.ErrInvalidInput, 2},
				{"both payloads", actor.Outgoing{Channel: "q", Message: 1, Payload: []byte("x")}, actor.ErrInvalidInput, 2},
				{"type without payload", actor.Outgoing{Channel: "q", Message: 1, Type: "t"}, actor.ErrInvalidInput, 2},
				{"bad channel", actor.Outgoing{Channel: "a\x00b", Message: 1}, actor.ErrInvalidInput, 2},
				{"bad metadata", actor.Outgoing{Channel: "q", Message: 1, Metadata: map[string]string{"k": "\xff"}}, actor.ErrInvalidInput, 2},
				{"too large", actor.Outgoing{Channel: "q", Payload: make([]byte, 65)}, actor.ErrPayloadTooLarge, 2},
			} {
				batch := []actor.Outgoing{ok, {Channel: "q", Message: 2}, c.bad}
				_, err := sys.PublishBatch(ctx, batch)
				var be *actor.BatchError
				if !errors.Is(err, c.is) || !errors.As(err, &be) || be.Index != c.index {
					t.Fatalf("%s: err = %v; want a *BatchError at %d matching %v", c.name, err, c.index, c.is)
				}
				if n := waitingOn(t, sys, "q"); n != 0 {
					t.Fatalf("%s: %d messages delivered by a failed batch", c.name, n)
				}
			}
			// The ID of a failed batch was not used up.
			if _, err := sys.PublishBatch(ctx, []actor.Outgoing{ok}); err != nil {
				t.Fatal(err)
			}
			if n := waitingOn(t, sys, "q"); n != 1 {
				t.Fatalf("queue holds %d after a retried batch; want 1", n)
			}
		})
	}
}

// Messages with given IDs are delivered once: within one batch, across
// batches, and against single Publish calls.
func TestPublishBatchDedupe(t *testing.T) {
	for _, store := range batchStores {
		t.Run(store.name, func(t *testing.T) {
			st := store.open(t)
			sys := testutil.StartNode(t, actor.Config{Store: st})
			ctx := testutil.Ctx(t, liveWait)
			msg := func(id string) actor.Outgoing { return actor.Outgoing{Channel: "q", Payload: []byte(id), ID: id} }
			for i, batch := range [][]actor.Outgoing{
				{msg("a"), msg("a"), msg("b")},
				{msg("b"), msg("c"), {Channel: "q", Message: "no id"}},
			} {
				ids, err := sys.PublishBatch(ctx, batch)
				if err != nil {
					t.Fatal(err)
				}
				if len(ids) != len(batch) {
					t.Fatalf("batch %d: ids %q", i, ids)
				}
			}
			if r, err := sys.Deliver(ctx, actor.Outgoing{Channel: "q", Message: "again", ID: "c"}); err != nil || !r.Duplicate {
				t.Fatalf("Deliver with a batch's ID = %+v, %v", r, err)
			}
			if n := waitingOn(t, sys, "q"); n != 4 {
				t.Fatalf("queue holds %d messages; want 4 (a, b, c and the one without ID)", n)
			}
			if ids, err := sys.PublishBatch(ctx, nil); err != nil || len(ids) != 0 {
				t.Fatalf("empty batch = %q, %v", ids, err)
			}
		})
	}
}

// A stopped System takes no batch.
func TestPublishBatchStopped(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	sys, err := actor.Start(testutil.Ctx(t, liveWait), actor.Config{Store: st, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Stop(testutil.Ctx(t, liveWait)); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.PublishBatch(testutil.Ctx(t, liveWait), []actor.Outgoing{{Channel: "q", Message: 1}}); !errors.Is(err, actor.ErrStopped) {
		t.Fatalf("PublishBatch after Stop = %v; want ErrStopped", err)
	}
}

// waitingOn is how many messages wait on a channel.
func waitingOn(t *testing.T, sys *actor.System, channel string) int {
	t.Helper()
	stats, err := sys.ChannelStats(testutil.Ctx(t, liveWait))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		if s.Channel == channel {
			return s.Waiting
		}
	}
	return 0
}
