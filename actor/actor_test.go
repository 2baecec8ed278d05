package actor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	crashChild()
	runChildRole() // crashhelper_test.go: exits when NORN_TEST_CHILD_ROLE is set
	code := m.Run()
	testutil.StopPostgres() // before the leak check: the throw-away server's goroutines end with it
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

type order struct {
	ID     string
	Amount int
}

// chain is three activities in a row, counting real executions.
type chain struct {
	runs    atomic.Int64
	double  *actor.ActivityDef[int, int]
	add     *actor.ActivityDef[int, int]
	wf      *actor.WorkflowDef[int, int]
	keys    chan string
	flakyN  atomic.Int64
	flaky   *actor.ActivityDef[int, int]
	flakyWF *actor.WorkflowDef[int, int]
}

func newChain() *chain {
	c := &chain{keys: make(chan string, 100)}
	c.double = actor.Activity("double", func(ctx context.Context, n int) (int, error) {
		c.runs.Add(1)
		c.keys <- actor.IdempotencyKey(ctx)
		return n * 2, nil
	})
	c.add = actor.Activity("add", func(ctx context.Context, n int) (int, error) {
		c.runs.Add(1)
		return n + 1, nil
	})
	c.wf = actor.Workflow("chain", func(ctx *actor.Context, n int) (int, error) {
		a, err := c.double.Run(ctx, n)
		if err != nil {
			return 0, err
		}
		b, err := c.add.Run(ctx, a)
		if err != nil {
			return 0, err
		}
		return c.double.Run(ctx, b)
	})
	c.flaky = actor.Activity("flaky", func(ctx context.Context, n int) (int, error) {
		if c.flakyN.Add(1) < 3 {
			return 0, errors.New("transient")
		}
		return n, nil
	}, actor.WithRetry(supervisor.Exponential(time.Millisecond, 2, 10*time.Millisecond, 5)))
	c.flakyWF = actor.Workflow("flaky", func(ctx *actor.Context, n int) (int, error) { return c.flaky.Run(ctx, n) })
	return c
}

func TestChainCompletes(t *testing.T) {
	c := newChain()
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(c.wf, c.flakyWF)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, c.wf, 5)
	if err != nil {
		t.Fatal(err)
	}
	got, err := actor.Await(ctx, sys, c.wf, pid)
	if err != nil || got != 22 {
		t.Fatalf("Await = %d, %v; want 22", got, err)
	}
	if c.runs.Load() != 3 {
		t.Fatalf("activities ran %d times, want 3", c.runs.Load())
	}
	if k := <-c.keys; k != string(pid)+"/double:1" {
		t.Fatalf("idempotency key = %q", k)
	}
	info, err := sys.Inspect(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range info.History {
		kinds = append(kinds, string(e.Kind)+":"+e.Ref)
	}
	if fmt.Sprint(kinds) != "[started:json activity:double:1 activity:add:1 activity:double:2 completed:]" {
		t.Fatalf("history = %v", kinds)
	}
	if info.Status != persistence.StatusCompleted || info.Node != "" {
		t.Fatalf("info = %+v", info.Instance)
	}

	// Retries: two failures, then success.
	pid, err = actor.Spawn(ctx, sys, c.flakyWF, 7)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, c.flakyWF, pid); err != nil || got != 7 || c.flakyN.Load() != 3 {
		t.Fatalf("flaky = %d, %v after %d attempts", got, err, c.flakyN.Load())
	}
}

func TestSpawnErrors(t *testing.T) {
	c := newChain()
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	ctx := testutil.Ctx(t, 30*time.Second)
	if _, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(c.wf, actor.Workflow("chain", func(*actor.Context, int) (int, error) { return 0, nil }))}); !errors.Is(err, actor.ErrInvalidInput) {
		t.Fatalf("duplicate registration: %v", err)
	}
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(c.wf)})
	if _, err := actor.Spawn(ctx, sys, c.flakyWF, 1); !errors.Is(err, actor.ErrUnknownWorkflow) {
		t.Fatalf("unregistered spawn: %v", err)
	}
	bad := actor.Workflow("bad", func(ctx *actor.Context, in chan int) (int, error) { return 0, nil })
	sys2 := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(bad)})
	if _, err := actor.Spawn(ctx, sys2, bad, make(chan int)); !errors.Is(err, actor.ErrInvalidInput) {
		t.Fatalf("unencodable input: %v", err)
	}
	if n, _ := st.List(ctx, persistence.ListFilter{}); len(n) != 0 {
		t.Fatalf("failed spawns stored %d instances", len(n))
	}
	if _, err := actor.Await(ctx, sys, c.wf, "nope"); !errors.Is(err, actor.ErrNotFound) {
		t.Fatalf("Await unknown: %v", err)
	}
	if _, err := sys.Inspect(ctx, "nope"); !errors.Is(err, actor.ErrNotFound) {
		t.Fatalf("Inspect unknown: %v", err)
	}
	if err := sys.Cancel(ctx, "nope", "x"); !errors.Is(err, actor.ErrNotFound) {
		t.Fatalf("Cancel unknown: %v", err)
	}
	// Idempotent spawn: the second spawn returns the same PID and runs nothing.
	pid, err := actor.Spawn(ctx, sys, c.wf, 1, actor.WithID("order-42"))
	if err != nil || pid != "order-42" {
		t.Fatalf("spawn with ID = %q, %v", pid, err)
	}
	if _, err := actor.Await(ctx, sys, c.wf, pid); err != nil {
		t.Fatal(err)
	}
	before := c.runs.Load()
	pid2, err := actor.Spawn(ctx, sys, c.wf, 99, actor.WithID("order-42"))
	if err != nil || pid2 != pid {
		t.Fatalf("second spawn = %q, %v", pid2, err)
	}
	if got, _ := actor.Await(ctx, sys, c.wf, pid); got != 6 || c.runs.Load() != before {
		t.Fatalf("second spawn changed the instance: result %d, runs %d -> %d", got, before, c.runs.Load())
	}
	if err := sys.Cancel(ctx, pid, "late"); !errors.Is(err, actor.ErrInstanceDone) {
		t.Fatalf("Cancel finished: %v", err)
	}
	if err := sys.Send(ctx, pid, "hi"); !errors.Is(err, actor.ErrInstanceDone) {
		t.Fatalf("Send to finished: %v", err)
	}
	if err := sys.Send(ctx, "nope", "hi"); !errors.Is(err, actor.ErrNotFound) {
		t.Fatalf("Send to unknown: %v", err)
	}
}

func TestMessagesAndTimers(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	type approval struct{ By string }
	wf := actor.Workflow("approve", func(ctx *actor.Context, o order) (string, error) {
		// Selective receive: take the "prio" message first even though it came second.
		p, err := actor.Receive[string](ctx, mailbox.OnChannel("prio"))
		if err != nil {
			return "", err
		}
		a, err := actor.Receive[approval](ctx)
		if err != nil {
			return "", err
		}
		if err := ctx.Sleep(50 * time.Millisecond); err != nil {
			return "", err
		}
		_, err = actor.Receive[string](ctx, mailbox.Timeout(30*time.Millisecond))
		if !errors.Is(err, actor.ErrTimeout) {
			return "", fmt.Errorf("want timeout, got %v", err)
		}
		return p.Value + "/" + a.Value.By, nil
	})
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, order{ID: "o1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Send(ctx, pid, approval{By: "ann"}); err != nil {
		t.Fatal(err)
	}
	if err := sys.SendOn(ctx, "prio", pid, "urgent"); err != nil {
		t.Fatal(err)
	}
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil || got != "urgent/ann" {
		t.Fatalf("Await = %q, %v", got, err)
	}
}

func TestCancelParked(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	wf := actor.Workflow("waiter", func(ctx *actor.Context, _ int) (int, error) {
		_, err := actor.Receive[int](ctx)
		return 0, err
	})
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 0)
	time.Sleep(20 * time.Millisecond)
	if err := sys.Cancel(ctx, pid, "customer asked"); err != nil {
		t.Fatal(err)
	}
	_, err := actor.Await(ctx, sys, wf, pid)
	if !errors.Is(err, actor.ErrCancelled) {
		t.Fatalf("Await = %v, want ErrCancelled", err)
	}
	info, _ := sys.Inspect(ctx, pid)
	if info.Status != persistence.StatusCancelled || info.Error != "customer asked" {
		t.Fatalf("cancelled instance = %+v", info.Instance)
	}
}
