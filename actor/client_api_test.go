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
// *IDConflictError; Existed tells a new instance from an existing one.
func TestSpawnIDConflictAndExisted(t *testing.T) {
	alpha := actor.Workflow("alpha", func(ctx *actor.Context, n int) (int, error) { return n, nil })
	beta := actor.Workflow("beta", func(ctx *actor.Context, n int) (int, error) { return -n, nil })
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(alpha, beta)})
	ctx := testutil.Ctx(t, liveWait)

	existed := true
	pid, err := actor.Spawn(ctx, sys, alpha, 7, actor.WithID("x"), actor.Existed(&existed))
	if err != nil || pid != "x" || existed {
		t.Fatalf("first spawn = %q, %v, existed %v", pid, err, existed)
	}
	if got, err := actor.Await(ctx, sys, alpha, pid); err != nil || got != 7 {
		t.Fatalf("Await = %d, %v", got, err)
	}
	pid, err = actor.Spawn(ctx, sys, alpha, 8, actor.WithID("x"), actor.Existed(&existed))
	if err != nil || pid != "x" || !existed {
		t.Fatalf("second spawn = %q, %v, existed %v", pid, err, existed)
	}

	existed = false
	pid, err = actor.Spawn(ctx, sys, beta, 1, actor.WithID("x"), actor.Existed(&existed))
	var conflict *actor.IDConflictError
	if !errors.Is(err, actor.ErrIDConflict) || !errors.As(err, &conflict) || pid != "" {
		t.Fatalf("spawn of another workflow's ID = %q, %v; want an *IDConflictError", pid, err)
	}
	if conflict.ID != "x" || conflict.Workflow != "alpha" || conflict.Requested != "beta" || existed {
		t.Fatalf("conflict = %+v, existed %v", conflict, existed)
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

// A caller-chosen message ID makes Send, SendOn, Publish and PublishWith
// safe to retry: the second call with an ID delivers nothing and says so,
// also when the calls race. Without an ID, every call delivers.
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
			calls := []struct {
				name  string
				call  func(opts ...actor.SendOption) error
				count func() int
			}{
				{"Send", func(o ...actor.SendOption) error { return sys.Send(ctx, pid, "x", o...) }, depth},
				{"SendOn", func(o ...actor.SendOption) error { return sys.SendOn(ctx, "direct", pid, "x", o...) }, depth},
				{"Publish", func(o ...actor.SendOption) error { return second(sys.Publish(ctx, "queue", "x", o...)) }, queued},
				{"PublishWith", func(o ...actor.SendOption) error {
					return second(sys.PublishWith(ctx, "queue", "x", map[string]string{"k": "v"}, o...))
				}, queued},
			}
			for _, c := range calls {
				id := "id-" + c.name
				n := c.count()
				for try, wantDup := range []bool{false, true, true} {
					dup := !wantDup
					if err := c.call(actor.WithMessageID(id), actor.Duplicate(&dup)); err != nil {
						t.Fatalf("%s #%d: %v", c.name, try, err)
					}
					if dup != wantDup {
						t.Fatalf("%s #%d: Duplicate = %v; want %v", c.name, try, dup, wantDup)
					}
				}
				if got := c.count(); got != n+1 {
					t.Fatalf("%s with one ID three times delivered %d messages; want 1", c.name, got-n)
				}
				n = c.count()
				for i := 0; i < 2; i++ {
					if err := c.call(); err != nil {
						t.Fatal(err)
					}
				}
				if got := c.count(); got != n+2 {
					t.Fatalf("%s without an ID twice delivered %d messages; want 2", c.name, got-n)
				}
			}
			// The ID space is shared: a Publish cannot reuse a Send's ID.
			var dup bool
			if id, err := sys.Publish(ctx, "queue", "x", actor.WithMessageID("id-Send"), actor.Duplicate(&dup)); err != nil || !dup || id != "id-Send" {
				t.Fatalf("Publish with a Send's ID = %q, %v, duplicate %v", id, err, dup)
			}
			// An empty ID is no ID: no dedupe.
			n := depth()
			for i := 0; i < 2; i++ {
				dup := true
				if err := sys.Send(ctx, pid, "x", actor.WithMessageID(""), actor.Duplicate(&dup)); err != nil || dup {
					t.Fatalf("Send with an empty ID = %v, duplicate %v", err, dup)
				}
			}
			if got := depth(); got != n+2 {
				t.Fatalf("two Sends with an empty ID delivered %d messages; want 2", got-n)
			}

			// Racing retries: exactly one delivers.
			n = depth()
			var wg sync.WaitGroup
			var fresh atomic.Int64
			for i := 0; i < 16; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var dup bool
					if err := sys.Send(ctx, pid, "r", actor.WithMessageID("racing"), actor.Duplicate(&dup)); err != nil {
						t.Error(err)
					} else if !dup {
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
