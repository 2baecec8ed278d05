package norntest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// DefaultStart is where the virtual clock starts unless Options.Start says
// otherwise: a fixed time, so that what a workflow records of the clock
// is the same on every run.
var DefaultStart = time.Date(2030, time.January, 1, 9, 0, 0, 0, time.UTC)

// Options configures an Env.
type Options struct {
	// Workflows are the workflows the node runs. Required.
	Workflows []actor.Definition
	// Errors, Codec: as in actor.Config.
	Errors []actor.ErrorDef
	Codec  actor.Codec
	// Start is the virtual clock's starting time. Default DefaultStart.
	Start time.Time
	// Timeout bounds, in real time, each wait of the kit (AwaitStatus,
	// Await, Advance). Default 30s, or less if the test's deadline is
	// nearer.
	Timeout time.Duration
	// Hooks also hear the node's hook events (they are not needed for
	// anything the kit does).
	Hooks actor.Hooks
	// Logger is the node's logger. Default: discard.
	Logger *slog.Logger
	// ManualTime turns off the kit's time skipping: the clock moves only
	// by Advance. For tests that must act (send a message, cancel) at a
	// virtual time of their choosing while timers are pending.
	ManualTime bool
	// Configure, when set, may change the node's Config before it starts
	// (after the kit filled it in); it must keep Store, Clock, Hooks and
	// ReplaceActivity.
	Configure func(*actor.Config)
}

// Env is a node for one test: a System on a SQLite file in the test's
// temporary directory, with a virtual clock. Create it with New; it is
// stopped when the test ends.
type Env struct {
	t     testing.TB
	opts  Options
	clock *Clock
	base  *sqlite.Store
	node  string
	ctx   context.Context

	mu    sync.Mutex
	sys   *actor.System
	st    *crashStore
	mocks map[string]func(context.Context, any) (any, error)
	// runs counts, per instance and activity ID, the attempts started by
	// nodes that were alive (see Executions), by attempt number.
	runs map[execKey]map[int]int
	// restarts counts Restart calls.
	restarts int

	// crashAt, when positive, crashes the node right after its crashAt-th
	// commit (see CrashEverywhere); crashed is set once it did.
	crashAt int64
	commits atomic.Int64
	crashed atomic.Bool
}

type execKey struct{ instance, id string }

// New starts a node for t on a fresh SQLite file, with a virtual clock
// (see Clock). It is stopped, and its store closed, when t ends.
func New(t testing.TB, opts Options) *Env {
	t.Helper()
	e := newEnv(t, opts, 0)
	e.start()
	return e
}

func newEnv(t testing.TB, opts Options, crashAt int64) *Env {
	t.Helper()
	if len(opts.Workflows) == 0 {
		t.Fatal("norntest: Options.Workflows is empty")
	}
	if opts.Start.IsZero() {
		opts.Start = DefaultStart
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	path := filepath.Join(t.TempDir(), "norn.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{Synchronous: sqlite.Normal})
	if err != nil {
		t.Fatalf("norntest: open %s: %v", path, err)
	}
	e := &Env{t: t, opts: opts, clock: NewClock(opts.Start), base: st, node: "norntest", ctx: ctx,
		mocks: map[string]func(context.Context, any) (any, error){}, runs: map[execKey]map[int]int{}, crashAt: crashAt}
	t.Cleanup(func() {
		e.stop()
		if err := st.Close(); err != nil {
			t.Errorf("norntest: close store: %v", err)
		}
	})
	return e
}

// start starts a node on the store (the first one, or after a crash).
func (e *Env) start() {
	e.t.Helper()
	st := &crashStore{Store: e.base, env: e}
	cfg := actor.Config{
		Store: st, Workflows: e.opts.Workflows, Errors: e.opts.Errors, Codec: e.opts.Codec,
		NodeID: e.node, Logger: e.opts.Logger, Clock: e.clock,
		Hooks: hooks{e: e, st: st}, ReplaceActivity: e.replacement,
		// All timers in memory at once, and no early activation: the
		// virtual clock jumps far ahead at once.
		TimerHorizon: 50 * 365 * 24 * time.Hour, TimerWarmUp: -1,
	}
	if e.opts.Configure != nil {
		e.opts.Configure(&cfg)
	}
	sys, err := actor.Start(e.ctx, cfg)
	if err != nil {
		e.t.Fatalf("norntest: start node: %v", err)
	}
	e.mu.Lock()
	e.sys, e.st = sys, st
	e.mu.Unlock()
}

// stop stops the current node.
func (e *Env) stop() {
	e.mu.Lock()
	sys := e.sys
	e.sys = nil
	e.mu.Unlock()
	if sys == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sys.Stop(ctx); err != nil && !e.crashedNode() {
		e.t.Errorf("norntest: stop node: %v", err)
	}
}

func (e *Env) crashedNode() bool { return e.crashed.Load() }

// System is the running node: spawn, send and read through it.
func (e *Env) System() *actor.System {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sys
}

// Ctx is a context that ends with the test.
func (e *Env) Ctx() context.Context { return e.ctx }

// Clock is the node's virtual clock.
func (e *Env) Clock() *Clock { return e.clock }

// Now is the virtual time.
func (e *Env) Now() time.Time { return e.clock.Now() }

// Restart drops the node as a crash would (nothing it holds in memory
// survives, and it writes nothing more), keeps the store, and starts a new
// node on it: instances carry on from their history.
func (e *Env) Restart() {
	e.t.Helper()
	e.crash()
	e.stop()
	e.crashed.Store(false)
	e.mu.Lock()
	e.restarts++
	e.mu.Unlock()
	e.start()
}

// crash makes the current node's store refuse everything from now on.
func (e *Env) crash() {
	e.mu.Lock()
	st := e.st
	e.mu.Unlock()
	if st != nil {
		st.dead.Store(true)
	}
	e.crashed.Store(true)
}

// ReplaceActivity makes attempts of the activity named name run fn
// instead of the activity's function, from now on. fn receives the call's
// input (the activity's In type) and must return its Out type (or nil and
// an error). Mock is the typed form.
func (e *Env) ReplaceActivity(name string, fn func(ctx context.Context, in any) (any, error)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mocks[name] = fn
}

// Mock makes attempts of activity def run fn instead of its function.
func Mock[In, Out any](e *Env, def *actor.ActivityDef[In, Out], fn func(context.Context, In) (Out, error)) {
	e.ReplaceActivity(def.Name(), func(ctx context.Context, in any) (any, error) { return fn(ctx, in.(In)) })
}

func (e *Env) replacement(name string) func(context.Context, any) (any, error) {
	e.mu.Lock()
	fn := e.mocks[name]
	e.mu.Unlock()
	if fn == nil {
		return nil
	}
	return func(ctx context.Context, in any) (any, error) {
		// A crashed node's attempts do not reach the replacement: the
		// process is gone.
		if e.crashed.Load() {
			return nil, errCrashed
		}
		return fn(ctx, in)
	}
}

// Executions is how many attempts of activity id of instance pid were
// started by a live node (a crashed node's are not counted).
func (e *Env) Executions(pid actor.PID, id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, c := range e.runs[execKey{string(pid), id}] {
		n += c
	}
	return n
}

// hooks counts activity attempts and passes events on to Options.Hooks.
type hooks struct {
	e  *Env
	st *crashStore
}

func (h hooks) Observe(ctx context.Context, ev actor.HookEvent) {
	if ev.Kind == actor.HookActivityStarted && !h.st.dead.Load() {
		h.e.mu.Lock()
		k := execKey{ev.Instance, ev.Ref}
		if h.e.runs[k] == nil {
			h.e.runs[k] = map[int]int{}
		}
		h.e.runs[k][ev.Attempt]++
		h.e.mu.Unlock()
	}
	if h.e.opts.Hooks != nil {
		h.e.opts.Hooks.Observe(ctx, ev)
	}
}

// Advance moves the virtual clock d ahead, one due time after another:
// before each, it waits until the node is idle (see actor.System.Idle), so
// that what the earlier due time set off has been done.
func (e *Env) Advance(d time.Duration) {
	e.t.Helper()
	if d < 0 {
		e.t.Fatalf("norntest: Advance(%v): the clock does not go back", d)
	}
	target := e.clock.Now().Add(d)
	deadline := e.deadline()
	for {
		e.awaitIdle(deadline, fmt.Sprintf("Advance(%v)", d))
		next, ok := e.clock.next()
		if !ok || next.After(target) {
			break
		}
		e.clock.moveTo(next)
	}
	e.clock.moveTo(target)
	e.awaitIdle(deadline, fmt.Sprintf("Advance(%v)", d))
}

// deadline is when a wait of the kit gives up.
func (e *Env) deadline() time.Time {
	d := time.Now().Add(e.opts.Timeout)
	if dt, ok := e.t.(interface{ Deadline() (time.Time, bool) }); ok {
		if td, ok := dt.Deadline(); ok && td.Add(-time.Second).Before(d) {
			d = td.Add(-time.Second)
		}
	}
	return d
}

// idle reports whether the node has nothing in hand and the clock no
// call under way.
func (e *Env) idle() bool {
	sys := e.System()
	return sys != nil && e.clock.settled() && sys.Idle()
}

// poll is how often the kit looks again while it waits.
const poll = time.Millisecond

func (e *Env) awaitIdle(deadline time.Time, what string) {
	e.t.Helper()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for !e.idle() {
		if time.Now().After(deadline) {
			e.t.Fatalf("norntest: %s: the node is still busy after %v (an activity that does not return?)", what, e.opts.Timeout)
		}
		select {
		case <-tick.C:
		case <-e.ctx.Done():
			e.t.Fatalf("norntest: %s: the test ended", what)
		}
	}
}

// waitFor polls cond until it holds. Meanwhile, whenever the node is idle,
// it moves the clock to the next due time: a workflow waiting 48 hours
// for a timer is done in milliseconds.
func (e *Env) waitFor(what string, cond func() (bool, string)) {
	e.t.Helper()
	deadline := e.deadline()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		// Idle is looked at before cond: an idle node changes nothing, so
		// cond then reads the state the skip would start from.
		idle := !e.opts.ManualTime && e.idle()
		ok, state := cond()
		if ok {
			return
		}
		if idle {
			if next, ok := e.clock.next(); ok {
				e.clock.moveTo(next)
				continue
			}
		}
		if time.Now().After(deadline) {
			why := "the node is busy"
			switch {
			case e.idle() && e.opts.ManualTime && e.clock.Pending() > 0:
				why = "the node is idle and waits for the clock, which moves only by Advance (Options.ManualTime)"
			case e.idle():
				why = "the node is idle and nothing is due on the clock: it waits for something from outside (a message, a cancel)"
			}
			e.t.Fatalf("norntest: %s: not reached after %v of real time (virtual time %s): %s; %s",
				what, e.opts.Timeout, e.clock.Now().Format(time.RFC3339), state, why)
		}
		select {
		case <-tick.C:
		case <-e.ctx.Done():
			e.t.Fatalf("norntest: %s: the test ended", what)
		}
	}
}

// AwaitStatus waits until instance pid has one of the statuses (moving the
// virtual clock whenever the node is idle) and returns it. It fails the
// test if the instance ends with another status, or the wait times out.
func (e *Env) AwaitStatus(pid actor.PID, want ...actor.Status) actor.Instance {
	e.t.Helper()
	if len(want) == 0 {
		e.t.Fatal("norntest: AwaitStatus needs a status")
	}
	var inst actor.Instance
	names := make([]string, len(want))
	for i, s := range want {
		names[i] = string(s)
	}
	what := fmt.Sprintf("instance %s to be %s", pid, strings.Join(names, " or "))
	e.waitFor(what, func() (bool, string) {
		var err error
		inst, err = e.System().Instance(e.ctx, pid)
		if err != nil {
			e.t.Fatalf("norntest: %s: %v", what, err)
		}
		for _, s := range want {
			if inst.Status == s {
				return true, ""
			}
		}
		if inst.Status.Terminal() {
			e.t.Fatalf("norntest: %s: it ended %s (%s)", what, inst.Status, inst.Error)
		}
		return false, "it is " + string(inst.Status)
	})
	return inst
}

// AwaitReceive waits until instance pid is parked in a receive that takes
// messages stored under typ (its name or an alias; "" takes any receive),
// moving the virtual clock whenever the node is idle, and returns that
// wait: its channel and sender filters, its timeout's due time. It fails
// the test, saying what the instance waits for instead, if the instance
// ends or the wait times out.
func (e *Env) AwaitReceive(pid actor.PID, typ string) actor.Wait {
	e.t.Helper()
	what := fmt.Sprintf("instance %s to wait for a message of type %q", pid, typ)
	if typ == "" {
		what = fmt.Sprintf("instance %s to wait for a message", pid)
	}
	var got actor.Wait
	e.waitFor(what, func() (bool, string) {
		inst, err := e.System().Instance(e.ctx, pid)
		if err != nil {
			e.t.Fatalf("norntest: %s: %v", what, err)
		}
		if inst.Status.Terminal() {
			e.t.Fatalf("norntest: %s: it ended %s (%s)", what, inst.Status, inst.Error)
		}
		var waits []string
		for _, w := range inst.Waits {
			if w.Kind == actor.WaitReceive && (typ == "" || len(w.Types) == 0 || slices.Contains(w.Types, typ)) {
				got = w
				return true, ""
			}
			what, detail := w.Describe()
			if detail != "" {
				what += " (" + detail + ")"
			}
			waits = append(waits, what)
		}
		if len(waits) == 0 {
			return false, "it is " + string(inst.Status) + " and waits for nothing"
		}
		return false, "it waits for " + strings.Join(waits, "; ")
	})
	return got
}

// AwaitEnd waits until instance pid has ended (moving the virtual clock
// whenever the node is idle) and returns it.
func (e *Env) AwaitEnd(pid actor.PID) actor.Instance {
	e.t.Helper()
	var inst actor.Instance
	e.waitFor(fmt.Sprintf("instance %s to end", pid), func() (bool, string) {
		var err error
		inst, err = e.System().Instance(e.ctx, pid)
		if err != nil {
			e.t.Fatalf("norntest: instance %s: %v", pid, err)
		}
		return inst.Status.Terminal(), "it is " + string(inst.Status)
	})
	return inst
}

// Await waits until instance pid of wf has ended (moving the virtual clock
// whenever the node is idle) and returns its result, as actor.Await does.
func Await[In, Out any](e *Env, wf *actor.WorkflowDef[In, Out], pid actor.PID) (Out, error) {
	e.t.Helper()
	e.AwaitEnd(pid)
	return actor.Await(e.ctx, e.System(), wf, pid)
}

// Spawn starts an instance of wf on the env's node, failing the test if it
// cannot.
func Spawn[In, Out any](e *Env, wf *actor.WorkflowDef[In, Out], in In, opts ...actor.SpawnOption) actor.PID {
	e.t.Helper()
	pid, err := actor.Spawn(e.ctx, e.System(), wf, in, opts...)
	if err != nil {
		e.t.Fatalf("norntest: spawn %s: %v", wf.Name(), err)
	}
	return pid
}

// History is instance pid's history, failing the test if it cannot be read.
func (e *Env) History(pid actor.PID) []actor.HistoryEvent {
	e.t.Helper()
	h, err := e.System().History(e.ctx, pid)
	if err != nil {
		e.t.Fatalf("norntest: history of %s: %v", pid, err)
	}
	return h
}

// HistoryKinds is the kinds of instance pid's history events, in order: a
// compact thing to assert on ("started activity timer timer_fired ...").
func (e *Env) HistoryKinds(pid actor.PID) []string {
	e.t.Helper()
	h := e.History(pid)
	out := make([]string, len(h))
	for i, ev := range h {
		out[i] = string(ev.Kind)
	}
	return out
}

// executions is a sorted copy of the attempt counts.
func (e *Env) executions() map[execKey]map[int]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[execKey]map[int]int, len(e.runs))
	for k, m := range e.runs {
		c := make(map[int]int, len(m))
		for n, v := range m {
			c[n] = v
		}
		out[k] = c
	}
	return out
}

func sortedKeys(m map[execKey]map[int]int) []execKey {
	ks := make([]execKey, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].instance != ks[j].instance {
			return ks[i].instance < ks[j].instance
		}
		return ks[i].id < ks[j].id
	})
	return ks
}

// errCrashed is what a crashed node's store answers.
var errCrashed = errors.New("norntest: the node crashed")

// crashStore is the store as one node sees it: once dead (the node
// crashed) every write fails and no notification reaches it. With
// Env.crashAt set it dies right after that many commits.
type crashStore struct {
	persistence.Store
	env  *Env
	dead atomic.Bool
}

func (s *crashStore) check() error {
	if s.dead.Load() {
		return errCrashed
	}
	return nil
}

// Apply implements persistence.Store.
func (s *crashStore) Apply(ctx context.Context, step persistence.Step) (persistence.StepResult, error) {
	if err := s.check(); err != nil {
		return persistence.StepResult{}, err
	}
	res, err := s.Store.Apply(ctx, step)
	if err == nil && s.env.commits.Add(1) == s.env.crashAt {
		s.dead.Store(true)
		s.env.crashed.Store(true)
	}
	return res, err
}

// AcquireLease implements persistence.Store.
func (s *crashStore) AcquireLease(ctx context.Context, id, owner string, ttl time.Duration) (persistence.Instance, error) {
	if err := s.check(); err != nil {
		return persistence.Instance{}, err
	}
	return s.Store.AcquireLease(ctx, id, owner, ttl)
}

// RenewLeases implements persistence.Store.
func (s *crashStore) RenewLeases(ctx context.Context, owner string, ttl time.Duration) ([]string, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.Store.RenewLeases(ctx, owner, ttl)
}

// ReleaseLeases implements persistence.Store.
func (s *crashStore) ReleaseLeases(ctx context.Context, owner string) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.Store.ReleaseLeases(ctx, owner)
}

// RequestCancel implements persistence.Store.
func (s *crashStore) RequestCancel(ctx context.Context, id, reason string) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.Store.RequestCancel(ctx, id, reason)
}

// RequestWake implements persistence.Store.
func (s *crashStore) RequestWake(ctx context.Context, ids []string) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.Store.RequestWake(ctx, ids)
}

// ClaimOutbox implements persistence.Store.
func (s *crashStore) ClaimOutbox(ctx context.Context, owner string, now time.Time, ttl time.Duration, limit int) ([]persistence.OutboxRecord, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.Store.ClaimOutbox(ctx, owner, now, ttl, limit)
}

// FinishOutbox implements persistence.Store.
func (s *crashStore) FinishOutbox(ctx context.Context, id, owner string, status persistence.OutboxStatus, next time.Time, errText string) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.Store.FinishOutbox(ctx, id, owner, status, next, errText)
}

// Listen implements persistence.Store: a crashed node hears nothing more.
func (s *crashStore) Listen(ctx context.Context, fn func(ids []string)) error {
	return s.Store.Listen(ctx, func(ids []string) {
		if !s.dead.Load() {
			fn(ids)
		}
	})
}
