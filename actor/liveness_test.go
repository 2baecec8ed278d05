package actor_test

// Wake-ups, cancels and spawns that race with an activation's start, a
// spawn, a notification gap or a shutdown. Each test pauses the runtime at
// the moment between its check and its decision (a hook, a store call),
// fires the event there, and lets it go on. Nodes run with long
// PassivateAfter and RecoveryInterval, so that neither safety net hides a
// lost wake-up: the deadlines below are liveness bounds, not measurements.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
)

// liveWait bounds how long a test waits for something that must happen.
const liveWait = 20 * time.Second

// pausePoint pauses the first goroutine that calls pause while armed, until the
// test opens it.
type pausePoint struct {
	armed   atomic.Bool
	reached chan struct{}
	release chan struct{}
}

func newPausePoint() *pausePoint {
	g := &pausePoint{reached: make(chan struct{}), release: make(chan struct{})}
	g.armed.Store(true)
	return g
}

func (g *pausePoint) pause() {
	if g.armed.CompareAndSwap(true, false) {
		close(g.reached)
		<-g.release
	}
}

func (g *pausePoint) wait(t *testing.T) {
	t.Helper()
	select {
	case <-g.reached:
	case <-time.After(liveWait):
		t.Fatal("the runtime never reached the paused point")
	}
}

func (g *pausePoint) open() { close(g.release) }

// hookFunc is Hooks from a function.
type hookFunc func(actor.HookEvent)

func (f hookFunc) Observe(_ context.Context, e actor.HookEvent) { f(e) }

// pauseAt pauses the runtime at the first hook event of kind for instance.
func pauseAt(g *pausePoint, kind actor.HookKind, instance string) actor.Hooks {
	return hookFunc(func(e actor.HookEvent) {
		if e.Kind == kind && e.Instance == instance {
			g.pause()
		}
	})
}

// slowNets turns the safety nets off for the test's duration.
func slowNets(cfg actor.Config) actor.Config {
	cfg.PassivateAfter, cfg.RecoveryInterval = time.Hour, time.Hour
	return cfg
}

// waiterWF parks in Receive and returns what it got.
func waiterWF() *actor.WorkflowDef[int, string] {
	return actor.Workflow("waiter", func(ctx *actor.Context, _ int) (string, error) {
		m, err := actor.Receive[string](ctx)
		return m.Value, err
	})
}

// parkedInstance spawns id on a first node and stops it, then marks it
// running as a node that died mid-run leaves it: with no lease and no
// activation, for the next node's recovery scan to start. (Stopped in its
// receive, it would be waiting: woken by mail, not by the scan.)
func parkedInstance(t *testing.T, st persistence.Store, wf *actor.WorkflowDef[int, string], id string) actor.PID {
	t.Helper()
	ctx := testutil.Ctx(t, liveWait)
	sys, err := actor.Start(ctx, slowNets(actor.Config{Store: st, Workflows: actor.Register(wf), Logger: testutil.Logger()}))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := actor.Spawn(ctx, sys, wf, 0, actor.WithID(id))
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	inst, err := st.Instance(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, persistence.Step{Instance: id, Epoch: inst.LeaseEpoch, Status: persistence.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	return pid
}

func awaitCancelled(t *testing.T, sys *actor.System, wf *actor.WorkflowDef[int, string], pid actor.PID) {
	t.Helper()
	ctx := testutil.Ctx(t, liveWait)
	if _, err := actor.Await(ctx, sys, wf, pid); !errors.Is(err, actor.ErrCancelled) {
		t.Fatalf("Await = %v; want ErrCancelled", err)
	}
}

// remoteSend adds a message as another process would: straight into the
// store, with no wake-up for this node.
func remoteSend(t *testing.T, st persistence.Store, pid actor.PID, payload string) {
	t.Helper()
	_, err := st.Apply(context.Background(), persistence.Step{Send: []persistence.NewMessage{{
		ID: "remote-" + payload, Target: string(pid), Payload: []byte(`"` + payload + `"`), MustDeliver: true}}})
	if err != nil {
		t.Fatalf("remote send: %v", err)
	}
}

// A cancel that arrives after the activation read its instance and before
// it is registered reaches it: from this node (Cancel), from another
// process (a notification), during a spawn's launch, and during shutdown
// (the next node sees it).
func TestCancelDuringActivationStart(t *testing.T) {
	wf := waiterWF()
	t.Run("local cancel", func(t *testing.T) {
		st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
		pid := parkedInstance(t, st, wf, "c1")
		g := newPausePoint()
		sys := testutil.StartNode(t, slowNets(actor.Config{Store: st, Workflows: actor.Register(wf),
			Hooks: pauseAt(g, actor.HookInstanceActivated, "c1")}))
		g.wait(t)
		if err := sys.Cancel(testutil.Ctx(t, liveWait), pid, "while starting"); err != nil {
			t.Fatal(err)
		}
		g.open()
		awaitCancelled(t, sys, wf, pid)
	})
	t.Run("remote cancel", func(t *testing.T) {
		st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
		pid := parkedInstance(t, st, wf, "c2")
		g := newPausePoint()
		ns := testutil.Notify(st, st)
		sys := testutil.StartNode(t, slowNets(actor.Config{Store: ns, Workflows: actor.Register(wf),
			Hooks: pauseAt(g, actor.HookInstanceActivated, "c2")}))
		g.wait(t)
		testutil.Eventually(t, liveWait, "listening", func() bool { return ns.Listening() > 0 })
		if err := st.RequestCancel(context.Background(), "c2", "from elsewhere"); err != nil {
			t.Fatal(err)
		}
		ns.Notify("c2")
		g.open()
		awaitCancelled(t, sys, wf, pid)
	})
	t.Run("during spawn", func(t *testing.T) {
		st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
		g := newPausePoint()
		sys := testutil.StartNode(t, slowNets(actor.Config{Store: st, Workflows: actor.Register(wf),
			Hooks: pauseAt(g, actor.HookInstanceStarted, "c3")}))
		ctx := testutil.Ctx(t, liveWait)
		spawned := make(chan error, 1)
		go func() {
			_, err := actor.Spawn(ctx, sys, wf, 0, actor.WithID("c3"))
			spawned <- err
		}()
		g.wait(t)
		if err := sys.Cancel(ctx, "c3", "while spawning"); err != nil {
			t.Fatal(err)
		}
		g.open()
		if err := <-spawned; err != nil {
			t.Fatal(err)
		}
		awaitCancelled(t, sys, wf, "c3")
	})
	t.Run("during shutdown", func(t *testing.T) {
		st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
		pid := parkedInstance(t, st, wf, "c4")
		g := newPausePoint()
		sys := testutil.StartNode(t, slowNets(actor.Config{Store: st, Workflows: actor.Register(wf),
			Hooks: pauseAt(g, actor.HookInstanceActivated, "c4")}))
		g.wait(t)
		ctx := testutil.Ctx(t, liveWait)
		if err := sys.Cancel(ctx, pid, "while stopping"); err != nil {
			t.Fatal(err)
		}
		stopped := make(chan error, 1)
		go func() { stopped <- sys.Stop(ctx) }()
		testutil.Eventually(t, liveWait, "stop begins", sys.IsStopping)
		g.open()
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		next := testutil.StartNode(t, slowNets(actor.Config{Store: st, Workflows: actor.Register(wf)}))
		awaitCancelled(t, next, wf, pid)
	})
}

// A wake recorded while a Spawn of an existing ID is in flight (between
// the spawn's claim and the store's "exists" answer) is acted on.
func TestWakeDuringSpawnOfExistingID(t *testing.T) {
	wf := waiterWF()
	// setup: a passivated instance "s"; the next Create of "s" pauses.
	setup := func(t *testing.T) (*testutil.InterceptStore, *pausePoint, *actor.System, actor.PID) {
		st := &testutil.InterceptStore{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t))}
		g := newPausePoint()
		var armed atomic.Bool
		st.BeforeApply = func(_ context.Context, step persistence.Step) {
			if armed.Load() && step.Create != nil && step.Create.ID == "s" {
				g.pause()
			}
		}
		passivated := make(chan struct{}, 1)
		cfg := slowNets(actor.Config{Store: st, Workflows: actor.Register(wf), Hooks: hookFunc(func(e actor.HookEvent) {
			if e.Kind == actor.HookInstancePassivated {
				select {
				case passivated <- struct{}{}:
				default:
				}
			}
		})})
		cfg.PassivateAfter = 20 * time.Millisecond
		sys := testutil.StartNode(t, cfg)
		pid, err := actor.Spawn(testutil.Ctx(t, liveWait), sys, wf, 0, actor.WithID("s"))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-passivated:
		case <-time.After(liveWait):
			t.Fatal("never passivated")
		}
		armed.Store(true)
		return st, g, sys, pid
	}
	spawnAgain := func(sys *actor.System) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := actor.Spawn(context.Background(), sys, wf, 0, actor.WithID("s"))
			done <- err
		}()
		return done
	}
	t.Run("mail", func(t *testing.T) {
		_, g, sys, pid := setup(t)
		done := spawnAgain(sys)
		g.wait(t)
		ctx := testutil.Ctx(t, liveWait)
		if err := sys.Send(ctx, pid, "hello"); err != nil {
			t.Fatal(err)
		}
		g.open()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != "hello" {
			t.Fatalf("Await = %q, %v", got, err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		_, g, sys, pid := setup(t)
		done := spawnAgain(sys)
		g.wait(t)
		if err := sys.Cancel(testutil.Ctx(t, liveWait), pid, "meanwhile"); err != nil {
			t.Fatal(err)
		}
		g.open()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		awaitCancelled(t, sys, wf, pid)
	})
	t.Run("during shutdown", func(t *testing.T) {
		st, g, sys, pid := setup(t)
		done := spawnAgain(sys)
		g.wait(t)
		ctx := testutil.Ctx(t, liveWait)
		if err := sys.Send(ctx, pid, "late"); err != nil {
			t.Fatal(err)
		}
		stopped := make(chan error, 1)
		go func() { stopped <- sys.Stop(ctx) }()
		testutil.Eventually(t, liveWait, "stop begins", sys.IsStopping)
		g.open()
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		<-done // ErrStopped or the PID: either is fine here
		next := testutil.StartNode(t, slowNets(actor.Config{Store: st.Store, Workflows: actor.Register(wf)}))
		if got, err := actor.Await(ctx, next, wf, pid); err != nil || got != "late" {
			t.Fatalf("Await = %q, %v", got, err)
		}
	})
}

// gapStores are the stores of the gap tests: the node's (with controlled
// notifications) and a "remote" one that writes as another process.
type gapStores struct {
	node   *testutil.NotifyStore
	inner  *testutil.InterceptStore
	remote persistence.Store
}

func sqliteGapStores(t *testing.T) gapStores {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	in := &testutil.InterceptStore{Store: st}
	return gapStores{node: testutil.Notify(in, st), inner: in, remote: st}
}

func postgresGapStores(t *testing.T) gapStores {
	url := testutil.PostgresURL(t)
	st := openPostgres(t, url)
	in := &testutil.InterceptStore{Store: st}
	return gapStores{node: testutil.Notify(in, st), inner: in, remote: openPostgres(t, url)}
}

func openPostgres(t *testing.T, url string) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), url, postgres.Options{Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// After a notification gap, activations live (or starting) on this node
// look at their mailbox and cancel flag again: the Runnable scan skips
// them, since this node holds their lease.
func TestRescanAfterNotificationGap(t *testing.T) {
	for _, store := range []struct {
		name string
		open func(*testing.T) gapStores
	}{{"sqlite", sqliteGapStores}, {"postgres", postgresGapStores}} {
		t.Run(store.name+"/parked", func(t *testing.T) {
			wf := waiterWF()
			s := store.open(t)
			// Recovered at start, so that it reads its mailbox (a new
			// instance parks without a read).
			pid := parkedInstance(t, s.remote, wf, "g1")
			g := newPausePoint()
			var once atomic.Bool
			s.inner.AfterMailbox = func(id string, _ []persistence.Message, _ error) {
				if id == "g1" && once.CompareAndSwap(false, true) {
					g.pause() // between the activation's look at its mailbox and its park
				}
			}
			sys := testutil.StartNode(t, slowNets(actor.Config{Store: s.node, Workflows: actor.Register(wf)}))
			testutil.Eventually(t, liveWait, "listening", func() bool { return s.node.Listening() > 0 })
			ctx := testutil.Ctx(t, liveWait)
			g.wait(t)
			s.node.Drop(true) // the message's notification is lost ...
			remoteSend(t, s.remote, pid, "missed")
			s.node.Gap() // ... and the driver says so
			g.open()
			if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != "missed" {
				t.Fatalf("Await = %q, %v", got, err)
			}
		})
		t.Run(store.name+"/starting", func(t *testing.T) {
			wf := waiterWF()
			s := store.open(t)
			pid := parkedInstance(t, s.remote, wf, "g2")
			g := newPausePoint()
			sys := testutil.StartNode(t, slowNets(actor.Config{Store: s.node, Workflows: actor.Register(wf),
				Hooks: pauseAt(g, actor.HookInstanceActivated, "g2")}))
			g.wait(t)
			testutil.Eventually(t, liveWait, "listening", func() bool { return s.node.Listening() > 0 })
			s.node.Drop(true)
			if err := s.remote.RequestCancel(context.Background(), "g2", "unheard"); err != nil {
				t.Fatal(err)
			}
			s.node.Gap()
			g.open()
			awaitCancelled(t, sys, wf, pid)
		})
	}
}

// countingHandler counts log records at Warn and above.
type countingHandler struct {
	slog.Handler
	warns *atomic.Int64
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.warns.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{Handler: h.Handler.WithAttrs(as), warns: h.warns}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{Handler: h.Handler.WithGroup(name), warns: h.warns}
}

// A node that lacks an instance's workflow neither takes its lease nor
// retries it: the instance stays free for a node that has the workflow.
func TestNodeLeavesOtherWorkflowsAlone(t *testing.T) {
	wf := waiterWF()
	other := actor.Workflow("other", func(*actor.Context, int) (int, error) { return 0, nil })
	base := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	pid := parkedInstance(t, base, wf, "w1")

	st := &testutil.InterceptStore{Store: base}
	var acquired atomic.Int64
	looked := make(chan struct{}, 1)
	st.BeforeAcquire = func(id, owner string) {
		if id == "w1" {
			acquired.Add(1)
		}
	}
	st.AfterInstance = func(id string, _ persistence.Instance, _ error) {
		if id == "w1" {
			select {
			case looked <- struct{}{}:
			default:
			}
		}
	}
	var warns atomic.Int64
	logger := slog.New(countingHandler{Handler: testutil.Logger().Handler(), warns: &warns})
	ctx := testutil.Ctx(t, liveWait)
	before, err := base.Instance(ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	sys, err := actor.Start(ctx, slowNets(actor.Config{Store: st, Workflows: actor.Register(other), Logger: logger}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-looked:
	case <-ctx.Done():
		t.Fatal("the node never looked at the instance")
	}
	if err := sys.Stop(ctx); err != nil { // waits for the activator that looked
		t.Fatal(err)
	}
	if n := acquired.Load(); n != 0 {
		t.Errorf("a node without the workflow took the lease %d times", n)
	}
	if n := warns.Load(); n != 0 {
		t.Errorf("%d warnings logged for an instance that is not this node's business", n)
	}
	inst, err := base.Instance(ctx, "w1")
	if err != nil || inst.LeaseOwner != "" || inst.LeaseEpoch != before.LeaseEpoch {
		t.Fatalf("instance after the foreign node = %+v, %v; want untouched", inst, err)
	}
	owner := testutil.StartNode(t, slowNets(actor.Config{Store: base, Workflows: actor.Register(wf)}))
	if err := owner.Send(ctx, pid, "yours"); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, owner, wf, pid); err != nil || got != "yours" {
		t.Fatalf("Await = %q, %v", got, err)
	}
}

// Two Spawns of one ID at the same moment, on one node or two: whichever
// wins, the instance runs and both callers can await it.
func TestConcurrentSpawnOfOneID(t *testing.T) {
	run := func(t *testing.T, nodes []*actor.System, wf *actor.WorkflowDef[int, int]) {
		ctx := testutil.Ctx(t, 60*time.Second)
		start := make(chan struct{})
		errs := make(chan error, 100)
		var wg sync.WaitGroup
		for i := 0; i < 50; i++ {
			id := fmt.Sprintf("twin-%d", i)
			for j := 0; j < 2; j++ {
				sys := nodes[j%len(nodes)]
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					pid, err := actor.Spawn(ctx, sys, wf, i, actor.WithID(id))
					if err == nil {
						var got int
						got, err = actor.Await(ctx, sys, wf, pid)
						if err == nil && got != i+1 {
							err = fmt.Errorf("result %d", got)
						}
					}
					if err != nil {
						errs <- fmt.Errorf("%s: %w", id, err)
					}
				}()
			}
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	newWF := func() *actor.WorkflowDef[int, int] {
		return actor.Workflow("twin", func(ctx *actor.Context, n int) (int, error) { return n + 1, nil })
	}
	t.Run("sqlite", func(t *testing.T) {
		wf := newWF()
		sys := testutil.StartNode(t, slowNets(actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)}))
		run(t, []*actor.System{sys}, wf)
	})
	t.Run("sqlite/second create first", func(t *testing.T) {
		// SQLite commits Creates in arrival order, so the first caller
		// nearly always wins; make the second one win instead.
		wf := newWF()
		st := &testutil.InterceptStore{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t))}
		var mu sync.Mutex
		first := map[string]chan struct{}{} // id -> closed once the second Create is applied
		st.BeforeApply = func(_ context.Context, step persistence.Step) {
			if step.Create == nil {
				return
			}
			mu.Lock()
			c, second := first[step.Create.ID]
			if !second {
				c = make(chan struct{})
				first[step.Create.ID] = c
			}
			mu.Unlock()
			if !second {
				select {
				case <-c:
				case <-time.After(liveWait):
				}
			}
		}
		st.AfterApply = func(step persistence.Step, _ persistence.StepResult, _ error) {
			if step.Create == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if c, ok := first[step.Create.ID]; ok {
				select {
				case <-c:
				default:
					close(c)
				}
			}
		}
		sys := testutil.StartNode(t, slowNets(actor.Config{Store: st, Workflows: actor.Register(wf)}))
		run(t, []*actor.System{sys}, wf)
	})
	t.Run("postgres/one node", func(t *testing.T) {
		wf := newWF()
		sys := testutil.StartNode(t, slowNets(actor.Config{Store: openPostgres(t, testutil.PostgresURL(t)), Workflows: actor.Register(wf)}))
		run(t, []*actor.System{sys}, wf)
	})
	t.Run("postgres/two nodes", func(t *testing.T) {
		wf := newWF()
		url := testutil.PostgresURL(t)
		a := testutil.StartNode(t, slowNets(actor.Config{Store: openPostgres(t, url), Workflows: actor.Register(wf), NodeID: "a"}))
		b := testutil.StartNode(t, slowNets(actor.Config{Store: openPostgres(t, url), Workflows: actor.Register(wf), NodeID: "b"}))
		run(t, []*actor.System{a, b}, wf)
	})
}

// Calls from outside the workflows fail with ErrStopped once the System is
// stopped, and none of them writes after Stop returned, even those racing
// with it.
func TestCallsAfterStop(t *testing.T) {
	wf := waiterWF()
	st := &testutil.InterceptStore{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t))}
	var stopped atomic.Bool
	var late atomic.Int64
	st.BeforeApply = func(context.Context, persistence.Step) {
		if stopped.Load() {
			late.Add(1)
		}
	}
	ctx := testutil.Ctx(t, liveWait)
	sys, err := actor.Start(ctx, slowNets(actor.Config{Store: st, Workflows: actor.Register(wf), Logger: testutil.Logger()}))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := actor.Spawn(ctx, sys, wf, 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var sent atomic.Int64
	sentSome := make(chan struct{})
	var once sync.Once
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 100000; n++ {
				_, err := sys.Publish(ctx, "racing", n)
				if errors.Is(err, actor.ErrStopped) {
					return
				}
				if err != nil {
					t.Errorf("Publish: %v", err)
					return
				}
				sent.Add(1)
				once.Do(func() { close(sentSome) })
			}
			t.Errorf("Publish never failed with ErrStopped")
		}()
	}
	<-sentSome
	if err := sys.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped.Store(true)
	wg.Wait()
	if n := late.Load(); n != 0 {
		t.Errorf("%d store writes after Stop returned", n)
	}
	calls := map[string]error{
		"Send":        sys.Send(ctx, pid, "x"),
		"SendOn":      sys.SendOn(ctx, "ch", pid, "x"),
		"Cancel":      sys.Cancel(ctx, pid, "x"),
		"Publish":     second(sys.Publish(ctx, "ch", "x")),
		"PublishWith": second(sys.PublishWith(ctx, "ch", "x", map[string]string{"k": "v"})),
		"Spawn":       second(actor.Spawn(ctx, sys, wf, 1)),
	}
	for name, err := range calls {
		if !errors.Is(err, actor.ErrStopped) {
			t.Errorf("%s after Stop = %v; want ErrStopped", name, err)
		}
	}
	if n := late.Load(); n != 0 {
		t.Errorf("%d store writes after Stop", n)
	}
}

func second[T any](_ T, err error) error { return err }

// Spawns racing Stop: every Spawn that returned a PID has an instance that
// runs, here before the stop or on the next node after it.
func TestSpawnRacingStop(t *testing.T) {
	wf := actor.Workflow("racer", func(ctx *actor.Context, n int) (int, error) { return n + 1, nil })
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	ctx := testutil.Ctx(t, liveWait)
	sys, err := actor.Start(ctx, slowNets(actor.Config{Store: st, Workflows: actor.Register(wf), Logger: testutil.Logger()}))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var pids []actor.PID
	first := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100000; i++ {
				pid, err := actor.Spawn(ctx, sys, wf, i, actor.WithID(fmt.Sprintf("r-%d-%d", g, i)))
				if errors.Is(err, actor.ErrStopped) {
					return
				}
				if err != nil {
					t.Errorf("Spawn: %v", err)
					return
				}
				mu.Lock()
				pids = append(pids, pid)
				mu.Unlock()
				once.Do(func() { close(first) })
			}
		}()
	}
	<-first
	if err := sys.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	next := testutil.StartNode(t, slowNets(actor.Config{Store: st, Workflows: actor.Register(wf)}))
	for _, pid := range pids {
		if _, err := actor.Await(ctx, next, wf, pid); err != nil {
			t.Fatalf("%s: %v", pid, err)
		}
	}
	t.Logf("%d spawns before the stop", len(pids))
}
