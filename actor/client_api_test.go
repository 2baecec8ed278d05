package actor_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// Spawn with an ID that another workflow holds fails with an
// *IDConflictError; SpawnID tells a new instance from an existing one.
func TestSpawnIDConflictAndExisted(t *testing.T) {
	alpha := actor.Workflow("alpha", func(ctx *actor.Context, n int) (int, error) { return n, nil })
	beta := actor.Workflow("beta", func(ctx *actor.Context, n int) (int, error) { return -n, nil })
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(alpha, beta)})
	ctx := testutil.Ctx(t, liveWait)

	r, err := actor.SpawnID(ctx, sys, alpha, "x", 7)
	if err != nil || r.PID != "x" || r.Existed {
		t.Fatalf("first spawn = %+v, %v", r, err)
	}
	if got, err := actor.Await(ctx, sys, alpha, r.PID); err != nil || got != 7 {
		t.Fatalf("Await = %d, %v", got, err)
	}
	r, err = actor.SpawnID(ctx, sys, alpha, "x", 8)
	if err != nil || r.PID != "x" || !r.Existed {
		t.Fatalf("second spawn = %+v, %v", r, err)
	}
	pid, err := actor.Spawn(ctx, sys, alpha, 9, actor.WithID("x"))
	if err != nil || pid != "x" {
		t.Fatalf("Spawn of an existing ID = %q, %v", pid, err)
	}

	r, err = actor.SpawnID(ctx, sys, beta, "x", 1)
	var conflict *actor.IDConflictError
	if !errors.Is(err, actor.ErrIDConflict) || !errors.As(err, &conflict) || r != (actor.Spawned{}) {
		t.Fatalf("spawn of another workflow's ID = %+v, %v; want an *IDConflictError", r, err)
	}
	if conflict.ID != "x" || conflict.Workflow != "alpha" || conflict.Requested != "beta" {
		t.Fatalf("conflict = %+v", conflict)
	}
	if pid, err := actor.Spawn(ctx, sys, beta, 1, actor.WithID("x")); !errors.As(err, &conflict) || pid != "" {
		t.Fatalf("Spawn of another workflow's ID = %q, %v; want an *IDConflictError", pid, err)
	}
	if _, err := actor.SpawnID(ctx, sys, alpha, "", 1); !errors.Is(err, actor.ErrInvalidInput) {
		t.Fatalf("SpawnID without an ID = %v; want ErrInvalidInput", err)
	}
	if insts, _ := st.List(ctx, persistence.ListFilter{}); len(insts) != 1 {
		t.Fatalf("%d instances stored; want 1", len(insts))
	}
}

// A definition that is not the registered value but has its name gets an
// error that says so, not "not registered".
func TestSpawnOtherDefinitionSameName(t *testing.T) {
	registered := actor.Workflow("same", func(ctx *actor.Context, n int) (int, error) { return n, nil })
	lookalike := actor.Workflow("same", func(ctx *actor.Context, n int) (int, error) { return n, nil })
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(registered)})
	_, err := actor.Spawn(testutil.Ctx(t, liveWait), sys, lookalike, 1)
	if !errors.Is(err, actor.ErrUnknownWorkflow) || strings.Contains(err.Error(), "not registered") ||
		!strings.Contains(err.Error(), "different definition is registered under the name \"same\"") {
		t.Fatalf("Spawn of a look-alike = %v", err)
	}
}

func TestWorkflows(t *testing.T) {
	b := actor.Workflow("b", func(ctx *actor.Context, n int) (int, error) { return n, nil })
	a := actor.Workflow("a", func(ctx *actor.Context, n int) (int, error) { return n, nil })
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(b, a)})
	if got := sys.Workflows(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Workflows() = %v", got)
	}
}

// Durations below their minimum (and negative counts) are rejected by
// name; zero means default, and the minimums themselves are accepted.
func TestConfigMinimums(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	ctx := testutil.Ctx(t, liveWait)
	for _, c := range []struct {
		field string
		set   func(*actor.Config)
	}{
		{"LeaseTTL", func(c *actor.Config) { c.LeaseTTL = 2 }},
		{"LeaseTTL", func(c *actor.Config) { c.LeaseTTL = 99 * time.Millisecond }},
		{"LeaseTTL", func(c *actor.Config) { c.LeaseTTL = -time.Second }},
		{"PassivateAfter", func(c *actor.Config) { c.PassivateAfter = time.Millisecond }},
		{"RecoveryInterval", func(c *actor.Config) { c.RecoveryInterval = 10 * time.Nanosecond }},
		{"TimerHorizon", func(c *actor.Config) { c.TimerHorizon = 999 * time.Millisecond }},
		{"DurableBackoff", func(c *actor.Config) { c.DurableBackoff = time.Microsecond }},
		{"DedupeWindow", func(c *actor.Config) { c.DedupeWindow = time.Second }},
		{"MaxActivating", func(c *actor.Config) { c.MaxActivating = -1 }},
		{"MaxPayload", func(c *actor.Config) { c.MaxPayload = -1 }},
	} {
		cfg := actor.Config{Store: st, Logger: testutil.Logger()}
		c.set(&cfg)
		sys, err := actor.Start(ctx, cfg)
		if err == nil {
			_ = sys.Stop(ctx)
			t.Fatalf("Start with a bad %s succeeded", c.field)
		}
		if !errors.Is(err, actor.ErrInvalidInput) || !strings.Contains(err.Error(), "Config."+c.field) {
			t.Fatalf("Start with a bad %s = %v; want ErrInvalidInput naming it", c.field, err)
		}
	}
	sys, err := actor.Start(ctx, actor.Config{Store: st, Logger: testutil.Logger(), LeaseTTL: 100 * time.Millisecond,
		PassivateAfter: 10 * time.Millisecond, RecoveryInterval: 10 * time.Millisecond, TimerHorizon: time.Second,
		DurableBackoff: time.Millisecond, DedupeWindow: time.Minute, MaxActivating: 1, MaxPayload: 1})
	if err != nil {
		t.Fatalf("Start at the minimums: %v", err)
	}
	if err := sys.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// Inputs and messages over MaxPayload fail with a *PayloadTooLargeError
// and write nothing; the default limit is 4 MiB.
func TestPayloadLimit(t *testing.T) {
	wf := actor.Workflow("sink", func(ctx *actor.Context, in []byte) (int, error) {
		_, err := actor.Receive[[]byte](ctx, mailbox.OnChannel("never"))
		return 0, err
	})
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), MaxPayload: 64})
	ctx := testutil.Ctx(t, liveWait)
	ok := bytes.Repeat([]byte{'a'}, 64)
	big := bytes.Repeat([]byte{'a'}, 65)
	pid, err := actor.Spawn(ctx, sys, wf, ok)
	if err != nil {
		t.Fatalf("Spawn at the limit: %v", err)
	}
	check := func(what, field string, err error) {
		t.Helper()
		var tl *actor.PayloadTooLargeError
		if !errors.Is(err, actor.ErrPayloadTooLarge) || !errors.As(err, &tl) || tl.Field != field || tl.Size != 65 || tl.Max != 64 {
			t.Fatalf("%s over the limit = %v; want a *PayloadTooLargeError{%s, 65, 64}", what, err, field)
		}
	}
	check("Spawn", "input", second(actor.Spawn(ctx, sys, wf, big)))
	check("Send", "message", sys.Send(ctx, pid, big))
	check("SendOn", "message", sys.SendOn(ctx, "ch", pid, big))
	check("Publish", "message", second(sys.Publish(ctx, "ch", big)))
	check("PublishWith", "message", second(sys.PublishWith(ctx, "ch", big, nil)))
	if insts, _ := st.List(ctx, persistence.ListFilter{}); len(insts) != 1 {
		t.Fatalf("%d instances stored; want 1", len(insts))
	}
	if info, _ := sys.Inspect(ctx, pid); info.MailboxDepth != 0 {
		t.Fatalf("mailbox depth %d; want 0", info.MailboxDepth)
	}
	if stats, _ := sys.ChannelStats(ctx); len(stats) != 0 {
		t.Fatalf("channel stats %+v; want none", stats)
	}
	if err := sys.Send(ctx, pid, ok); err != nil {
		t.Fatalf("Send at the limit: %v", err)
	}

	def := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf)})
	var tl *actor.PayloadTooLargeError
	if err := def.Send(ctx, pid, make([]byte, 4<<20+1)); !errors.As(err, &tl) || tl.Max != 4<<20 {
		t.Fatalf("Send over the default limit = %v", err)
	}
}

// The node prunes dedupe IDs older than DedupeWindow, starting at once.
func TestPruneDedupeIDs(t *testing.T) {
	for _, c := range []struct {
		window, want time.Duration
	}{{0, 7 * 24 * time.Hour}, {time.Hour, time.Hour}} {
		st := &testutil.InterceptStore{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t))}
		pruned := make(chan time.Time, 1)
		st.BeforePrune = func(before time.Time) {
			select {
			case pruned <- before:
			default:
			}
		}
		t0 := time.Now()
		testutil.StartNode(t, slowNets(actor.Config{Store: st, DedupeWindow: c.window}))
		var before time.Time
		select {
		case before = <-pruned:
		case <-time.After(liveWait):
			t.Fatal("never pruned")
		}
		if t1 := time.Now(); before.Before(t0.Add(-c.want)) || before.After(t1.Add(-c.want)) {
			t.Fatalf("window %v: pruned before %v; want between %v and %v", c.window, before, t0.Add(-c.want), t1.Add(-c.want))
		}
	}
}

// A caller-chosen message ID makes Send, SendOn, Publish, PublishWith and
// Deliver safe to retry: the second call with an ID delivers nothing, and
// Deliver says so, also when the calls race. Without an ID, every call
// delivers.
func TestSendWithMessageID(t *testing.T) {
	for _, store := range []struct {
		name string
		open func(*testing.T) persistence.Store
	}{
		{"sqlite", func(t *testing.T) persistence.Store { return testutil.OpenSQLite(t, testutil.SQLitePath(t)) }},
		{"postgres", func(t *testing.T) persistence.Store { return openPostgres(t, testutil.PostgresURL(t)) }},
	} {
		t.Run(store.name, func(t *testing.T) {
			wf := actor.Workflow("keeper", func(ctx *actor.Context, _ int) (int, error) {
				_, err := actor.Receive[string](ctx, mailbox.OnChannel("never"))
				return 0, err
			})
			sys := testutil.StartNode(t, slowNets(actor.Config{Store: store.open(t), Workflows: actor.Register(wf)}))
			ctx := testutil.Ctx(t, liveWait)
			pid, err := actor.Spawn(ctx, sys, wf, 0)
			if err != nil {
				t.Fatal(err)
			}
			depth := func() int {
				info, err := sys.Inspect(ctx, pid)
				if err != nil {
					t.Fatal(err)
				}
				return info.MailboxDepth
			}
			queued := func() int {
				stats, err := sys.ChannelStats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range stats {
					if s.Channel == "queue" {
						return s.Waiting
					}
				}
				return 0
			}
			// Send, SendOn, Publish and PublishWith dedupe; Deliver, which
			// sends each of their ways, also reports what it did.
			plain := func(err error) (actor.Sent, error) { return actor.Sent{}, err }
			calls := []struct {
				name    string
				call    func(id string) (actor.Sent, error)
				reports bool
				count   func() int
			}{
				{"Send", func(id string) (actor.Sent, error) {
					return plain(sys.Send(ctx, pid, "x", actor.WithMessageID(id)))
				}, false, depth},
				{"SendOn", func(id string) (actor.Sent, error) {
					return plain(sys.SendOn(ctx, "direct", pid, "x", actor.WithMessageID(id)))
				}, false, depth},
				{"Publish", func(id string) (actor.Sent, error) {
					return plain(second(sys.Publish(ctx, "queue", "x", actor.WithMessageID(id))))
				}, false, queued},
				{"PublishWith", func(id string) (actor.Sent, error) {
					return plain(second(sys.PublishWith(ctx, "queue", "x", map[string]string{"k": "v"}, actor.WithMessageID(id))))
				}, false, queued},
				{"Deliver to a PID", func(id string) (actor.Sent, error) {
					return sys.Deliver(ctx, actor.Outgoing{Target: pid, Message: "x", ID: id})
				}, true, depth},
				{"Deliver on a direct channel", func(id string) (actor.Sent, error) {
					return sys.Deliver(ctx, actor.Outgoing{Channel: "direct", Target: pid, Message: "x", ID: id})
				}, true, depth},
				{"Deliver on a channel", func(id string) (actor.Sent, error) {
					return sys.Deliver(ctx, actor.Outgoing{Channel: "queue", Message: "x", Metadata: map[string]string{"k": "v"}, ID: id})
				}, true, queued},
			}
			for _, c := range calls {
				id := "id-" + c.name
				n := c.count()
				for try, wantDup := range []bool{false, true, true} {
					r, err := c.call(id)
					if err != nil {
						t.Fatalf("%s #%d: %v", c.name, try, err)
					}
					if c.reports && (r.Duplicate != wantDup || r.ID != id) {
						t.Fatalf("%s #%d: %+v; want ID %s, Duplicate %v", c.name, try, r, id, wantDup)
					}
				}
				if got := c.count(); got != n+1 {
					t.Fatalf("%s with one ID three times delivered %d messages; want 1", c.name, got-n)
				}
				// An empty ID is no ID: a fresh one each time, no dedupe.
				n = c.count()
				var ids []string
				for i := 0; i < 2; i++ {
					r, err := c.call("")
					if err != nil {
						t.Fatal(err)
					}
					if c.reports && (r.Duplicate || r.ID == "") {
						t.Fatalf("%s without an ID: %+v", c.name, r)
					}
					ids = append(ids, r.ID)
				}
				if c.reports && ids[0] == ids[1] {
					t.Fatalf("%s without an ID twice used the ID %s twice", c.name, ids[0])
				}
				if got := c.count(); got != n+2 {
					t.Fatalf("%s without an ID twice delivered %d messages; want 2", c.name, got-n)
				}
			}
			// The ID space is shared: a Publish cannot reuse a Send's ID.
			if r, err := sys.Deliver(ctx, actor.Outgoing{Channel: "queue", Message: "x", ID: "id-Send"}); err != nil || !r.Duplicate || r.ID != "id-Send" {
				t.Fatalf("Deliver on a channel with a Send's ID = %+v, %v", r, err)
			}

			// Racing retries: exactly one delivers.
			n := depth()
			var wg sync.WaitGroup
			var fresh atomic.Int64
			for i := 0; i < 16; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := sys.Deliver(ctx, actor.Outgoing{Target: pid, Message: "r", ID: "racing"})
					if err != nil {
						t.Error(err)
					} else if !r.Duplicate {
						fresh.Add(1)
					}
				}()
			}
			wg.Wait()
			if fresh.Load() != 1 || depth() != n+1 {
				t.Fatalf("16 racing sends of one ID: %d reported fresh, %d delivered; want 1 and 1", fresh.Load(), depth()-n)
			}
		})
	}
}
