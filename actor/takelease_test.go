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

// waitPassivated waits until pid is waiting in the store with no lease and
// no activation on sys.
func waitPassivated(t *testing.T, sys *actor.System, st persistence.Store, pid actor.PID) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, "the instance passivates", func() bool {
		info, err := sys.Inspect(context.Background(), pid)
		return err == nil && !info.Active && info.Status == persistence.StatusWaiting && info.Node == ""
	})
}

// watchLoads wraps st so that the function set in the returned pointer
// runs as a node on the wrapped store has read an instance's history from
// the start: an activation loading it, about to start (a spawn launches
// its activation without reading history).
func watchLoads(st persistence.Store) (persistence.Store, *atomic.Pointer[func(id string)]) {
	in := &testutil.InterceptStore{Store: st}
	fn := new(atomic.Pointer[func(string)])
	in.AfterHistoryRange = func(id string, from int64, _ []persistence.Event, err error) {
		if f := fn.Load(); f != nil && from == 0 && err == nil {
			(*f)(id)
		}
	}
	return testutil.Notify(in, st), fn
}

// A passivated instance is woken on node a, which reads and replays it
// without the lease; before a writes anything, node b takes it (with its
// own first write) and starts the activity. a's first write is fenced: a
// stops without running the activity, and the activity runs once, on b,
// for the message b took.
func TestWokenInstanceTakenElsewhere(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := testutil.SQLitePath(t)
		testWokenTakenElsewhere(t, testutil.OpenSQLite(t, path), testutil.OpenSQLite(t, path))
	})
	t.Run("postgres", func(t *testing.T) {
		url := testutil.PostgresURL(t)
		testWokenTakenElsewhere(t, openPostgres(t, url), openPostgres(t, url))
	})
}

func testWokenTakenElsewhere(t *testing.T, stA, stB persistence.Store) {
	var runs sync.Map // message value → runs
	started := make(chan int, 4)
	release := make(chan struct{})
	act := actor.Activity("work", func(ctx context.Context, v int) (int, error) {
		n, _ := runs.LoadOrStore(v, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		started <- v
		select {
		case <-release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return v * 10, nil
	})
	wf := actor.Workflow("take", func(ctx *actor.Context, _ int) (int, error) {
		m, err := actor.Receive[int](ctx)
		if err != nil {
			return 0, err
		}
		return act.Run(ctx, m.Value)
	})
	cfg := func(node string, st persistence.Store) actor.Config {
		return actor.Config{Store: st, NodeID: node, Workflows: actor.Register(wf), PassivateAfter: 20 * time.Millisecond}
	}
	nodeA, loading := watchLoads(stA)
	a := testutil.StartNode(t, cfg("a", nodeA))
	// b learns of the instance only through its own send below: had it
	// heard a's wake-up, rescanned (as a listener does half a second after
	// it connects) or found the mail in a recovery pass, it could take the
	// instance before a loads it, and the race this test sets up would not
	// happen.
	cfgB := cfg("b", &testutil.InterceptStore{Store: stB})
	cfgB.RecoveryInterval = time.Hour
	b := testutil.StartNode(t, cfgB)
	// Its one recovery pass runs as it starts, and on a slow server may
	// not be over before the send below: let it end first, while there
	// is nothing to find.
	testutil.Eventually(t, 10*time.Second, "node b's first recovery pass is over", b.Idle)
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, a, wf, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitPassivated(t, a, stA, pid)

	var once atomic.Bool
	raced := make(chan struct{})
	onLoad := func(id string) {
		if id != string(pid) || !once.CompareAndSwap(false, true) {
			return
		}
		// a has read the instance and its history, unleased. b now
		// takes it: it receives message 1 and starts the activity, which
		// commits the receive and the lease first.
		if err := b.Send(ctx, pid, 2); err != nil {
			t.Error(err)
		}
		if v := <-started; v != 1 {
			t.Errorf("b's activity started for %d, want 1 (the first message)", v)
		}
		close(raced)
	}
	loading.Store(&onLoad)
	if err := a.Send(ctx, pid, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-raced:
	case <-ctx.Done():
		t.Fatal("node a never loaded the instance it was woken for")
	}
	// a replays, receives message 2 (1 is gone) and must fail to commit
	// that: b holds the lease at a newer epoch.
	testutil.Eventually(t, 20*time.Second, "a's activation ends", func() bool {
		info, err := a.Inspect(ctx, pid)
		return err == nil && !info.Active && info.Node == "b"
	})
	close(release)
	got, err := actor.Await(ctx, b, wf, pid)
	if err != nil || got != 10 {
		t.Fatalf("Await = %d, %v; want 10", got, err)
	}
	runs.Range(func(k, v any) bool {
		if n := v.(*atomic.Int64).Load(); k.(int) != 1 || n != 1 {
			t.Errorf("the activity ran %d times for message %d; want once, for 1", n, k)
		}
		return true
	})
}

// A node stops while it has woken a passivated instance without taking the
// lease: it leaves the instance as it was (waiting, free, its mail
// unread), and the next node takes it from there.
func TestStopWhileWokenWithoutLease(t *testing.T) {
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	wf := actor.Workflow("stopwoken", func(ctx *actor.Context, _ int) (int, error) {
		m, err := actor.Receive[int](ctx)
		return m.Value, err
	})
	cfg := actor.Config{Store: st, Workflows: actor.Register(wf), PassivateAfter: 20 * time.Millisecond, LeaseTTL: 2 * time.Second}
	nodeA, loading := watchLoads(st)
	cfgA := cfg
	cfgA.Store = nodeA
	a, err := actor.Start(context.Background(), cfgA)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, a, wf, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitPassivated(t, a, st, pid)
	stopped := make(chan error, 1)
	onLoad := func(id string) {
		if id != string(pid) {
			return
		}
		// a has read the instance and its history, unleased.
		go func() { stopped <- a.Stop(context.Background()) }()
		testutil.Eventually(t, 10*time.Second, "stop begins", a.IsStopping)
	}
	loading.Store(&onLoad)
	if err := a.Send(ctx, pid, 7); err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	in, err := st.Instance(ctx, string(pid))
	if err != nil || in.Status != persistence.StatusWaiting || in.LeaseOwner != "" || in.HistoryLen != 1 {
		t.Fatalf("after the stop: %+v, %v; want waiting, free, 1 event", in, err)
	}
	if ms, err := st.Mailbox(ctx, string(pid), 0); err != nil || len(ms) != 1 {
		t.Fatalf("mailbox after the stop: %d messages, %v; want the 1 sent", len(ms), err)
	}
	b := testutil.StartNode(t, cfg)
	if got, err := actor.Await(ctx, b, wf, pid); err != nil || got != 7 {
		t.Fatalf("Await on the next node = %d, %v; want 7", got, err)
	}
}

// Waking many passivated instances at once replays at most 8×MaxActivating
// of them before their first commit or park: the rest wait to start, so
// that a wake-all holds a bounded number of them in memory.
func TestWokenReplaysBounded(t *testing.T) {
	const n, bound = 40, 8 // MaxActivating 1
	var inside, most atomic.Int64
	gate := make(chan struct{})
	wf := actor.Workflow("bounded", func(ctx *actor.Context, _ int) (int, error) {
		if err := ctx.Subscribe("all", mailbox.Broadcast); err != nil {
			return 0, err
		}
		m, err := actor.Receive[int](ctx)
		if err != nil {
			return 0, err
		}
		if !ctx.Replaying() {
			// Taken, not committed: this activation has neither
			// written nor parked since it was woken.
			k := inside.Add(1)
			for {
				if old := most.Load(); k <= old || most.CompareAndSwap(old, k) {
					break
				}
			}
			<-gate
			inside.Add(-1)
		}
		return m.Value, nil
	})
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), PassivateAfter: 20 * time.Millisecond,
		MaxActivating: 1})
	ctx := testutil.Ctx(t, 60*time.Second)
	pids := make([]actor.PID, n)
	for i := range pids {
		pid, err := actor.Spawn(ctx, sys, wf, i)
		if err != nil {
			t.Fatal(err)
		}
		pids[i] = pid
	}
	for _, pid := range pids {
		waitPassivated(t, sys, st, pid)
	}
	if _, err := sys.Publish(ctx, "all", 7); err != nil {
		t.Fatal(err)
	}
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	t.Cleanup(release) // before the node's stop, should the test fail
	// bound instances hold their message uncommitted; the others wait to
	// start.
	testutil.Eventually(t, 30*time.Second, "the bound reached, the rest waiting to start", func() bool {
		return inside.Load() == bound && sys.Starting() == n-bound
	})
	release()
	for _, pid := range pids {
		if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != 7 {
			t.Fatalf("Await(%s) = %d, %v", pid, got, err)
		}
	}
	if m := most.Load(); m != bound {
		t.Fatalf("%d woken instances were past their Receive without a commit at once; want at most (and here exactly) %d", m, bound)
	}
}

// Inspect names this node for an instance that an activation here runs
// before its first write takes the lease: a woken instance whose mail its
// receive does not take stays unleased, yet it is this node's.
func TestInspectNamesNodeOfUnwrittenActivation(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	in := &testutil.InterceptStore{Store: st}
	var onRead atomic.Pointer[func(id string)]
	in.AfterMailbox = func(id string, _ []persistence.Message, err error) {
		if f := onRead.Load(); f != nil && err == nil {
			(*f)(id)
		}
	}
	wf := actor.Workflow("go-only", func(ctx *actor.Context, _ int) (int, error) {
		m, err := actor.Receive[int](ctx, mailbox.OnChannel("go"))
		return m.Value, err
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.Notify(in, st), Workflows: actor.Register(wf), PassivateAfter: 200 * time.Millisecond})
	ctx := testutil.Ctx(t, 20*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitPassivated(t, sys, st, pid)
	seen := make(chan actor.InstanceInfo, 1)
	var once atomic.Bool
	look := func(id string) {
		if id != string(pid) || !once.CompareAndSwap(false, true) {
			return
		}
		// Woken, replayed, its read found nothing it takes: it parks
		// next, unleased.
		info, err := sys.Inspect(context.Background(), pid)
		if err != nil {
			t.Error(err)
		}
		seen <- info
	}
	onRead.Store(&look)
	if err := sys.Send(ctx, pid, 7); err != nil { // not on "go": woken, not taken
		t.Fatal(err)
	}
	info := <-seen
	if !info.Active || info.Node != sys.NodeID() {
		t.Fatalf("Inspect of the woken instance: active %v, node %q; want active on %q", info.Active, info.Node, sys.NodeID())
	}
	if in, err := st.Instance(ctx, string(pid)); err != nil || in.LeaseOwner != "" {
		t.Fatalf("store: lease owner %q, %v; want none (nothing written yet)", in.LeaseOwner, err)
	}
}
