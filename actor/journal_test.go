package actor_test

// Regression tests for the "one journal" runtime: every durable call records
// its outcome and returns the value decoded from the recorded event, so the
// first run of a workflow sees exactly what every replay sees. Most tests
// record what the workflow observed on each execution (first run and the
// replays after a restart) and compare the executions with each other and
// with the value JSON gives back.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
	"github.com/nornlabs/norn/supervisor"
)

// seen is what workflow code observed, one entry per observation, across
// every execution (first run and replays). Workflow code writes to it
// outside history on purpose.
type seen struct {
	mu    sync.Mutex
	lines []string
}

func (s *seen) add(v string) {
	s.mu.Lock()
	s.lines = append(s.lines, v)
	s.mu.Unlock()
}

func (s *seen) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...)
}

func (s *seen) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lines)
}

// waitLen waits until at least n observations were made.
func (s *seen) waitLen(t *testing.T, n int, what string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, func() bool { return s.len() >= n })
}

// journalNode is a node on a SQLite file that the test can restart.
type journalNode struct {
	t    *testing.T
	path string
	st   *sqlite.Store
	sys  *actor.System
	cfg  actor.Config
}

// startJournalNode starts a node on a fresh SQLite file with cfg (its Store
// is filled in) under a fixed NodeID, so that a restarted node takes its
// instances back at once.
func startJournalNode(t *testing.T, cfg actor.Config) *journalNode {
	t.Helper()
	n := &journalNode{t: t, path: testutil.SQLitePath(t)}
	n.st = testutil.OpenSQLite(t, n.path)
	if cfg.NodeID == "" {
		cfg.NodeID = "journal-node"
	}
	cfg.Store = n.st
	n.cfg = cfg
	n.sys = testutil.StartNode(t, cfg)
	return n
}

// restart stops the node and starts a new one on the same file, as a
// restarted process would (every activation replays its history).
func (n *journalNode) restart() {
	n.t.Helper()
	n.sys, n.st = restartNode(n.t, n.sys, n.st, n.path, n.cfg)
	n.cfg.Store = n.st
}

// restartWith is restart with other workflow code (a deploy).
func (n *journalNode) restartWith(defs ...actor.Definition) {
	n.t.Helper()
	n.cfg.Workflows = defs
	n.restart()
}

func (n *journalNode) inspect(pid actor.PID) actor.InstanceInfo {
	n.t.Helper()
	return inspect(n.t, n.sys, pid)
}

func spawnOK[In, Out any](t *testing.T, sys *actor.System, wf *actor.WorkflowDef[In, Out], in In, opts ...actor.SpawnOption) actor.PID {
	t.Helper()
	pid, err := actor.Spawn(context.Background(), sys, wf, in, opts...)
	if err != nil {
		t.Fatalf("spawn %s: %v", wf.Name(), err)
	}
	return pid
}

func sendOK(t *testing.T, sys *actor.System, pid actor.PID, msg any) {
	t.Helper()
	if err := sys.Send(context.Background(), pid, msg); err != nil {
		t.Fatalf("send to %s: %v", pid, err)
	}
}

// allEqual fails unless got has at least min entries, all equal to want.
func allEqual(t *testing.T, what string, got []string, min int, want string) {
	t.Helper()
	if len(got) < min {
		t.Fatalf("%s: %d observations %q, want at least %d", what, len(got), got, min)
	}
	for i, g := range got {
		if g != want {
			t.Fatalf("%s: observation %d (of %d) is\n  %s\nwant\n  %s\n(all: %q)", what, i, len(got), g, want, got)
		}
	}
}

// ---- 1. the first run is a replay ----

// jLossy is an activity result JSON does not keep as it is: a json:"-"
// field, an unexported field, a time in a named zone, an int64 in an
// interface field.
type jLossy struct {
	Name   string
	Hidden string `json:"-"`
	secret string
	At     time.Time
	Any    any
}

func (l jLossy) describe() string {
	return fmt.Sprintf("name=%s hidden=%q secret=%q at=%s loc=%q any=%T(%v)", l.Name, l.Hidden, l.secret,
		l.At.Format(time.RFC3339Nano), l.At.Location().String(), l.Any, l.Any)
}

func makeLossy(name string) jLossy {
	return jLossy{Name: name, Hidden: "hidden", secret: "secret",
		At:  time.Date(2026, 3, 4, 5, 6, 7, 8, time.FixedZone("CEST", 2*3600)),
		Any: int64(1<<60 + 1)}
}

// jsonRoundTrip is what a value looks like after encoding and decoding.
func jsonRoundTrip[T any](t *testing.T, v T) T {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFirstRunSeesRecordedValue: the workflow sees on its first run exactly
// the value it sees after a restart — the one decoded from the recorded
// event — and so does the activity's compensation.
func TestFirstRunSeesRecordedValue(t *testing.T) {
	var observed, compensated seen
	produce := actor.Activity("produce", func(ctx context.Context, name string) (jLossy, error) {
		return makeLossy(name), nil
	}, actor.WithCompensation(func(ctx context.Context, name string, out jLossy) error {
		compensated.add(out.describe())
		return nil
	}), actor.WithRetry(supervisor.NoRetry()))
	fail := actor.Activity("fail-after", func(ctx context.Context, _ int) (int, error) {
		return 0, supervisor.Terminal(errors.New("out of luck"))
	})
	wf := actor.Workflow("first-run", func(ctx *actor.Context, name string) (string, error) {
		v, err := produce.Run(ctx, name)
		if err != nil {
			return "", err
		}
		observed.add(v.describe())
		if _, err := actor.Receive[string](ctx); err != nil {
			return "", err
		}
		_, err = fail.Run(ctx, 0)
		return v.describe(), err
	})
	n := startJournalNode(t, actor.Config{Workflows: actor.Register(wf)})
	pid := spawnOK(t, n.sys, wf, "x")
	observed.waitLen(t, 1, "first run observed the activity result")
	n.restart()
	sendOK(t, n.sys, pid, "go")
	ctx := testutil.Ctx(t, 30*time.Second)
	if _, err := actor.Await(ctx, n.sys, wf, pid); err == nil || !strings.Contains(err.Error(), "out of luck") {
		t.Fatalf("Await = %v, want the failure that triggers the compensation", err)
	}

	orig := makeLossy("x")
	want := jsonRoundTrip(t, orig).describe()
	if want == orig.describe() {
		t.Fatalf("the value round-trips through JSON unchanged (%s): the test proves nothing", want)
	}
	allEqual(t, "workflow's view (first run, then replay)", observed.all(), 2, want)
	allEqual(t, "compensation's input", compensated.all(), 1, want)
	// And it is what history holds.
	for _, e := range n.inspect(pid).History {
		if e.Kind == actor.EventActivity && e.Name == "produce" {
			var rec jLossy
			if err := json.Unmarshal(e.Payload, &rec); err != nil {
				t.Fatal(err)
			}
			if rec.describe() != want {
				t.Fatalf("recorded %s, want %s", rec.describe(), want)
			}
		}
	}
}

// ---- 2. activity errors survive replay ----

type jMyErr struct{ Code int }

func (e *jMyErr) Error() string { return fmt.Sprintf("my error %d", e.Code) }

var errJOutOfStock = errors.New("out of stock")

func jDescribeErr(err error) string {
	var (
		ae *actor.ActivityError
		me *jMyErr
		rx *supervisor.RetryExhaustedError
	)
	s := fmt.Sprintf("activityError=%v", errors.As(err, &ae))
	if ae != nil {
		s += fmt.Sprintf(" terminal=%v attempts=%d code=%q", ae.Terminal, ae.Attempts, ae.Code)
	}
	if errors.As(err, &me) {
		s += fmt.Sprintf(" my=%d", me.Code)
	}
	s += fmt.Sprintf(" outOfStock=%v", errors.Is(err, errJOutOfStock))
	if errors.As(err, &rx) {
		s += fmt.Sprintf(" exhausted=%d", rx.Attempts)
	}
	return s
}

// TestActivityErrorSurvivesReplay: Terminal, a registered error type, a
// registered sentinel and RetryExhaustedError look the same to the workflow
// on its first run and after a restart.
func TestActivityErrorSurvivesReplay(t *testing.T) {
	var observed seen
	typed := actor.Activity("charge", func(ctx context.Context, _ int) (int, error) {
		return 0, supervisor.Terminal(fmt.Errorf("charging: %w", &jMyErr{Code: 42}))
	})
	sentinel := actor.Activity("reserve", func(ctx context.Context, _ int) (int, error) {
		return 0, supervisor.Terminal(fmt.Errorf("reserve: %w", errJOutOfStock))
	})
	flaky := actor.Activity("down", func(ctx context.Context, _ int) (int, error) {
		return 0, errors.New("service down")
	}, actor.WithRetry(supervisor.Exponential(time.Millisecond, 1, time.Millisecond, 3)))
	wf := actor.Workflow("errors-replay", func(ctx *actor.Context, _ int) (string, error) {
		_, e1 := typed.Run(ctx, 1)
		_, e2 := sentinel.Run(ctx, 2)
		_, e3 := flaky.Run(ctx, 3)
		obs := jDescribeErr(e1) + " | " + jDescribeErr(e2) + " | " + jDescribeErr(e3)
		observed.add(obs)
		if _, err := actor.Receive[string](ctx); err != nil {
			return "", err
		}
		// The instance fails with the typed error: Await sees it too.
		return obs, e1
	})
	n := startJournalNode(t, actor.Config{Workflows: actor.Register(wf),
		Errors: []actor.ErrorDef{actor.ErrorType[*jMyErr]("my"), actor.Sentinel("out-of-stock", errJOutOfStock)}})
	pid := spawnOK(t, n.sys, wf, 0)
	observed.waitLen(t, 1, "first run observed the errors")
	n.restart()
	sendOK(t, n.sys, pid, "go")
	_, err := actor.Await(testutil.Ctx(t, 30*time.Second), n.sys, wf, pid)

	want := `activityError=true terminal=true attempts=1 code="my" my=42 outOfStock=false` +
		` | activityError=true terminal=true attempts=1 code="out-of-stock" outOfStock=true` +
		` | activityError=true terminal=false attempts=3 code="" outOfStock=false exhausted=3`
	allEqual(t, "errors seen by the workflow (first run, then replay)", observed.all(), 2, want)
	var me *jMyErr
	var ae *actor.ActivityError
	if !errors.As(err, &me) || me.Code != 42 || !errors.As(err, &ae) || !ae.Terminal {
		t.Fatalf("Await = %v (%s), want the recorded *jMyErr{42} in a terminal ActivityError", err, jDescribeErr(err))
	}
}

// ---- 3. typed receive ----

type jApproval struct{ By string }

type jPing struct{ N int }

// jNamed and jNamedV2 are stored and matched under one chosen name.
type jNamed struct{ ID string }

func (jNamed) MessageType() string { return "orders.named" }

type jNamedV2 struct {
	ID    string
	Extra int
}

func (jNamedV2) MessageType() string { return "orders.named" }

// TestReceiveByType: Receive[T] takes only messages of type T and leaves the
// others in the mailbox, in order; Receive[[]byte] takes any type and
// reports it; a MessageType method names the type.
func TestReceiveByType(t *testing.T) {
	var observed seen
	wf := actor.Workflow("typed-receive", func(ctx *actor.Context, _ int) (string, error) {
		if err := ctx.Send(ctx.PID(), jPing{N: 1}); err != nil {
			return "", err
		}
		// Only a Ping waits: a Receive[Approval] must not take it.
		_, err := actor.Receive[jApproval](ctx, mailbox.Timeout(30*time.Millisecond))
		observed.add(fmt.Sprintf("approval while a ping waits: timeout=%v", errors.Is(err, actor.ErrTimeout)))
		if _, err := actor.Receive[string](ctx, mailbox.OnChannel("go")); err != nil {
			return "", err
		}
		a, err := actor.Receive[jApproval](ctx)
		if err != nil {
			return "", err
		}
		observed.add("approval by " + a.Value.By)
		p, err := actor.Receive[jPing](ctx)
		if err != nil {
			return "", err
		}
		observed.add(fmt.Sprintf("ping %d type %s", p.Value.N, p.Type))
		if err := ctx.Send(ctx.PID(), jNamedV2{ID: "n2", Extra: 5}); err != nil {
			return "", err
		}
		raw, err := actor.Receive[[]byte](ctx)
		if err != nil {
			return "", err
		}
		observed.add(fmt.Sprintf("raw type %s payload %s", raw.Type, raw.Value))
		// A Ping first, then a message named like jNamed: Receive[jNamed]
		// skips the Ping and matches the other by its name.
		if err := ctx.Send(ctx.PID(), jPing{N: 2}); err != nil {
			return "", err
		}
		if err := ctx.Send(ctx.PID(), jNamedV2{ID: "n3", Extra: 6}); err != nil {
			return "", err
		}
		nm, err := actor.Receive[jNamed](ctx)
		if err != nil {
			return "", err
		}
		observed.add(fmt.Sprintf("named %s type %s", nm.Value.ID, nm.Type))
		p2, err := actor.Receive[jPing](ctx)
		if err != nil {
			return "", err
		}
		observed.add(fmt.Sprintf("ping %d", p2.Value.N))
		return strings.Join(observed.all(), "; "), nil
	})
	n := startJournalNode(t, actor.Config{Workflows: actor.Register(wf)})
	pid := spawnOK(t, n.sys, wf, 0)
	waitHistory(t, n.sys, pid, "the approval receive timed out", func(h []actor.HistoryEvent) bool {
		return countKind(h, actor.EventReceiveTimeout) == 1
	})
	if d := n.inspect(pid).MailboxDepth; d != 1 {
		t.Fatalf("mailbox depth %d after the approval receive timed out, want 1 (the ping stays)", d)
	}
	if err := n.sys.SendOn(context.Background(), "go", pid, "go"); err != nil {
		t.Fatal(err)
	}
	sendOK(t, n.sys, pid, jApproval{By: "alice"})
	got, err := actor.Await(testutil.Ctx(t, 30*time.Second), n.sys, wf, pid)
	if err != nil {
		t.Fatal(err)
	}
	want := "approval while a ping waits: timeout=true; approval by alice; ping 1 type actor_test.jPing; " +
		`raw type orders.named payload {"ID":"n2","Extra":5}; named n3 type orders.named; ping 2`
	if got != want {
		t.Fatalf("workflow saw\n  %s\nwant\n  %s", got, want)
	}
}

// TestSystemSendKeepsType: a message sent from outside any workflow with
// System.Send is stored under its type too, so that Receive[Approval] does
// not take a Ping.
func TestSystemSendKeepsType(t *testing.T) {
	g := newGate("typed-gate")
	wf := actor.Workflow("typed-from-outside", func(ctx *actor.Context, _ int) (string, error) {
		if _, err := g.act.Run(ctx, 0); err != nil {
			return "", err
		}
		a, err := actor.Receive[jApproval](ctx, mailbox.Timeout(30*time.Millisecond))
		if !errors.Is(err, actor.ErrTimeout) {
			return "", fmt.Errorf("Receive[Approval] with only a Ping waiting = %+v, %v; want ErrTimeout", a, err)
		}
		p, err := actor.Receive[jPing](ctx)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("ping %d type %s", p.Value.N, p.Type), nil
	})
	n := startJournalNode(t, actor.Config{Workflows: actor.Register(wf)})
	pid := spawnOK(t, n.sys, wf, 0)
	g.waitEntered(t)
	sendOK(t, n.sys, pid, jPing{N: 7})
	g.open()
	got, err := actor.Await(testutil.Ctx(t, 30*time.Second), n.sys, wf, pid)
	if err != nil || got != "ping 7 type actor_test.jPing" {
		t.Fatalf("Await = %q, %v", got, err)
	}
}

// ---- 4. a linked child's failure compensates the parent ----

// TestLinkedExitCompensates: a parent that does not trap exits fails when its
// linked child fails, and its saga compensations run.
func TestLinkedExitCompensates(t *testing.T) {
	var undone seen
	book := actor.Activity("book-room", func(ctx context.Context, trip string) (string, error) {
		return "room-for-" + trip, nil
	}, actor.WithCompensation(func(ctx context.Context, trip, booked string) error {
		undone.add(booked)
		return nil
	}), actor.WithRetry(supervisor.NoRetry()))
	child := actor.Workflow("doomed-child", func(ctx *actor.Context, _ int) (int, error) {
		return 0, errors.New("child broke")
	})
	parent := actor.Workflow("compensating-parent", func(ctx *actor.Context, trip string) (string, error) {
		booked, err := book.Run(ctx, trip)
		if err != nil {
			return "", err
		}
		if _, err := actor.SpawnChild(ctx, child, 1); err != nil {
			return "", err
		}
		_, err = actor.Receive[string](ctx, mailbox.OnChannel("never"))
		return booked, err
	})
	n := startJournalNode(t, actor.Config{Workflows: actor.Register(child, parent)})
	pid := spawnOK(t, n.sys, parent, "rome")
	_, err := actor.Await(testutil.Ctx(t, 30*time.Second), n.sys, parent, pid)
	var we *actor.WorkflowError
	if !errors.As(err, &we) || !strings.Contains(we.Message, "child broke") {
		t.Fatalf("Await = %v, want the linked child's failure", err)
	}
	if got := undone.all(); len(got) != 1 || got[0] != "room-for-rome" {
		t.Fatalf("compensations ran for %q, want [room-for-rome]", got)
	}
	info := n.inspect(pid)
	if info.Status != persistence.StatusFailed || countKind(info.History, actor.EventCompensating) != 1 ||
		countKind(info.History, actor.EventCompensation) != 1 || countKind(info.History, actor.EventLinkedExit) != 1 {
		t.Fatalf("parent %s, history %s", info.Status, kindsOf(info.History))
	}
}

// ---- 5 and 7. replay catches changed code ----

// TestReplayCatchesChangedInput: code that now calls X("new") where history
// recorded X("a") ends the instance with a NonDeterminismError instead of
// handing the recorded results to the wrong calls.
func TestReplayCatchesChangedInput(t *testing.T) {
	var ran seen
	x := actor.Activity("X", func(ctx context.Context, in string) (string, error) {
		ran.add(in)
		return "result-of-" + in, nil
	})
	v1 := actor.Workflow("changed-input", func(ctx *actor.Context, _ int) (string, error) {
		a, err := x.Run(ctx, "a")
		if err != nil {
			return "", err
		}
		b, err := x.Run(ctx, "b")
		if err != nil {
			return "", err
		}
		_, err = actor.Receive[string](ctx)
		return a + "," + b, err
	})
	v2 := actor.Workflow("changed-input", func(ctx *actor.Context, _ int) (string, error) {
		var out []string
		for _, in := range []string{"new", "a", "b"} {
			r, err := x.Run(ctx, in)
			if err != nil {
				return "", err
			}
			out = append(out, r)
		}
		_, err := actor.Receive[string](ctx)
		return strings.Join(out, ","), err
	})
	n := startJournalNode(t, actor.Config{Workflows: actor.Register(v1)})
	pid := spawnOK(t, n.sys, v1, 0)
	waitHistory(t, n.sys, pid, "both calls recorded", func(h []actor.HistoryEvent) bool {
		return countKind(h, actor.EventActivity) == 2
	})
	n.restartWith(v2)
	sendOK(t, n.sys, pid, "go")
	got, err := actor.Await(testutil.Ctx(t, 30*time.Second), n.sys, v2, pid)
	var nd *actor.NonDeterminismError
	if !errors.As(err, &nd) {
		t.Fatalf("Await = %q, %v; want a *actor.NonDeterminismError", got, err)
	}
	if nd.Seq != 1 || !strings.Contains(nd.Expected, "X") {
		t.Fatalf("NonDeterminismError = %+v, want it at event 1 (the recorded X call)", nd)
	}
	if r := ran.all(); strings.Join(r, ",") != "a,b" {
		t.Fatalf("activity ran with %q, want only the recorded a,b", r)
	}
	info := n.inspect(pid)
	if info.Status != persistence.StatusFailed || info.Restarts != 0 {
		t.Fatalf("instance %s after %d restarts, want failed without restarts", info.Status, info.Restarts)
	}
}

// TestNonDeterminismErrorAs: errors.As finds the *actor.NonDeterminismError
// in Await's error and in Inspect's Failure when code calls something else
// than history recorded.
func TestNonDeterminismErrorAs(t *testing.T) {
	x := actor.Activity("x-instead", func(ctx context.Context, n int) (int, error) { return n, nil })
	v1 := actor.Workflow("changed-kind", func(ctx *actor.Context, _ int) (int, error) {
		ctx.Now()
		_, err := actor.Receive[string](ctx)
		return 1, err
	})
	v2 := actor.Workflow("changed-kind", func(ctx *actor.Context, _ int) (int, error) {
		if _, err := x.Run(ctx, 1); err != nil {
			return 0, err
		}
		_, err := actor.Receive[string](ctx)
		return 2, err
	})
	n := startJournalNode(t, actor.Config{Workflows: actor.Register(v1)})
	pid := spawnOK(t, n.sys, v1, 0)
	waitHistory(t, n.sys, pid, "now recorded", func(h []actor.HistoryEvent) bool { return countKind(h, actor.EventNow) == 1 })
	n.restartWith(v2)
	sendOK(t, n.sys, pid, "go")
	_, err := actor.Await(testutil.Ctx(t, 30*time.Second), n.sys, v2, pid)
	var nd *actor.NonDeterminismError
	if !errors.As(err, &nd) || nd.Seq != 1 || !strings.HasPrefix(nd.Expected, actor.EventNow) {
		t.Fatalf("Await = %v; want a *actor.NonDeterminismError at event 1 (now)", err)
	}
	info := n.inspect(pid)
	var nd2 *actor.NonDeterminismError
	if !errors.As(info.Failure, &nd2) || *nd2 != *nd {
		t.Fatalf("Inspect Failure = %#v, want %#v", info.Failure, nd)
	}
}

// ---- 6. retries leave a trace ----

// hookTap forwards the hook events of one kind to a channel.
type hookTap struct {
	kind actor.HookKind
	ch   chan actor.HookEvent
}

func (h *hookTap) Observe(_ context.Context, e actor.HookEvent) {
	if e.Kind == h.kind {
		select {
		case h.ch <- e:
		default:
		}
	}
}

// TestRetriesSurviveStop: attempts of an activity retried with an in-memory
// back-off are recorded, so a node stopped during the back-off after attempt
// 2 and started again goes on with attempt 3.
func TestRetriesSurviveStop(t *testing.T) {
	var attempts seen
	down := actor.Activity("always-down", func(ctx context.Context, _ int) (int, error) {
		info, _ := actor.Info(ctx)
		attempts.add(strconv.Itoa(info.Attempt))
		return 0, errors.New("still down")
	}, actor.WithRetry(supervisor.Exponential(time.Second, 1, time.Second, 5)))
	wf := actor.Workflow("retry-trace", func(ctx *actor.Context, _ int) (int, error) { return down.Run(ctx, 0) })
	tap := &hookTap{kind: actor.HookActivityRetried, ch: make(chan actor.HookEvent, 16)}
	n := startJournalNode(t, actor.Config{Workflows: actor.Register(wf), Hooks: tap})
	pid := spawnOK(t, n.sys, wf, 0)
	deadline := time.After(30 * time.Second)
	for failed := 0; failed < 2; {
		select {
		case e := <-tap.ch:
			failed = e.Attempt
		case <-deadline:
			t.Fatal("attempt 2 never failed")
		}
	}
	stopNode(t, n.sys) // during the 1 s back-off after attempt 2
	if got := strings.Join(attempts.all(), " "); got != "1 2" {
		t.Fatalf("attempts before the stop: %s, want 1 2", got)
	}
	h, err := n.st.History(context.Background(), string(pid), 0)
	if err != nil {
		t.Fatal(err)
	}
	if c := countStoredKind(h, actor.EventActivityRetry); c != 2 {
		t.Fatalf("stored history after the stop has %d retry records, want 2", c)
	}
	n.restart()
	_, err = actor.Await(testutil.Ctx(t, 30*time.Second), n.sys, wf, pid)
	if got := strings.Join(attempts.all(), " "); got != "1 2 3 4 5" {
		t.Fatalf("attempts %s, want 1 2 3 4 5", got)
	}
	var rx *supervisor.RetryExhaustedError
	if !errors.As(err, &rx) || rx.Attempts != 5 {
		t.Fatalf("Await = %v, want RetryExhaustedError after 5 attempts", err)
	}
	if c := countKind(n.inspect(pid).History, actor.EventActivityRetry); c != 4 {
		t.Fatalf("history has %d %s events, want 4", c, actor.EventActivityRetry)
	}
}

// ---- 8. Monitor followed by a wait replays ----

// TestMonitorThenWaitReplays: a watcher that monitored an instance (running,
// or already ended so that its Down is made at once) and then sleeps and
// receives replays correctly after passivation and after a restart.
func TestMonitorThenWaitReplays(t *testing.T) {
	target := actor.Workflow("monitored", func(ctx *actor.Context, _ int) (int, error) {
		m, err := actor.Receive[int](ctx)
		return m.Value, err
	})
	quick := actor.Workflow("monitored-quick", func(ctx *actor.Context, n int) (int, error) { return n, nil })
	watcher := actor.Workflow("watcher", func(ctx *actor.Context, target string) (string, error) {
		if err := ctx.Monitor(actor.PID(target)); err != nil {
			return "", err
		}
		if err := ctx.Sleep(5 * time.Millisecond); err != nil {
			return "", err
		}
		m, err := actor.Receive[string](ctx)
		if err != nil {
			return "", err
		}
		d, err := actor.Receive[mailbox.Down](ctx, mailbox.OnChannel(mailbox.DownChannel), mailbox.From(actor.PID(target)))
		if err != nil {
			return "", err
		}
		return m.Value + ":" + d.Value.Status, nil
	})
	n := startJournalNode(t, actor.Config{Workflows: actor.Register(target, quick, watcher), PassivateAfter: 50 * time.Millisecond})
	ctx := testutil.Ctx(t, 30*time.Second)
	ended := spawnOK(t, n.sys, quick, 1)
	if _, err := actor.Await(ctx, n.sys, quick, ended); err != nil {
		t.Fatal(err)
	}
	running := spawnOK(t, n.sys, target, 0)
	watchers := []actor.PID{spawnOK(t, n.sys, watcher, string(running)), spawnOK(t, n.sys, watcher, string(ended))}
	for _, w := range watchers {
		// Passivated after Monitor and Sleep: the message replays both.
		testutil.Eventually(t, 30*time.Second, string(w)+" passivated in its receive", func() bool {
			info := n.inspect(w)
			return info.Status == persistence.StatusWaiting && countKind(info.History, actor.EventTimerFired) == 1
		})
		sendOK(t, n.sys, w, "go")
	}
	for _, w := range watchers[:1] {
		waitHistory(t, n.sys, w, "watcher took the message", func(h []actor.HistoryEvent) bool {
			return countKind(h, actor.EventReceived) == 1
		})
	}
	if got, err := actor.Await(ctx, n.sys, watcher, watchers[1]); err != nil || got != "go:completed" {
		t.Fatalf("watcher of an ended instance = %q, %v", got, err)
	}
	// And once more after a restart.
	n.restart()
	sendOK(t, n.sys, running, 7)
	got, err := actor.Await(ctx, n.sys, watcher, watchers[0])
	if err != nil || got != "go:completed" {
		t.Fatalf("watcher = %q, %v", got, err)
	}
	for _, w := range watchers {
		if info := n.inspect(w); info.Restarts != 0 || countKind(info.History, actor.EventMonitor) != 1 {
			t.Fatalf("watcher %s restarted %d times, history %s", w, info.Restarts, kindsOf(info.History))
		}
	}
}

// ---- 9. futures ----

// TestSelectReplaysSameChoice: Select picks the activity that finished first,
// WaitAll waits for both, and replays after restarts (one with the slow
// activity in flight, one with both recorded) pick the same one; a timer
// wins a Select against an activity that does not finish.
func TestSelectReplaysSameChoice(t *testing.T) {
	var picks seen
	slow, stuck := newGate("slow"), newGate("stuck")
	fast := actor.Activity("fast", func(ctx context.Context, n int) (int, error) { return n * 10, nil })
	wf := actor.Workflow("select-replay", func(ctx *actor.Context, _ int) (string, error) {
		s := slow.act.Go(ctx, 1)
		f := fast.Go(ctx, 2)
		i, err := actor.Select(ctx, s, f)
		if err != nil {
			return "", err
		}
		picks.add(strconv.Itoa(i))
		if err := actor.WaitAll(ctx, s, f); err != nil {
			return "", err
		}
		sv, serr := s.Get(ctx)
		fv, ferr := f.Get(ctx)
		if serr != nil || ferr != nil {
			return "", errors.Join(serr, ferr)
		}
		if _, err := actor.Receive[string](ctx); err != nil {
			return "", err
		}
		j, err := actor.Select(ctx, stuck.act.Go(ctx, 3), ctx.Timer(20*time.Millisecond))
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("first=%d slow=%d fast=%d timer-vs-stuck=%d", i, sv, fv, j), nil
	})
	n := startJournalNode(t, actor.Config{Workflows: actor.Register(wf)})
	pid := spawnOK(t, n.sys, wf, 0)
	slow.waitEntered(t)
	picks.waitLen(t, 1, "Select returned")
	n.restart() // WaitAll waits for the slow activity
	slow.waitEntered(t)
	slow.open()
	waitHistory(t, n.sys, pid, "both activities recorded", func(h []actor.HistoryEvent) bool {
		return countKind(h, actor.EventActivity) == 2
	})
	picks.waitLen(t, 2, "replay after the first restart")
	n.restart()                 // both outcomes recorded: replay must still pick fast
	sendOK(t, n.sys, pid, "go") // parked in its receive, it is woken by the message
	picks.waitLen(t, 3, "replay after the second restart")
	got, err := actor.Await(testutil.Ctx(t, 30*time.Second), n.sys, wf, pid)
	if err != nil || got != "first=1 slow=1 fast=20 timer-vs-stuck=1" {
		t.Fatalf("Await = %q, %v", got, err)
	}
	allEqual(t, "Select's choice (first run, then replays)", picks.all(), 3, "1")
}

// ---- 10. versioning ----

// TestVersionBranches: an instance started before a ctx.Version call existed
// takes the old branch, a new one the new branch, and code that dropped the
// Version call still replays an instance that recorded the marker.
func TestVersionBranches(t *testing.T) {
	var ran seen
	step := func(name string) *actor.ActivityDef[string, string] {
		return actor.Activity(name, func(ctx context.Context, in string) (string, error) {
			ran.add(name + "(" + in + ")")
			return name, nil
		})
	}
	oldStep, newStep := step("old-step"), step("new-step")
	finish := func(ctx *actor.Context, branch string) (string, error) {
		m, err := actor.Receive[string](ctx)
		return branch + "+" + m.Value, err
	}
	v1 := actor.Workflow("versioned", func(ctx *actor.Context, in string) (string, error) {
		r, err := oldStep.Run(ctx, in)
		if err != nil {
			return "", err
		}
		return finish(ctx, r)
	})
	v2 := actor.Workflow("versioned", func(ctx *actor.Context, in string) (string, error) {
		var r string
		var err error
		if ctx.Version("new-step", 1) == 1 {
			r, err = newStep.Run(ctx, in)
		} else {
			r, err = oldStep.Run(ctx, in)
		}
		if err != nil {
			return "", err
		}
		return finish(ctx, r)
	})
	v3 := actor.Workflow("versioned", func(ctx *actor.Context, in string) (string, error) {
		r, err := newStep.Run(ctx, in)
		if err != nil {
			return "", err
		}
		return finish(ctx, r)
	})
	n := startJournalNode(t, actor.Config{Workflows: actor.Register(v1)})
	oldPID := spawnOK(t, n.sys, v1, "A")
	waitHistory(t, n.sys, oldPID, "v1 ran its step", func(h []actor.HistoryEvent) bool { return countKind(h, actor.EventActivity) == 1 })

	n.restartWith(v2)
	newPID := spawnOK(t, n.sys, v2, "B")
	waitHistory(t, n.sys, newPID, "v2 ran its step", func(h []actor.HistoryEvent) bool { return countKind(h, actor.EventActivity) == 1 })
	sendOK(t, n.sys, oldPID, "done")
	ctx := testutil.Ctx(t, 30*time.Second)
	if got, err := actor.Await(ctx, n.sys, v2, oldPID); err != nil || got != "old-step+done" {
		t.Fatalf("instance started by v1, finished by v2 = %q, %v; want the old branch", got, err)
	}
	if h := n.inspect(oldPID).History; countKind(h, actor.EventVersion) != 0 {
		t.Fatalf("old instance recorded a version marker: %s", kindsOf(h))
	}
	if h := n.inspect(newPID).History; countKind(h, actor.EventVersion) != 1 {
		t.Fatalf("new instance has no version marker: %s", kindsOf(h))
	}

	n.restartWith(v3)
	sendOK(t, n.sys, newPID, "done")
	if got, err := actor.Await(ctx, n.sys, v3, newPID); err != nil || got != "new-step+done" {
		t.Fatalf("instance started by v2, finished by v3 = %q, %v", got, err)
	}
	if got := strings.Join(ran.all(), " "); got != "old-step(A) new-step(B)" {
		t.Fatalf("steps ran: %s", got)
	}
}

// ---- 11. panics ----

// TestWorkflowPanicInspect: a workflow's panic reaches Inspect as a
// *actor.PanicError with the stack, while Instance.Error stays one line; an
// activity's panic likewise, inside its ActivityError.
func TestWorkflowPanicInspect(t *testing.T) {
	noRestart := supervisor.RestartPolicy{MaxRestarts: 0, Period: time.Minute,
		Backoff: supervisor.Exponential(10*time.Millisecond, 1, 10*time.Millisecond, 0)}
	panicky := actor.Workflow("panics", func(ctx *actor.Context, _ int) (int, error) {
		ctx.Now()
		panic("kaboom\nsecond line")
	}, actor.WithRestart(noRestart))
	act := actor.Activity("panicking-activity", func(ctx context.Context, _ int) (int, error) {
		panic("activity kaboom")
	}, actor.WithRetry(supervisor.NoRetry()))
	callsPanicky := actor.Workflow("calls-panicky", func(ctx *actor.Context, _ int) (int, error) { return act.Run(ctx, 0) })
	n := startJournalNode(t, actor.Config{Workflows: actor.Register(panicky, callsPanicky)})
	ctx := testutil.Ctx(t, 30*time.Second)

	for _, c := range []struct {
		pid   actor.PID
		value string
	}{
		{spawnOK(t, n.sys, panicky, 0), "kaboom\nsecond line"},
		{spawnOK(t, n.sys, callsPanicky, 0), "activity kaboom"},
	} {
		inst, err := n.sys.AwaitDone(ctx, c.pid)
		if err != nil {
			t.Fatal(err)
		}
		info := n.inspect(c.pid)
		var pe *actor.PanicError
		if info.Status != persistence.StatusFailed || !errors.As(info.Failure, &pe) {
			t.Fatalf("%s: status %s, Failure %#v; want failed with a *actor.PanicError", c.pid, info.Status, info.Failure)
		}
		if pe.Value != c.value || !strings.Contains(pe.Stack, "goroutine") || !strings.Contains(pe.Stack, "journal_test.go") {
			t.Fatalf("%s: PanicError value %q, stack:\n%s", c.pid, pe.Value, pe.Stack)
		}
		if strings.Contains(info.Error, "\n") || strings.Contains(inst.Error, "\n") || !strings.Contains(info.Error, "kaboom") {
			t.Fatalf("%s: Instance.Error = %q, want one line naming the panic", c.pid, info.Error)
		}
	}
}

// ---- 12. results that do not round-trip ----

type jWithErr struct{ Err error }

type jWithChan struct{ C chan int }

// TestUnencodableResultFails: an activity result that cannot be recorded and
// read back fails the call at once with a clear ActivityError (no retries),
// and the instance goes on to finish.
func TestUnencodableResultFails(t *testing.T) {
	var calls seen
	retry := actor.WithRetry(supervisor.Exponential(time.Millisecond, 1, time.Millisecond, 5))
	withErr := actor.Activity("returns-error-field", func(ctx context.Context, _ int) (jWithErr, error) {
		calls.add("error-field")
		return jWithErr{Err: errors.New("inner")}, nil
	}, retry)
	withChan := actor.Activity("returns-chan", func(ctx context.Context, _ int) (jWithChan, error) {
		calls.add("chan")
		return jWithChan{C: make(chan int)}, nil
	}, retry)
	describe := func(err error) string {
		var ae *actor.ActivityError
		if !errors.As(err, &ae) {
			return fmt.Sprintf("not an ActivityError: %v", err)
		}
		return fmt.Sprintf("terminal=%v attempts=%d invalid=%v", ae.Terminal, ae.Attempts, errors.Is(err, actor.ErrInvalidInput))
	}
	var messages seen
	wf := actor.Workflow("unencodable", func(ctx *actor.Context, _ int) (string, error) {
		_, e1 := withErr.Run(ctx, 0)
		_, e2 := withChan.Run(ctx, 0)
		if e1 != nil {
			messages.add(e1.Error())
		}
		if e2 != nil {
			messages.add(e2.Error())
		}
		return describe(e1) + " | " + describe(e2), nil
	})
	n := startJournalNode(t, actor.Config{Workflows: actor.Register(wf)})
	pid := spawnOK(t, n.sys, wf, 0)
	got, err := actor.Await(testutil.Ctx(t, 30*time.Second), n.sys, wf, pid)
	want := "terminal=true attempts=1 invalid=true | terminal=true attempts=1 invalid=true"
	if err != nil || got != want {
		t.Fatalf("Await = %q, %v; want %q", got, err, want)
	}
	if c := strings.Join(calls.all(), " "); c != "error-field chan" {
		t.Fatalf("activities ran: %s (a result that cannot be recorded must not be retried)", c)
	}
	m := messages.all()
	if len(m) != 2 || !strings.Contains(m[0], "does not decode back") || !strings.Contains(m[1], "chan int") {
		t.Fatalf("error messages %q, want them to say what went wrong", m)
	}
}

// jPtrNamed names its type with a pointer-receiver MessageType method.
type jPtrNamed struct{ ID string }

func (*jPtrNamed) MessageType() string { return "orders.ptr-named" }

// TestMessageTypePointerReceiver: a MessageType method on the pointer names
// the type whether the message is sent as a value or as a pointer, as it does
// for Receive[T].
func TestMessageTypePointerReceiver(t *testing.T) {
	wf := actor.Workflow("ptr-named", func(ctx *actor.Context, _ int) (string, error) {
		if err := ctx.Send(ctx.PID(), jPtrNamed{ID: "by-value"}); err != nil {
			return "", err
		}
		if err := ctx.Send(ctx.PID(), &jPtrNamed{ID: "by-pointer"}); err != nil {
			return "", err
		}
		var got []string
		for range 2 {
			m, err := actor.Receive[jPtrNamed](ctx, mailbox.Timeout(time.Second))
			if err != nil {
				return strings.Join(got, " "), err
			}
			got = append(got, m.Value.ID+":"+m.Type)
		}
		return strings.Join(got, " "), nil
	})
	n := startJournalNode(t, actor.Config{Workflows: actor.Register(wf)})
	pid := spawnOK(t, n.sys, wf, 0)
	got, err := actor.Await(testutil.Ctx(t, 30*time.Second), n.sys, wf, pid)
	if err != nil || got != "by-value:orders.ptr-named by-pointer:orders.ptr-named" {
		t.Fatalf("Await = %q, %v", got, err)
	}
}

// TestDroppedVersionBetweenCompletions: code that dropped a ctx.Version call
// still replays when the recorded marker sits between two activity results
// (the wait for the second one must look past the marker).
func TestDroppedVersionBetweenCompletions(t *testing.T) {
	fast := actor.Activity("fast-first", func(ctx context.Context, n int) (int, error) { return n * 10, nil })
	g := newGate("gated-second")
	v2 := actor.Workflow("dropped-version", func(ctx *actor.Context, _ int) (string, error) {
		f1, f2 := fast.Go(ctx, 1), g.act.Go(ctx, 2)
		a, err := f1.Get(ctx)
		if err != nil {
			return "", err
		}
		ver := ctx.Version("between", 1) // recorded after f1's result, before f2's
		b, err := f2.Get(ctx)
		if err != nil {
			return "", err
		}
		_, err = actor.Receive[string](ctx)
		return fmt.Sprintf("%d %d v%d", a, b, ver), err
	})
	v3 := actor.Workflow("dropped-version", func(ctx *actor.Context, _ int) (string, error) {
		f1, f2 := fast.Go(ctx, 1), g.act.Go(ctx, 2)
		a, err := f1.Get(ctx)
		if err != nil {
			return "", err
		}
		b, err := f2.Get(ctx)
		if err != nil {
			return "", err
		}
		_, err = actor.Receive[string](ctx)
		return fmt.Sprintf("%d %d", a, b), err
	})
	n := startJournalNode(t, actor.Config{Workflows: actor.Register(v2)})
	pid := spawnOK(t, n.sys, v2, 0)
	g.waitEntered(t)
	waitHistory(t, n.sys, pid, "the marker after the first result", func(h []actor.HistoryEvent) bool {
		return countKind(h, actor.EventVersion) == 1
	})
	g.open()
	waitHistory(t, n.sys, pid, "both results", func(h []actor.HistoryEvent) bool { return countKind(h, actor.EventActivity) == 2 })
	if k := kindsOf(n.inspect(pid).History); !strings.Contains(k, "activity:fast-first version:between activity:gated-second") {
		t.Fatalf("history %s, want the marker between the two results", k)
	}
	n.restartWith(v3)
	sendOK(t, n.sys, pid, "go")
	if got, err := actor.Await(testutil.Ctx(t, 30*time.Second), n.sys, v3, pid); err != nil || got != "10 2" {
		t.Fatalf("Await = %q, %v", got, err)
	}
}
