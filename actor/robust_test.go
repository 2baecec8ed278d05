package actor_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

// A crashed instance is not executed again before its restart back-off has
// passed, whatever wakes it meanwhile (here: mail sent right after the crash).
func TestRestartBackoffHolds(t *testing.T) {
	const backoff = 400 * time.Millisecond
	var (
		mu          sync.Mutex
		crashedAt   time.Time
		delay       time.Duration
		secondStart time.Time
	)
	var runs atomic.Int64
	crashed := make(chan struct{})
	wf := actor.Workflow("flaky", func(ctx *actor.Context, _ int) (int, error) {
		if runs.Add(1) == 1 {
			panic("first activation crashes")
		}
		mu.Lock()
		if secondStart.IsZero() {
			secondStart = time.Now()
		}
		mu.Unlock()
		_, err := actor.Receive[string](ctx)
		return 0, err
	}, actor.WithRestart(supervisor.RestartPolicy{MaxRestarts: 3, Period: time.Minute,
		Backoff: supervisor.Exponential(backoff, 1, backoff, 0)}))
	hooks := hookFunc(func(e actor.HookEvent) {
		if e.Kind == actor.HookInstanceRestarted {
			mu.Lock()
			crashedAt, delay = e.At, e.Duration
			mu.Unlock()
			close(crashed)
		}
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)),
		Workflows: actor.Register(wf), Hooks: hooks})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, 0)
	if err != nil {
		t.Fatal(err)
	}
	<-crashed
	if err := sys.Send(ctx, pid, "wake up"); err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Await(ctx, sys, wf, pid); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if delay < backoff/2 {
		t.Fatalf("restart back-off reported as %v, want about %v", delay, backoff)
	}
	if secondStart.Before(crashedAt.Add(delay)) {
		t.Fatalf("second execution started %v after the crash, before its back-off of %v", secondStart.Sub(crashedAt), delay)
	}
}

// An activity that ignores its context cannot hold the workflow past its
// timeout: the attempt is abandoned (reported through Hooks), the call fails
// with a timeout the workflow can match, and the instance goes on.
func TestActivityTimeoutAbandonsAttempt(t *testing.T) {
	block := make(chan struct{})
	t.Cleanup(func() { close(block) }) // let the abandoned goroutine end before the leak check
	stuck := actor.Activity("stuck", func(ctx context.Context, _ int) (int, error) {
		<-block // ignores ctx
		return 1, nil
	}, actor.WithTimeout(50*time.Millisecond), actor.WithRetry(supervisor.NoRetry()))
	wf := actor.Workflow("impatient", func(ctx *actor.Context, _ int) (string, error) {
		_, err := stuck.Run(ctx, 0)
		var ae *actor.ActivityError
		if !errors.As(err, &ae) || !ae.Timeout || !errors.Is(err, actor.ErrActivityTimeout) {
			return "", err
		}
		return "gave up waiting", nil
	})
	var abandoned atomic.Int64
	hooks := hookFunc(func(e actor.HookEvent) {
		if e.Kind == actor.HookActivityAbandoned {
			abandoned.Add(1)
		}
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)),
		Workflows: actor.Register(wf), Hooks: hooks})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 0)
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil || got != "gave up waiting" {
		t.Fatalf("Await = %q, %v", got, err)
	}
	if abandoned.Load() != 1 {
		t.Fatalf("abandoned attempts reported: %d, want 1", abandoned.Load())
	}
}

// A cancel reaches a workflow whose activity ignores its context: the wait
// ends with ErrCancelled and the instance ends cancelled.
func TestCancelDuringStuckActivity(t *testing.T) {
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	started := make(chan struct{})
	var once sync.Once
	stuck := actor.Activity("stuck", func(ctx context.Context, _ int) (int, error) {
		once.Do(func() { close(started) })
		<-block
		return 1, nil
	})
	wf := actor.Workflow("cancellable", func(ctx *actor.Context, _ int) (int, error) {
		return stuck.Run(ctx, 0)
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 0)
	<-started
	if err := sys.Cancel(ctx, pid, "enough"); err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Await(ctx, sys, wf, pid); !errors.Is(err, actor.ErrCancelled) {
		t.Fatalf("Await = %v, want ErrCancelled", err)
	}
}

// A request the store always rejects (a target or channel with a NUL byte)
// reaches the workflow as an ErrInvalidInput error, recorded for replay; it
// is not retried forever as if the store were down.
func TestRejectedRequestIsTheWorkflowsError(t *testing.T) {
	wf := actor.Workflow("sloppy", func(ctx *actor.Context, _ int) ([]bool, error) {
		e1 := ctx.Send("bad\x00pid", "hi")
		e2 := ctx.Subscribe("bad\x00channel", "broadcast")
		_, e3 := ctx.Publish("bad\xffchannel", "hi")
		return []bool{errors.Is(e1, actor.ErrInvalidInput), errors.Is(e2, actor.ErrInvalidInput), errors.Is(e3, actor.ErrInvalidInput)}, nil
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 0)
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil || len(got) != 3 || !got[0] || !got[1] || !got[2] {
		t.Fatalf("Await = %v, %v; want three ErrInvalidInput errors", got, err)
	}
}

// A cancel committed by another process reaches an activation that is live
// and parked on this node (the notification is all it gets), without
// waiting for passivation or a recovery scan.
func TestRemoteCancelOfLiveActivation(t *testing.T) {
	sqlite := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	st := testutil.Notify(sqlite, sqlite)
	wf := actor.Workflow("sleeper", func(ctx *actor.Context, _ int) (int, error) {
		return 0, ctx.Sleep(time.Hour)
	})
	sys := testutil.StartNode(t, slowNets(actor.Config{Store: st, Workflows: actor.Register(wf)}))
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 0)
	testutil.Eventually(t, 10*time.Second, "sleeping", func() bool {
		info, _ := sys.Inspect(ctx, pid)
		return info.Active && len(info.History) >= 2
	})
	// Another process: the request lands in the store, then its
	// notification, which only a registered listener hears (a node that
	// starts listening later rescans the store instead).
	testutil.Eventually(t, 10*time.Second, "listening", func() bool { return st.Listening() > 0 })
	if err := sqlite.RequestCancel(ctx, string(pid), "from elsewhere"); err != nil {
		t.Fatal(err)
	}
	st.Notify(string(pid))
	if _, err := actor.Await(ctx, sys, wf, pid); !errors.Is(err, actor.ErrCancelled) {
		t.Fatalf("Await = %v, want ErrCancelled", err)
	}
}

// A version marker recorded right after a call that looks for a cancel is
// still there for the Version call on replay.
func TestVersionAfterActivityReplays(t *testing.T) {
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	one := actor.Activity("one", func(ctx context.Context, n int) (int, error) { return n, nil })
	wf := actor.Workflow("versioned", func(ctx *actor.Context, _ int) (int, error) {
		f := one.Go(ctx, 1)
		v := ctx.Version("after-go", 3)
		if _, err := f.Get(ctx); err != nil {
			return 0, err
		}
		if _, err := actor.Receive[string](ctx); err != nil {
			return 0, err
		}
		return v, nil
	})
	cfg := actor.Config{Store: st, Workflows: actor.Register(wf)}
	ctx := testutil.Ctx(t, 30*time.Second)
	sys := testutil.StartNode(t, cfg)
	pid, _ := actor.Spawn(ctx, sys, wf, 0)
	testutil.Eventually(t, 10*time.Second, "parked in Receive", func() bool {
		info, _ := sys.Inspect(ctx, pid)
		return len(info.History) >= 3
	})
	if err := sys.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	sys2 := testutil.StartNode(t, cfg)
	if err := sys2.Send(ctx, pid, "go on"); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys2, wf, pid); err != nil || got != 3 {
		t.Fatalf("Await = %d, %v; want the recorded version 3", got, err)
	}
}

// Bad IDs, channel names and metadata get ErrInvalidInput naming the field,
// on every store the same, and nothing is written.
func TestInvalidInputFromOutside(t *testing.T) {
	wf := actor.Workflow("plain", func(ctx *actor.Context, _ int) (int, error) { return 0, nil })
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	tooLong := strings.Repeat("x", 300)
	cases := []struct {
		name string
		call func() error
	}{
		{"spawn id with NUL", func() error { _, err := actor.Spawn(ctx, sys, wf, 0, actor.WithID("a\x00b")); return err }},
		{"spawn id too long", func() error { _, err := actor.Spawn(ctx, sys, wf, 0, actor.WithID(tooLong)); return err }},
		{"send to invalid UTF-8", func() error { return sys.Send(ctx, "bad\xff", 1) }},
		{"publish on a long channel", func() error { _, err := sys.Publish(ctx, tooLong, 1); return err }},
		{"metadata with NUL", func() error {
			_, err := sys.PublishWith(ctx, "c", 1, map[string]string{"k": "v\x00"})
			return err
		}},
		{"cancel reason invalid UTF-8", func() error { return sys.Cancel(ctx, "x", "bad\xff") }},
	}
	for _, c := range cases {
		err := c.call()
		var ie *persistence.InvalidError
		if !errors.Is(err, actor.ErrInvalidInput) || !errors.As(err, &ie) || ie.Field == "" {
			t.Errorf("%s: err = %v, want ErrInvalidInput naming the field", c.name, err)
		}
		if err != nil && len(err.Error()) > 300 {
			t.Errorf("%s: error text of %d bytes", c.name, len(err.Error()))
		}
	}
	stats, _ := sys.ChannelStats(ctx)
	if len(stats) != 0 {
		t.Fatalf("something was written: %+v", stats)
	}
}

// failingEnd fails the first step that ends an instance, as a store that
// drops its connection would.
type failingEnd struct {
	persistence.Store
	failed atomic.Bool
}

func (s *failingEnd) Apply(ctx context.Context, step persistence.Step) (persistence.StepResult, error) {
	if step.Status.Terminal() && s.failed.CompareAndSwap(false, true) {
		return persistence.StepResult{}, errors.New("connection reset")
	}
	return s.Store.Apply(ctx, step)
}

// An end that fails to commit is tried again: the instance does not sit
// under the node's lease with nobody running it.
func TestFailedEndIsRetried(t *testing.T) {
	st := &failingEnd{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t))}
	wf := actor.Workflow("ending", func(ctx *actor.Context, n int) (int, error) { return n * 2, nil })
	sys := testutil.StartNode(t, slowNets(actor.Config{Store: st, Workflows: actor.Register(wf)}))
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 21)
	if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != 42 {
		t.Fatalf("Await = %d, %v", got, err)
	}
	if !st.failed.Load() {
		t.Fatal("the end's commit never failed")
	}
}

// Events emitted with default IDs in later runs of a continued instance
// are not taken for the first run's.
func TestEmitIDsAcrossRecur(t *testing.T) {
	sqlite := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	wf := actor.Workflow("emitter", func(ctx *actor.Context, n int) (int, error) {
		if _, err := ctx.EmitEvent("", "tick", []byte(`{}`)); err != nil {
			return 0, err
		}
		if n < 2 {
			return 0, actor.Recur(ctx, n+1)
		}
		return n, nil
	})
	sys := testutil.StartNode(t, actor.Config{Store: sqlite, Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 0)
	if _, err := actor.Await(ctx, sys, wf, pid); err != nil {
		t.Fatal(err)
	}
	rows, err := sqlite.ListOutbox(ctx, "", "", 100)
	if err != nil || len(rows) != 3 {
		t.Fatalf("outbox has %d events, %v; want 3 (one per run)", len(rows), err)
	}
}

// A message ID given inside a workflow is checked store-wide: the same ID
// sent again, by another instance here, is not delivered twice.
func TestWorkflowSendWithMessageID(t *testing.T) {
	receiver := actor.Workflow("inbox", func(ctx *actor.Context, _ int) (int, error) {
		n := 0
		for {
			m, err := actor.Receive[string](ctx)
			if err != nil || m.Value == "end" {
				return n, err
			}
			n++
		}
	})
	sender := actor.Workflow("sender", func(ctx *actor.Context, to string) (int, error) {
		return 0, ctx.Send(actor.PID(to), "once", actor.WithMessageID("order-7-confirmation"))
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(receiver, sender)})
	ctx := testutil.Ctx(t, 30*time.Second)
	inbox, _ := actor.Spawn(ctx, sys, receiver, 0)
	for i := 0; i < 2; i++ {
		pid, _ := actor.Spawn(ctx, sys, sender, string(inbox))
		if _, err := actor.Await(ctx, sys, sender, pid); err != nil {
			t.Fatal(err)
		}
	}
	// Both sends committed before this one: "end" comes after them.
	if err := sys.Send(ctx, inbox, "end"); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, receiver, inbox); err != nil || got != 1 {
		t.Fatalf("received %d, %v; want 1", got, err)
	}
}
