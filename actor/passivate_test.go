package actor_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// A parked activation passivates (status waiting, no lease, no goroutine);
// a message or a timer brings it back through replay.
func TestPassivationAndWake(t *testing.T) {
	wf := actor.Workflow("idle", func(ctx *actor.Context, _ int) (string, error) {
		m, err := actor.Receive[string](ctx)
		if err != nil {
			return "", err
		}
		if err := ctx.Sleep(300 * time.Millisecond); err != nil {
			return "", err
		}
		return m.Value + " after sleep", nil
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf),
		PassivateAfter: 50 * time.Millisecond})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 0)
	waitPassivated := func() {
		t.Helper()
		for {
			info, err := sys.Inspect(ctx, pid)
			if err != nil {
				t.Fatal(err)
			}
			if !info.Active && info.Status == persistence.StatusWaiting && info.Node == "" {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("never passivated: %+v", info.Instance)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitPassivated()
	if err := sys.Send(ctx, pid, "hello"); err != nil {
		t.Fatal(err)
	}
	// It wakes, consumes, starts sleeping, passivates again; the timer wakes it.
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil || got != "hello after sleep" {
		t.Fatalf("Await = %q, %v", got, err)
	}
	info, _ := sys.Inspect(ctx, pid)
	if n := countKind(info.History, actor.EventReceived); n != 1 {
		t.Fatalf("received %d times, want 1", n)
	}
}

// An activation's first park gives the lease up with the park's commit
// when it waits for durable events only: the row says waiting and free
// while the activation stays live, its passivation writes nothing, and the
// next message is taken under the lease again. Once woken, it keeps the
// lease through its parks; a competing consumer keeps it from the start
// (the node's fetcher hands messages to leased consumers only).
func TestFirstParkGivesLeaseUp(t *testing.T) {
	t.Parallel()
	twice := actor.Workflow("twice", func(ctx *actor.Context, _ int) (string, error) {
		a, err := actor.Receive[string](ctx)
		if err != nil {
			return "", err
		}
		b, err := actor.Receive[string](ctx)
		return a.Value + b.Value, err
	})
	worker := actor.Workflow("worker", func(ctx *actor.Context, _ int) (string, error) {
		if err := ctx.Subscribe("jobs", mailbox.Competing); err != nil {
			return "", err
		}
		m, err := actor.Receive[string](ctx, mailbox.OnChannel("jobs"))
		return m.Value, err
	})
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	passivated := make(chan string, 8)
	hooks := hookFunc(func(e actor.HookEvent) {
		if e.Kind == actor.HookInstancePassivated {
			passivated <- string(e.Instance)
		}
	})
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(twice, worker), NodeID: "n1",
		PassivateAfter: 300 * time.Millisecond, Hooks: hooks})
	ctx := testutil.Ctx(t, 30*time.Second)
	waitPassivated := func(pid actor.PID) {
		t.Helper()
		select {
		case got := <-passivated:
			if got != string(pid) {
				t.Fatalf("passivated %s, want %s", got, pid)
			}
		case <-ctx.Done():
			t.Fatalf("%s never passivated", pid)
		}
	}
	row := func(pid actor.PID) persistence.Instance {
		t.Helper()
		in, err := st.Instance(ctx, string(pid))
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	parkedFree := func(pid actor.PID) persistence.Instance {
		t.Helper()
		var in persistence.Instance
		testutil.Eventually(t, 10*time.Second, string(pid)+" waiting", func() bool {
			in = row(pid)
			return in.Status == persistence.StatusWaiting && in.Waits != nil
		})
		return in
	}

	pid, err := actor.Spawn(ctx, sys, twice, 0)
	if err != nil {
		t.Fatal(err)
	}
	before := parkedFree(pid)
	if before.LeaseOwner != "" {
		t.Fatalf("parked at its first park under the lease of %q", before.LeaseOwner)
	}
	if info, err := sys.Inspect(ctx, pid); err != nil || !info.Active || info.Node != "n1" {
		t.Fatalf("Inspect = active %v on %q, %v; want live on n1", info.Active, info.Node, err)
	}
	waitPassivated(pid)
	if after := row(pid); after.UpdatedAt != before.UpdatedAt || after.LeaseEpoch != before.LeaseEpoch {
		t.Fatalf("the passivation wrote: updated %v → %v, epoch %d → %d", before.UpdatedAt, after.UpdatedAt, before.LeaseEpoch, after.LeaseEpoch)
	}

	// Woken, it takes the lease back for its take, and keeps it at the
	// next park: this time its passivation gives it up.
	if err := sys.Send(ctx, pid, "a"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the first message taken, parked again under the lease", func() bool {
		in := row(pid)
		return in.HistoryLen > before.HistoryLen && in.LeaseOwner == "n1" && in.Status == persistence.StatusWaiting
	})
	waitPassivated(pid)
	if in := row(pid); in.LeaseOwner != "" {
		t.Fatalf("passivated under the lease of %q", in.LeaseOwner)
	}
	if err := sys.Send(ctx, pid, "b"); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, twice, pid); err != nil || got != "ab" {
		t.Fatalf("Await = %q, %v", got, err)
	}

	w, err := actor.Spawn(ctx, sys, worker, 0)
	if err != nil {
		t.Fatal(err)
	}
	if in := parkedFree(w); in.LeaseOwner != "n1" {
		t.Fatalf("a competing consumer parked under the lease of %q, want n1", in.LeaseOwner)
	}
}

// A live activation that gave its lease up at its park and then finds it
// taken by another writer takes nothing: the message waits for the
// lease's holder, and the instance ends once, after the holder gives the
// lease back.
func TestFreeParkFencedByAnotherLease(t *testing.T) {
	t.Parallel()
	once := actor.Workflow("once", func(ctx *actor.Context, _ int) (string, error) {
		m, err := actor.Receive[string](ctx)
		return m.Value, err
	})
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(once), NodeID: "n1",
		PassivateAfter: time.Minute, RecoveryInterval: 100 * time.Millisecond})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, once, 0)
	if err != nil {
		t.Fatal(err)
	}
	var parked persistence.Instance
	testutil.Eventually(t, 10*time.Second, "parked without the lease", func() bool {
		in, err := st.Instance(ctx, string(pid))
		parked = in
		return err == nil && in.Status == persistence.StatusWaiting && in.LeaseOwner == ""
	})
	if _, err := st.AcquireLease(ctx, string(pid), "other", time.Hour); err != nil {
		t.Fatal(err)
	}
	// The activation still parked here does not run the instance now.
	if info, err := sys.Inspect(ctx, pid); err != nil || info.Active || info.Node != "other" {
		t.Fatalf("Inspect after another node took the lease: active %v on %q, %v; want inactive here, on other", info.Active, info.Node, err)
	}
	if err := sys.Send(ctx, pid, "m"); err != nil {
		t.Fatal(err)
	}
	// The live activation is woken and fenced at its take; it stops.
	testutil.Eventually(t, 10*time.Second, "the fenced activation stopped", func() bool {
		info, err := sys.Inspect(ctx, pid)
		return err == nil && !info.Active
	})
	if in, err := st.Instance(ctx, string(pid)); err != nil || in.HistoryLen != parked.HistoryLen || in.LeaseOwner != "other" {
		t.Fatalf("after the fenced wake: history %d (want %d), lease %q, %v", in.HistoryLen, parked.HistoryLen, in.LeaseOwner, err)
	}
	if err := st.ReleaseLeases(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, once, pid); err != nil || got != "m" {
		t.Fatalf("Await = %q, %v", got, err)
	}
	info, err := sys.Inspect(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	if n := countKind(info.History, actor.EventReceived); n != 1 {
		t.Fatalf("received %d times, want 1", n)
	}
}

// Two processes share a store without a cluster: instances parked on one
// hold no lease, and the other's recovery pass races their live
// activations for the mail it sends them. Whichever takes the lease takes
// the messages; each is taken once, in order. (A standalone node does not
// signal mail to an instance live on another process sharing a SQLite
// file: an activation that holds the lease hears of it at its
// passivation, hence the short PassivateAfter.)
func TestFreeParksRaceAnotherNode(t *testing.T) {
	t.Parallel()
	pair := actor.Workflow("pair", func(ctx *actor.Context, _ int) (string, error) {
		a, err := actor.Receive[string](ctx)
		if err != nil {
			return "", err
		}
		b, err := actor.Receive[string](ctx)
		return a.Value + b.Value, err
	})
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	cfg := func(node string) actor.Config {
		return actor.Config{Store: testutil.OpenSQLite(t, path), Workflows: actor.Register(pair), NodeID: node,
			RecoveryInterval: 20 * time.Millisecond, PassivateAfter: 300 * time.Millisecond}
	}
	a := testutil.StartNode(t, cfg("a"))
	b := testutil.StartNode(t, cfg("b"))
	ctx := testutil.Ctx(t, time.Minute)
	var pids []actor.PID
	for i := range 20 {
		pid, err := actor.Spawn(ctx, a, pair, i)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	testutil.Eventually(t, 20*time.Second, "all parked without a lease", func() bool {
		for _, pid := range pids {
			info, err := b.Inspect(ctx, pid)
			if err != nil || info.Status != persistence.StatusWaiting || info.Node != "" {
				return false
			}
		}
		return true
	})
	for _, pid := range pids {
		for _, m := range []string{"x", "y"} {
			if err := b.Send(ctx, pid, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, pid := range pids {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		got, err := actor.Await(actx, b, pair, pid)
		cancel()
		if err != nil || got != "xy" {
			info, _ := b.Inspect(ctx, pid)
			ia, _ := a.Inspect(ctx, pid)
			var kinds []string
			for _, e := range info.History {
				kinds = append(kinds, string(e.Kind))
			}
			row, _ := st.Instance(ctx, string(pid))
			t.Fatalf("%s: Await = %q, %v\nstatus %s node %q lease %q epoch %d history %v; active on a %v, b %v",
				pid, got, err, info.Status, info.Node, row.LeaseOwner, row.LeaseEpoch, kinds, ia.Active, info.Active)
		}
		info, err := b.Inspect(ctx, pid)
		if err != nil {
			t.Fatal(err)
		}
		if n := countKind(info.History, actor.EventReceived); n != 2 {
			t.Fatalf("%s received %d times, want 2", pid, n)
		}
	}
}

// receivesThree receives three strings and returns them joined.
func receivesThree() *actor.WorkflowDef[int, string] {
	return actor.Workflow("three", func(ctx *actor.Context, _ int) (string, error) {
		out := ""
		for range 3 {
			m, err := actor.Receive[string](ctx)
			if err != nil {
				return "", err
			}
			out += m.Value
		}
		return out, nil
	})
}

// liveOnB spawns a receivesThree instance on b, sends it "x" and waits
// until it has received it and parked again, keeping b's lease (an
// instance woken once keeps its lease while it parks). It returns the
// instance and its lease epoch. Another node sharing the file must start
// only after this: while the lease is free, either node may take the
// instance.
func liveOnB(t *testing.T, ctx context.Context, st persistence.Store, b *actor.System, three *actor.WorkflowDef[int, string]) (actor.PID, int64) {
	t.Helper()
	pid, err := actor.Spawn(ctx, b, three, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctx, pid, "x"); err != nil {
		t.Fatal(err)
	}
	var epoch int64
	testutil.Eventually(t, 20*time.Second, "parked again on b, with b's lease", func() bool {
		row, err := st.Instance(ctx, string(pid))
		info, ierr := b.Inspect(ctx, pid)
		epoch = row.LeaseEpoch
		return err == nil && ierr == nil && row.Status == persistence.StatusWaiting && row.LeaseOwner == "b" &&
			countKind(info.History, actor.EventReceived) == 1
	})
	return pid, epoch
}

// Two nodes share a SQLite file without a cluster. An instance live on b
// under b's lease gets mail that a sends: it reaches it through the
// store's wake requests (SQLite tells no other process of a commit), not
// at b's passivation, an hour away.
func TestMailReachesLeaseOnAnotherNode(t *testing.T) {
	t.Parallel()
	three := receivesThree()
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	cfg := func(node string) actor.Config {
		return actor.Config{Store: testutil.OpenSQLite(t, path), Workflows: actor.Register(three), NodeID: node,
			PassivateAfter: time.Hour}
	}
	b := testutil.StartNode(t, cfg("b"))
	ctx := testutil.Ctx(t, time.Minute)
	pid, epoch := liveOnB(t, ctx, st, b, three)
	a := testutil.StartNode(t, cfg("a"))
	for _, m := range []string{"y", "z"} {
		if err := a.Send(ctx, pid, m); err != nil {
			t.Fatal(err)
		}
	}
	actx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if got, err := actor.Await(actx, a, three, pid); err != nil || got != "xyz" {
		t.Fatalf("Await = %q, %v", got, err)
	}
	if row, _ := st.Instance(ctx, string(pid)); row.LeaseEpoch != epoch {
		t.Errorf("lease epoch %d, was %d on b: the instance moved, want it finished where it was live", row.LeaseEpoch, epoch)
	}
}

// Mail sent through one process to an instance live under another's lease
// while that other process shuts down: whether the wake-up handed on
// reaches it before it stops, while it stops, or after, the instance reads
// the mail (finishing on the sender's node once the holder is gone).
func TestMailReachesLeaseWhileHolderStops(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// before: messages sent before the holder's Stop is called;
		// the rest go from its hook as its activation stops.
		before int
	}{
		{"sent as the activation stops", 0},
		{"sent just before Stop", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			three := receivesThree()
			path := testutil.SQLitePath(t)
			st := testutil.OpenSQLite(t, path)
			ctx := testutil.Ctx(t, time.Minute)
			cfg := func(node string) actor.Config {
				return actor.Config{Store: testutil.OpenSQLite(t, path), Workflows: actor.Register(three), NodeID: node,
					PassivateAfter: time.Hour}
			}
			// b's hook sends through a once a is up (after the instance
			// is live on b), as the instance's activation stops.
			type sender struct {
				sys *actor.System
				pid actor.PID
			}
			var through atomic.Pointer[sender]
			sent := make(chan error, 2)
			var once sync.Once
			bcfg := cfg("b")
			bcfg.Hooks = hookFunc(func(e actor.HookEvent) {
				to := through.Load()
				if to == nil || e.Kind != actor.HookInstanceStopped || e.Instance != string(to.pid) {
					return
				}
				once.Do(func() {
					for _, m := range []string{"y", "z"}[tc.before:] {
						sent <- to.sys.Send(ctx, to.pid, m)
					}
				})
			})
			b := testutil.StartNode(t, bcfg)
			pid, _ := liveOnB(t, ctx, st, b, three)
			a := testutil.StartNode(t, cfg("a"))
			through.Store(&sender{a, pid})
			for _, m := range []string{"y", "z"}[:tc.before] {
				if err := a.Send(ctx, pid, m); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			for range 2 - tc.before {
				if err := <-sent; err != nil {
					t.Fatalf("send during the holder's stop: %v", err)
				}
			}
			actx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if got, err := actor.Await(actx, a, three, pid); err != nil || got != "xyz" {
				t.Fatalf("Await = %q, %v", got, err)
			}
		})
	}
}
