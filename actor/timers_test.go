package actor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// Durable timers (issue 4), checked against real SQLite files and real
// restarts; "never early" is checked against the due time the store recorded.

// TestSleepSurvivesRestart: a workflow sleeping 1.5 s when its System stops
// completes on a new System over the same file, not before its due time, and
// its recorded Now replays unchanged.
func TestSleepSurvivesRestart(t *testing.T) {
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	type span struct{ Before, After time.Time }
	wf := actor.Workflow("napper", func(ctx *actor.Context, d time.Duration) (span, error) {
		b := ctx.Now()
		if err := ctx.Sleep(d); err != nil {
			return span{}, err
		}
		return span{b, ctx.Now()}, nil
	})
	cfg := actor.Config{Store: st, Workflows: actor.Register(wf)}
	sys := testutil.StartNode(t, cfg)
	ctx := testutil.Ctx(t, 60*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	waitHistory(t, sys, pid, "sleeping", func(h []actor.HistoryEvent) bool { return countKind(h, "timer") == 1 })
	h := inspect(t, sys, pid).History
	due, stored := timerDue(t, h, "sleep:1")
	if !stored {
		t.Fatal("a 1.5 s sleep has no stored timer")
	}
	if countKind(h, "timer_fired") != 0 {
		t.Fatal("timer fired before the restart")
	}
	sys, _ = restartNode(t, sys, st, path, cfg)
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(due) || got.After.Before(due) {
		t.Fatalf("woke early: due %s, workflow saw %s", due.Format(time.RFC3339Nano), got.After.Format(time.RFC3339Nano))
	}
	h = inspect(t, sys, pid).History
	if n := countKind(h, "timer_fired"); n != 1 {
		t.Fatalf("%d timer_fired events, want 1", n)
	}
	for _, e := range h {
		if e.Kind == "timer_fired" && e.At.Before(due) {
			t.Fatalf("timer_fired recorded at %s, before due %s", e.At, due)
		}
	}
	if rec := recordedNows(t, h); len(rec) != 2 || !rec[0].Equal(got.Before) || !rec[1].Equal(got.After) {
		t.Fatalf("recorded Now %v, workflow returned %+v", rec, got)
	}
}

// TestTimerDueDuringDowntime: a timer that came due while no System ran
// fires when one starts.
func TestTimerDueDuringDowntime(t *testing.T) {
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	wf := actor.Workflow("short-nap", func(ctx *actor.Context, d time.Duration) (int, error) {
		return 1, ctx.Sleep(d)
	})
	cfg := actor.Config{Store: st, Workflows: actor.Register(wf)}
	sys := testutil.StartNode(t, cfg)
	ctx := testutil.Ctx(t, 60*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 300*time.Millisecond)
	waitHistory(t, sys, pid, "sleeping", func(h []actor.HistoryEvent) bool { return countKind(h, "timer") == 1 })
	due, _ := timerDue(t, inspect(t, sys, pid).History, "sleep:1")
	stopNode(t, sys)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(due) + 200*time.Millisecond) // downtime past the due time
	st = testutil.OpenSQLite(t, path)
	cfg.Store = st
	sys = testutil.StartNode(t, cfg)
	if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != 1 {
		t.Fatalf("Await = %d, %v", got, err)
	}
	if n := countKind(inspect(t, sys, pid).History, "timer_fired"); n != 1 {
		t.Fatalf("%d timer_fired events, want 1", n)
	}
}

// TestSleepUntilPast: SleepUntil a past time returns at once, is recorded
// (timer + timer_fired, no stored timer), and replay stays aligned: the
// activity after it is not run again after a restart.
func TestSleepUntilPast(t *testing.T) {
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	var runs atomic.Int64
	act := actor.Activity("after-past", func(ctx context.Context, n int) (int, error) {
		runs.Add(1)
		return n + 1, nil
	})
	past := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	wf := actor.Workflow("past", func(ctx *actor.Context, n int) (int, error) {
		if err := ctx.SleepUntil(past); err != nil {
			return 0, err
		}
		n, err := act.Run(ctx, n)
		if err != nil {
			return 0, err
		}
		if _, err := actor.Receive[int](ctx, mailbox.OnChannel("next")); err != nil {
			return 0, err
		}
		if err := ctx.SleepUntil(past); err != nil { // a second one after replay, too
			return 0, err
		}
		return n, nil
	})
	cfg := actor.Config{Store: st, Workflows: actor.Register(wf)}
	sys := testutil.StartNode(t, cfg)
	ctx := testutil.Ctx(t, 60*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 41)
	waitHistory(t, sys, pid, "activity done", func(h []actor.HistoryEvent) bool { return countKind(h, "activity") == 1 })
	h := inspect(t, sys, pid).History
	if due, stored := timerDue(t, h, "sleep:1"); stored || !due.Equal(past) {
		t.Fatalf("past timer recorded as due %s stored %v", due, stored)
	}
	timers, err := st.DueTimers(ctx, time.Now().Add(24*time.Hour), nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(timers) != 0 {
		t.Fatalf("a past SleepUntil stored timers %v", timers)
	}
	sys, _ = restartNode(t, sys, st, path, cfg)
	if err := sys.SendOn(ctx, "next", pid, 1); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != 42 {
		t.Fatalf("Await = %d, %v", got, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("activity ran %d times, want 1", runs.Load())
	}
	if k := kindsOf(inspect(t, sys, pid).History); k != "started:past timer:sleep:1 timer_fired:sleep:1 activity:after-past received:receive:1 timer:sleep:2 timer_fired:sleep:2 completed:past" {
		t.Fatalf("history = %s", k)
	}
}

// TestSleepTiny: sleeps so short that they are due before the workflow
// looks again complete normally (no crash, no restart).
func TestSleepTiny(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	wf := actor.Workflow("tiny", func(ctx *actor.Context, _ int) (int, error) {
		for _, d := range []time.Duration{time.Nanosecond, time.Microsecond, 50 * time.Microsecond} {
			if err := ctx.Sleep(d); err != nil {
				return 0, err
			}
		}
		return 3, nil
	})
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 60*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 0)
	if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != 3 {
		t.Fatalf("Await = %d, %v", got, err)
	}
	info := inspect(t, sys, pid)
	if info.Restarts != 0 || countKind(info.History, "timer_fired") != 3 {
		t.Fatalf("restarts %d, history %s", info.Restarts, kindsOf(info.History))
	}
}

// TestNowReplaysAcrossRestart: ctx.Now returns the recorded time after a
// restart.
func TestNowReplaysAcrossRestart(t *testing.T) {
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	wf := actor.Workflow("clock", func(ctx *actor.Context, _ int) (time.Time, error) {
		now := ctx.Now()
		if _, err := actor.Receive[int](ctx, mailbox.OnChannel("next")); err != nil {
			return time.Time{}, err
		}
		return now, nil
	})
	cfg := actor.Config{Store: st, Workflows: actor.Register(wf)}
	sys := testutil.StartNode(t, cfg)
	ctx := testutil.Ctx(t, 60*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 0)
	waitHistory(t, sys, pid, "now recorded", func(h []actor.HistoryEvent) bool { return countKind(h, "now") == 1 })
	rec := recordedNows(t, inspect(t, sys, pid).History)
	sys, _ = restartNode(t, sys, st, path, cfg)
	if err := sys.SendOn(ctx, "next", pid, 1); err != nil {
		t.Fatal(err)
	}
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(rec[0]) {
		t.Fatalf("Now after restart = %s, recorded %s", got.Format(time.RFC3339Nano), rec[0].Format(time.RFC3339Nano))
	}
	if n := countKind(inspect(t, sys, pid).History, "now"); n != 1 {
		t.Fatalf("%d now events, want 1", n)
	}
}

// TestReceiveTimeoutRace: a message committed at about the instant a
// Receive's timeout is due. In every instance exactly one wins, the message
// is never both received and timed out (if the timeout won it is still in
// the mailbox and a later Receive gets it), and after a restart replay
// reaches the same outcome as the first run.
func TestReceiveTimeoutRace(t *testing.T) {
	const n = 30
	const timeout = 200 * time.Millisecond
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	var noted sync.Map // instance -> first-run outcome
	var noteRuns atomic.Int64
	note := actor.Activity("note", func(ctx context.Context, s string) (string, error) {
		noteRuns.Add(1)
		info, _ := actor.Info(ctx)
		noted.Store(info.InstanceID, s)
		return s, nil
	})
	wf := actor.Workflow("racer", func(ctx *actor.Context, d time.Duration) (string, error) {
		var first string
		m, err := actor.Receive[int](ctx, mailbox.OnChannel("c"), mailbox.Timeout(d))
		switch {
		case err == nil:
			first = fmt.Sprintf("got %d", m.Value)
		case errors.Is(err, actor.ErrTimeout):
			first = "timeout"
		default:
			return "", err
		}
		if _, err := note.Run(ctx, first); err != nil {
			return "", err
		}
		if _, err := actor.Receive[int](ctx, mailbox.OnChannel("end")); err != nil {
			return "", err
		}
		if first == "timeout" {
			m, err := actor.Receive[int](ctx, mailbox.OnChannel("c"))
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("timeout, then got %d", m.Value), nil
		}
		return first, nil
	})
	cfg := actor.Config{Store: st, Workflows: actor.Register(wf)}
	sys := testutil.StartNode(t, cfg)
	ctx := testutil.Ctx(t, 2*time.Minute)
	// Spawn one at a time, read each Receive's due time from the store and
	// send its message at about that instant.
	pids := make([]actor.PID, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	offsets := make([]time.Duration, n)
	for i := range pids {
		pid, err := actor.Spawn(ctx, sys, wf, timeout, actor.WithID(fmt.Sprintf("racer-%02d", i)))
		if err != nil {
			t.Fatal(err)
		}
		pids[i] = pid
		var due time.Time
		waitHistory(t, sys, pid, "waiting with a timeout", func(h []actor.HistoryEvent) bool {
			for _, e := range h {
				if e.Kind == "receive_wait" {
					var rec struct{ Due time.Time }
					if err := json.Unmarshal(e.Payload, &rec); err != nil {
						t.Fatal(err)
					}
					due = rec.Due
					return true
				}
			}
			return false
		})
		// Sweep the offsets across the instant: early sends are received,
		// late ones find the timeout taken; where the commit, the timer
		// firing and the mailbox scan overlap, either may win.
		off := time.Duration(-25000+i*30000/n+rand.IntN(1000)) * time.Microsecond
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d := time.Until(due.Add(off)); d > 0 {
				time.Sleep(d)
			}
			err := sys.SendOn(ctx, "c", pid, i)
			offsets[i] = time.Since(due) // when the send had committed
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, pid := range pids {
		waitHistory(t, sys, pid, "outcome noted", func(h []actor.HistoryEvent) bool { return countKind(h, "activity") == 1 })
	}
	// Exactly one of received/timeout for the first Receive; the message is
	// in the mailbox exactly when the timeout won.
	checkFirst := func(sys *actor.System, stage string) (timeouts int) {
		for _, pid := range pids {
			info := inspect(t, sys, pid)
			v, _ := noted.Load(string(pid))
			got, to := 0, 0
			for _, e := range info.History {
				if e.Name == "receive:1" && e.Kind == "received" {
					got++
				}
				if e.Name == "receive:1" && e.Kind == "receive_timeout" {
					to++
				}
			}
			if got+to != 1 || (to == 1) != (v == "timeout") {
				t.Fatalf("%s %s: first receive recorded %d received, %d timeouts; noted %q", stage, pid, got, to, v)
			}
			if want := to; info.MailboxDepth != want {
				t.Fatalf("%s %s: outcome %q, mailbox depth %d, want %d", stage, pid, v, info.MailboxDepth, want)
			}
			timeouts += to
		}
		return timeouts
	}
	timeouts := checkFirst(sys, "before restart")
	var sweep []string
	for i, pid := range pids {
		v, _ := noted.Load(string(pid))
		sweep = append(sweep, fmt.Sprintf("%+.1fms:%v", float64(offsets[i])/1e6, v == "timeout"))
	}
	t.Logf("send committed at due+offset: timed out? %v", sweep)
	sys, _ = restartNode(t, sys, st, path, cfg)
	checkFirst(sys, "after restart")
	for _, pid := range pids {
		if err := sys.SendOn(ctx, "end", pid, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i, pid := range pids {
		got, err := actor.Await(ctx, sys, wf, pid)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := noted.Load(string(pid))
		want := fmt.Sprintf("got %d", i)
		if v == "timeout" {
			want = fmt.Sprintf("timeout, then got %d", i)
		} else if v != want {
			t.Fatalf("%s noted %q, want %q", pid, v, want)
		}
		if got != want {
			t.Fatalf("%s: replay after restart returned %q, first run noted %q", pid, got, v)
		}
		// The message was received exactly once overall.
		c := 0
		for _, e := range inspect(t, sys, pid).History {
			if e.Kind == "received" && receivedMessage(t, e).Channel == "c" {
				c++
			}
		}
		if c != 1 {
			t.Fatalf("%s: message received %d times", pid, c)
		}
	}
	if noteRuns.Load() != n {
		t.Fatalf("note ran %d times, want %d", noteRuns.Load(), n)
	}
	t.Logf("outcomes: %d timeouts, %d received", timeouts, n-timeouts)
}

// TestTimersTwoSystemsNoDoubleFire: two Systems with different NodeIDs on one
// SQLite file both load and fire the same timers (instances passivate while
// they sleep, so both race to activate them). Each timer fires once and the
// activity after each sleep runs once.
func TestTimersTwoSystemsNoDoubleFire(t *testing.T) {
	const n = 24
	path := testutil.SQLitePath(t)
	stA := &leaseCounter{Store: testutil.OpenSQLite(t, path)}
	stB := &leaseCounter{Store: testutil.OpenSQLite(t, path)}
	var runs sync.Map // idempotency key -> *atomic.Int64
	var total atomic.Int64
	act := actor.Activity("after-nap", func(ctx context.Context, n int) (int, error) {
		c, _ := runs.LoadOrStore(actor.IdempotencyKey(ctx), new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
		total.Add(1)
		return n, nil
	})
	wf := actor.Workflow("double-nap", func(ctx *actor.Context, ms int) (int, error) {
		for i := 0; i < 2; i++ {
			if err := ctx.Sleep(time.Duration(ms) * time.Millisecond); err != nil {
				return 0, err
			}
			if _, err := act.Run(ctx, i); err != nil {
				return 0, err
			}
		}
		return ms, nil
	})
	cfg := func(st persistence.Store, node string) actor.Config {
		return actor.Config{Store: st, Workflows: actor.Register(wf), NodeID: node,
			PassivateAfter: 20 * time.Millisecond, TimerHorizon: time.Second}
	}
	sysA := testutil.StartNode(t, cfg(stA, "node-a"))
	sysB := testutil.StartNode(t, cfg(stB, "node-b"))
	ctx := testutil.Ctx(t, 2*time.Minute)
	var pids []actor.PID
	for i := 0; i < n; i++ {
		pid, err := actor.Spawn(ctx, sysA, wf, 200+10*i)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	for i, pid := range pids {
		sys := sysA
		if i%2 == 1 {
			sys = sysB // Await works from any node
		}
		if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != 200+10*i {
			t.Fatalf("%s = %d, %v", pid, got, err)
		}
	}
	for _, pid := range pids {
		h := inspect(t, sysA, pid).History
		fired := map[string]int{}
		for _, e := range h {
			if e.Kind == "timer_fired" {
				fired[e.Name]++
			}
		}
		if fmt.Sprint(fired) != "map[sleep:1:1 sleep:2:1]" {
			t.Fatalf("%s: timer_fired per timer %v; history %s", pid, fired, kindsOf(h))
		}
		if countKind(h, "activity") != 2 {
			t.Fatalf("%s: history %s", pid, kindsOf(h))
		}
		for _, id := range []string{"after-nap:1", "after-nap:2"} {
			c, ok := runs.Load(string(pid) + "/" + id)
			if !ok || c.(*atomic.Int64).Load() != 1 {
				t.Fatalf("%s/%s ran %v times, want 1", pid, id, c)
			}
		}
	}
	if total.Load() != 2*n {
		t.Fatalf("activities ran %d times, want %d", total.Load(), 2*n)
	}
	t.Logf("activations: node-a %d, node-b %d (lease refused: %d, %d)", stA.acquired.Load(), stB.acquired.Load(), stA.refused.Load(), stB.refused.Load())
}

// leaseCounter counts the leases a node took and was refused.
type leaseCounter struct {
	persistence.Store
	acquired, refused atomic.Int64
}

func (l *leaseCounter) AcquireLease(ctx context.Context, id, owner string, ttl time.Duration) (persistence.Instance, error) {
	inst, err := l.Store.AcquireLease(ctx, id, owner, ttl)
	switch {
	case err == nil:
		l.acquired.Add(1)
	case errors.Is(err, persistence.ErrLeaseHeld):
		l.refused.Add(1)
	}
	return inst, err
}

// ---- kill -9 of a node with sleeping workflows ----

type napLogIn struct {
	Log string
	Nap time.Duration
}

// appendKey appends its idempotency key to a side-effect log, one line (one
// write) per real execution.
var appendKey = actor.Activity("append-key", func(ctx context.Context, path string) (string, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return "", err
	}
	defer f.Close()
	key := actor.IdempotencyKey(ctx)
	if _, err := f.WriteString(key + "\n"); err != nil {
		return "", err
	}
	return key, f.Sync()
})

var napLogWF = actor.Workflow("nap-then-log", func(ctx *actor.Context, in napLogIn) (string, error) {
	if err := ctx.Sleep(in.Nap); err != nil {
		return "", err
	}
	return appendKey.Run(ctx, in.Log)
})

const napLogInstances = 20

func init() { registerChildRole("nap-log", napLogChild) }

// napLogChild spawns sleeping workflows, says SLEEPING once every one of
// them has its timer committed, and runs until killed.
func napLogChild() int {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, os.Getenv("NORN_CHILD_DB"), sqlite.Options{})
	if err != nil {
		return childFail("open: %v", err)
	}
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(napLogWF), NodeID: "nap-child",
		LeaseTTL: time.Second, Logger: testutil.Logger()})
	if err != nil {
		return childFail("start: %v", err)
	}
	nap, err := time.ParseDuration(os.Getenv("NORN_CHILD_NAP"))
	if err != nil {
		return childFail("nap: %v", err)
	}
	in := napLogIn{Log: os.Getenv("NORN_CHILD_LOG"), Nap: nap}
	for i := 0; i < napLogInstances; i++ {
		if _, err := actor.Spawn(ctx, sys, napLogWF, in, actor.WithID(fmt.Sprintf("nap-%02d", i))); err != nil {
			return childFail("spawn: %v", err)
		}
	}
	for i := 0; i < napLogInstances; {
		h, err := st.History(ctx, fmt.Sprintf("nap-%02d", i), 0)
		if err != nil {
			return childFail("history: %v", err)
		}
		if countStoredKind(h, "timer") == 1 {
			i++
			continue
		}
		time.Sleep(2 * time.Millisecond)
	}
	childSay("SLEEPING %d", napLogInstances)
	select {} // until kill -9
}

// TestTimerSurvivesKill9: a node whose workflows are sleeping is killed
// with SIGKILL; a new node (another NodeID) fires every timer once and runs
// the activity after it once. A sleeper's park gave its lease up (nothing
// of it runs in memory), so the new node need not wait for the dead node's
// leases to expire.
func TestTimerSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	db, logPath := filepath.Join(dir, "norn.db"), filepath.Join(dir, "effects.log")
	c := startChild(t, "nap-log", "NORN_CHILD_DB="+db, "NORN_CHILD_LOG="+logPath, "NORN_CHILD_NAP=2s")
	c.waitLine(t, "SLEEPING", 2*time.Minute)
	killedAt := time.Now()
	c.kill9(t)

	st := testutil.OpenSQLite(t, db)
	ctx := testutil.Ctx(t, 2*time.Minute)
	ids := make([]string, napLogInstances)
	var firstDue time.Time
	for i := range ids {
		ids[i] = fmt.Sprintf("nap-%02d", i)
		inst, err := st.Instance(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		// Asleep, its lease given up at its park: waiting since it parked.
		if inst.Status != persistence.StatusWaiting || inst.LeaseOwner != "" {
			t.Fatalf("%s after the kill: status %s, lease owner %q", ids[i], inst.Status, inst.LeaseOwner)
		}
		h, err := st.History(ctx, ids[i], 0)
		if err != nil {
			t.Fatal(err)
		}
		due, _ := timerDue(t, storedHistory(h), "sleep:1")
		if firstDue.IsZero() || due.Before(firstDue) {
			firstDue = due
		}
	}
	// Timers never fire early, so a kill before the first due time means the
	// dead node ran no activity.
	killedEarly := killedAt.Before(firstDue)
	if killedEarly && len(readLines(t, logPath)) != 0 {
		t.Fatalf("side effects before any timer was due: %v", readLines(t, logPath))
	}

	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(napLogWF), NodeID: "nap-parent", LeaseTTL: time.Second})
	for _, id := range ids {
		key, err := actor.Await(ctx, sys, napLogWF, actor.PID(id))
		if err != nil || key != id+"/append-key:1" {
			t.Fatalf("%s = %q, %v", id, key, err)
		}
	}
	effects := map[string]int{}
	for _, l := range readLines(t, logPath) {
		effects[l]++
	}
	for _, id := range ids {
		info := inspect(t, sys, actor.PID(id))
		if info.Status != persistence.StatusCompleted {
			t.Fatalf("%s: %s", id, info.Status)
		}
		if countKind(info.History, "timer_fired") != 1 || countKind(info.History, "activity") != 1 {
			t.Fatalf("%s: history %s", id, kindsOf(info.History))
		}
		n := effects[id+"/append-key:1"]
		if n < 1 || (killedEarly && n != 1) {
			t.Fatalf("%s: activity ran %d times (killed before the first due time: %v)", id, n, killedEarly)
		}
	}
	if len(effects) != napLogInstances {
		t.Fatalf("side-effect log has keys %v", effects)
	}
}

// ---- helpers ----

// timerDue reads the due time of the timer event named id.
func timerDue(t *testing.T, h []actor.HistoryEvent, id string) (time.Time, bool) {
	t.Helper()
	for _, e := range h {
		if e.Kind == "timer" && e.Name == id {
			var rec struct {
				Due    time.Time
				Stored bool
			}
			if err := json.Unmarshal(e.Payload, &rec); err != nil {
				t.Fatalf("timer payload %q: %v", e.Payload, err)
			}
			return rec.Due, rec.Stored
		}
	}
	t.Fatalf("no timer %s in history %s", id, kindsOf(h))
	return time.Time{}, false
}

// recordedNows lists the times recorded by ctx.Now, in order.
func recordedNows(t *testing.T, h []actor.HistoryEvent) []time.Time {
	t.Helper()
	var out []time.Time
	for _, e := range h {
		if e.Kind == "now" {
			var ts time.Time
			if err := ts.UnmarshalText(e.Payload); err != nil {
				t.Fatal(err)
			}
			out = append(out, ts)
		}
	}
	return out
}

func receivedMessage(t *testing.T, e actor.HistoryEvent) mailbox.Message {
	t.Helper()
	var m mailbox.Message
	if err := json.Unmarshal(e.Payload, &m); err != nil {
		t.Fatalf("received event payload: %v", err)
	}
	return m
}

// kindsOf renders a history as "kind:name" words (names of activities are
// their activity name; the ref is left out).
func kindsOf(h []actor.HistoryEvent) string {
	var w []string
	for _, e := range h {
		if e.Name != "" {
			w = append(w, string(e.Kind)+":"+e.Name)
		} else {
			w = append(w, string(e.Kind))
		}
	}
	return strings.Join(w, " ")
}

func storedHistory(h []persistence.Event) []actor.HistoryEvent {
	out := make([]actor.HistoryEvent, len(h))
	for i, e := range h {
		out[i] = actor.HistoryEvent{Seq: e.Seq, Kind: actor.EventKind(e.Kind), Name: e.Name, Ref: e.Ref, Payload: e.Payload, At: e.At}
	}
	return out
}

// TestTimerWarmUp: a passivated sleeper is activated TimerWarmUp before its
// timer is due (history replayed ahead of time), and the timer then fires
// once, not early; with the warm-up off it is activated only by the timer.
func TestTimerWarmUp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		warmUp time.Duration
	}{{"on", time.Second}, {"off", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			wf := actor.Workflow("warm-sleeper", func(ctx *actor.Context, d time.Duration) (time.Time, error) {
				if err := ctx.Sleep(d); err != nil {
					return time.Time{}, err
				}
				return ctx.Now(), nil
			})
			var mu sync.Mutex
			var kinds []actor.HookKind
			var at []time.Time
			sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf),
				PassivateAfter: 2 * time.Second, TimerWarmUp: tc.warmUp,
				Hooks: hookFunc(func(e actor.HookEvent) {
					switch e.Kind {
					case actor.HookInstanceActivated, actor.HookInstancePassivated, actor.HookTimerFired:
						mu.Lock()
						kinds, at = append(kinds, e.Kind), append(at, time.Now())
						mu.Unlock()
					}
				})})
			ctx := testutil.Ctx(t, 60*time.Second)
			pid, err := actor.Spawn(ctx, sys, wf, 4*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			woke, err := actor.Await(ctx, sys, wf, pid)
			if err != nil {
				t.Fatal(err)
			}
			due, _ := timerDue(t, inspect(t, sys, pid).History, "sleep:1")
			if woke.Before(due) {
				t.Fatalf("woke at %v, before due %v", woke, due)
			}
			mu.Lock()
			defer mu.Unlock()
			want := []actor.HookKind{actor.HookInstanceActivated, actor.HookInstancePassivated, actor.HookInstanceActivated, actor.HookTimerFired}
			if fmt.Sprint(kinds) != fmt.Sprint(want) {
				t.Fatalf("hooks %v, want %v", kinds, want)
			}
			// The second activation: ahead of the due time with the
			// warm-up (a second early, give or take a slow machine's
			// second), at or after it without.
			if early := at[2].Before(due); early != (tc.warmUp > 0) {
				t.Fatalf("reactivated at %v, due %v: before due = %v, want %v", at[2], due, early, tc.warmUp > 0)
			}
			if at[3].Before(due) {
				t.Fatalf("fired at %v, before due %v", at[3], due)
			}
		})
	}
}
