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
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
)

type deposit struct{ Amount int }

type balance struct{ Total int }

var errOverdrawn = errors.New("overdrawn")

// account owns a balance and answers deposits with the new balance; a
// negative one is refused with errOverdrawn. A deposit of 0 is answered
// twice, to see the second refused.
func account(handled *atomic.Int64) *actor.WorkflowDef[int, int] {
	return actor.Workflow("account", func(ctx *actor.Context, total int) (int, error) {
		for {
			req, err := actor.ReceiveCall[deposit](ctx)
			if err != nil {
				return total, err
			}
			if !ctx.Replaying() && handled != nil {
				handled.Add(1)
			}
			if total+req.Value.Amount < 0 {
				if err := req.Fail(ctx, errOverdrawn); err != nil {
					return 0, err
				}
				continue
			}
			total += req.Value.Amount
			if err := req.Reply(ctx, balance{Total: total}); err != nil {
				return 0, err
			}
			if req.Value.Amount == 0 {
				if err := req.Reply(ctx, balance{Total: -1}); !errors.Is(err, actor.ErrAlreadyReplied) {
					return 0, fmt.Errorf("second reply: %v, want ErrAlreadyReplied", err)
				}
			}
		}
	})
}

func callNode(t *testing.T, st persistence.Store, defs ...actor.Definition) *actor.System {
	t.Helper()
	return testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(defs...),
		Errors: []actor.ErrorDef{actor.Sentinel("overdrawn", errOverdrawn)}})
}

// A workflow calls another, which owns its state: each call gets its own
// reply, a refusal comes back as the registered error, and the answers are
// recorded (the caller's result holds them all).
func TestCallBetweenWorkflows(t *testing.T) {
	t.Parallel()
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	acct := account(nil)
	caller := actor.Workflow("caller", func(ctx *actor.Context, target string) ([]int, error) {
		var got []int
		for _, amt := range []int{5, 7, 0} {
			b, err := actor.Call[balance](ctx, actor.PID(target), deposit{Amount: amt}, actor.CallOptions{})
			if err != nil {
				return nil, err
			}
			got = append(got, b.Total)
		}
		if _, err := actor.Call[balance](ctx, actor.PID(target), deposit{Amount: -1000}, actor.CallOptions{}); !errors.Is(err, errOverdrawn) {
			return nil, fmt.Errorf("overdraw: %v, want errOverdrawn", err)
		}
		if _, err := actor.Call[balance](ctx, "nobody", deposit{Amount: 1}, actor.CallOptions{}); !errors.Is(err, actor.ErrNotFound) {
			return nil, fmt.Errorf("call to nobody: %v, want ErrNotFound", err)
		}
		return got, nil
	})
	sys := callNode(t, st, acct, caller)
	ctx := testutil.Ctx(t, liveWait)
	if _, err := actor.Spawn(ctx, sys, acct, 100, actor.WithID("acct")); err != nil {
		t.Fatal(err)
	}
	pid, err := actor.Spawn(ctx, sys, caller, "acct")
	if err != nil {
		t.Fatal(err)
	}
	got, err := actor.Await(ctx, sys, caller, pid)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[105 112 112]" {
		t.Fatalf("balances %v, want [105 112 112]", got)
	}
	// The recorded history replays: the replies come from history.
	if err := sys.Replay(ctx, pid); err != nil {
		t.Fatalf("replay of the caller: %v", err)
	}
	// No reply is left over in the caller's mailbox, and the account's
	// answers are its own to send: user code cannot pose as either side.
	if msgs, err := sys.Mailbox(ctx, pid, 10); err != nil || len(msgs) != 0 {
		t.Fatalf("caller's mailbox %v, %v; want empty", msgs, err)
	}
	if err := sys.SendOn(ctx, actor.ReplyChannel, pid, balance{}); !errors.Is(err, actor.ErrReserved) {
		t.Fatalf("user send on the reply channel: %v, want ErrReserved", err)
	}
	if err := sys.SendOn(ctx, actor.CallChannel, "acct", deposit{}); !errors.Is(err, actor.ErrReserved) {
		t.Fatalf("user send on the call channel: %v, want ErrReserved", err)
	}
}

// A call from outside with an ID is answered once: calling again with the
// same ID gets the same reply and makes no second request; another request
// under that ID is refused.
func TestCallFromIsIdempotent(t *testing.T) {
	t.Parallel()
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	var handled atomic.Int64
	acct := account(&handled)
	sys := callNode(t, st, acct)
	ctx := testutil.Ctx(t, liveWait)
	if _, err := actor.Spawn(ctx, sys, acct, 0, actor.WithID("acct")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		b, err := actor.CallFrom[balance](ctx, sys, "acct", deposit{Amount: 10}, actor.CallOptions{ID: "k1"})
		if err != nil || b.Total != 10 {
			t.Fatalf("call %d: %+v, %v; want 10", i, b, err)
		}
	}
	b, err := actor.CallFrom[balance](ctx, sys, "acct", deposit{Amount: 1}, actor.CallOptions{})
	if err != nil || b.Total != 11 {
		t.Fatalf("fresh call: %+v, %v; want 11", b, err)
	}
	if n := handled.Load(); n != 2 {
		t.Fatalf("the account handled %d requests, want 2", n)
	}
	if _, err := actor.CallFrom[balance](ctx, sys, "acct", deposit{Amount: 99}, actor.CallOptions{ID: "k1"}); !errors.Is(err, actor.ErrInvalidInput) {
		t.Fatalf("another request under a used ID: %v, want ErrInvalidInput", err)
	}
	if _, err := actor.CallFrom[balance](ctx, sys, "acct", deposit{Amount: -50}, actor.CallOptions{}); !errors.Is(err, errOverdrawn) {
		t.Fatalf("refused call: %v, want errOverdrawn", err)
	}
	if _, err := actor.CallFrom[balance](ctx, sys, "ghost", deposit{Amount: 1}, actor.CallOptions{}); !errors.Is(err, actor.ErrNotFound) {
		t.Fatalf("call to a missing instance: %v, want ErrNotFound", err)
	}
	for _, w := range sys.Workflows() {
		if w != "account" {
			t.Fatalf("Workflows lists %q: the runtime's call workflow must not show", w)
		}
	}
}

// CallFrom returns the reply as its call instance takes it, a commit
// before that instance's end: here the end's commit is held until the
// caller has the reply. The end then records the same reply, and a repeat
// of the call gets it from there.
func TestCallFromAnswersBeforeTheCallEnds(t *testing.T) {
	t.Parallel()
	held, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	st := &testutil.InterceptStore{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t))}
	st.BeforeApply = func(_ context.Context, step persistence.Step) {
		if step.Instance == "$call:k-early" && step.Status == persistence.StatusCompleted && once.CompareAndSwap(false, true) {
			close(held)
			<-release
		}
	}
	acct := account(nil)
	sys := callNode(t, st, acct)
	ctx := testutil.Ctx(t, liveWait)
	if _, err := actor.Spawn(ctx, sys, acct, 0, actor.WithID("acct")); err != nil {
		t.Fatal(err)
	}
	// The ID must be owned here for the answer to come from memory; a
	// single node owns every ID.
	b, err := actor.CallFrom[balance](ctx, sys, "acct", deposit{Amount: 7}, actor.CallOptions{ID: "k-early"})
	if err != nil || b.Total != 7 {
		t.Fatalf("call: %+v, %v; want 7", b, err)
	}
	// Its end is held (or not reached yet): CallFrom did not wait for it.
	if inst, err := st.Instance(ctx, "$call:k-early"); err != nil || inst.Status.Terminal() {
		t.Fatalf("call instance when CallFrom returned: %s, %v; want it not ended yet", inst.Status, err)
	}
	<-held
	close(release)
	b, err = actor.CallFrom[balance](ctx, sys, "acct", deposit{Amount: 7}, actor.CallOptions{ID: "k-early"})
	if err != nil || b.Total != 7 {
		t.Fatalf("repeated call: %+v, %v; want the recorded 7", b, err)
	}
}

// A call whose reply comes too late fails with ErrCallTimeout, and the late
// reply is not handed to the caller's next call.
func TestCallTimeoutLateReplyIgnored(t *testing.T) {
	t.Parallel()
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	// slow answers its first request only once told to, then answers
	// every request with ten times its amount.
	slow := actor.Workflow("slow", func(ctx *actor.Context, _ int) (int, error) {
		first, err := actor.ReceiveCall[deposit](ctx)
		if err != nil {
			return 0, err
		}
		if _, err := actor.Receive[string](ctx); err != nil {
			return 0, err
		}
		if err := first.Reply(ctx, balance{Total: first.Value.Amount * 10}); err != nil {
			return 0, err
		}
		for {
			req, err := actor.ReceiveCall[deposit](ctx)
			if err != nil {
				return 0, err
			}
			if err := req.Reply(ctx, balance{Total: req.Value.Amount * 10}); err != nil {
				return 0, err
			}
		}
	})
	caller := actor.Workflow("impatient", func(ctx *actor.Context, _ int) (int, error) {
		_, err := actor.Call[balance](ctx, "slow", deposit{Amount: 1}, actor.CallOptions{Timeout: 20 * time.Millisecond})
		if !errors.Is(err, actor.ErrCallTimeout) || !errors.Is(err, actor.ErrTimeout) {
			return 0, fmt.Errorf("first call: %v, want ErrCallTimeout", err)
		}
		if err := ctx.Send("slow", "go"); err != nil {
			return 0, err
		}
		b, err := actor.Call[balance](ctx, "slow", deposit{Amount: 2}, actor.CallOptions{})
		return b.Total, err
	})
	givesUp := actor.Workflow("gives-up", func(ctx *actor.Context, _ int) (int, error) {
		_, err := actor.Call[balance](ctx, "mute", deposit{Amount: 1}, actor.CallOptions{Timeout: 20 * time.Millisecond})
		return 0, err
	})
	sys := callNode(t, st, slow, caller, givesUp)
	ctx := testutil.Ctx(t, liveWait)
	if _, err := actor.Spawn(ctx, sys, slow, 0, actor.WithID("slow")); err != nil {
		t.Fatal(err)
	}
	pid, err := actor.Spawn(ctx, sys, caller, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := actor.Await(ctx, sys, caller, pid)
	if err != nil || got != 20 {
		t.Fatalf("second call = %d, %v; want its own reply 20 (not the late 10)", got, err)
	}
	// From outside too: a call to an instance that never answers.
	if _, err := actor.Spawn(ctx, sys, slow, 0, actor.WithID("mute")); err != nil {
		t.Fatal(err)
	}
	if _, err := actor.CallFrom[balance](ctx, sys, "mute", deposit{Amount: 1}, actor.CallOptions{Timeout: 20 * time.Millisecond}); !errors.Is(err, actor.ErrCallTimeout) {
		t.Fatalf("call from outside: %v, want ErrCallTimeout", err)
	}
	// A workflow that fails with the timeout: recorded, it is still one.
	pid, err = actor.Spawn(ctx, sys, givesUp, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Await(ctx, sys, givesUp, pid); !errors.Is(err, actor.ErrCallTimeout) || !errors.Is(err, actor.ErrTimeout) {
		t.Fatalf("Await of a workflow whose call timed out: %v, want ErrCallTimeout and ErrTimeout", err)
	}
}

// Restarting the node between a call's request and its reply (the state
// of the process dropped, the store kept) still gives exactly one request
// and one reply.
func TestCallSurvivesNodeRestart(t *testing.T) {
	t.Parallel()
	path := testutil.SQLitePath(t)
	ctx := testutil.Ctx(t, liveWait)
	gate := make(chan struct{})
	entered := make(chan struct{}, 4)
	var first atomic.Bool
	first.Store(true)
	hold := actor.Activity("hold", func(ctx context.Context, n int) (int, error) {
		if first.Load() {
			entered <- struct{}{}
			select {
			case <-gate:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return n, nil
	})
	callee := actor.Workflow("held", func(ctx *actor.Context, _ int) (int, error) {
		req, err := actor.ReceiveCall[deposit](ctx)
		if err != nil {
			return 0, err
		}
		n, err := hold.Run(ctx, req.Value.Amount)
		if err != nil {
			return 0, err
		}
		return n, req.Reply(ctx, balance{Total: n})
	})
	st1, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sys1, err := actor.Start(ctx, actor.Config{Store: st1, Workflows: actor.Register(callee), NodeID: "n", Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Spawn(ctx, sys1, callee, 0, actor.WithID("held")); err != nil {
		t.Fatal(err)
	}
	callCtx, cancelCall := context.WithCancel(ctx)
	callDone := make(chan error, 1)
	go func() {
		_, err := actor.CallFrom[balance](callCtx, sys1, "held", deposit{Amount: 7}, actor.CallOptions{ID: "restart"})
		callDone <- err
	}()
	<-entered
	cancelCall()
	if err := <-callDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("call with its context cancelled: %v", err)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sys1.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	_ = st1.Close()
	first.Store(false)

	st2 := testutil.OpenSQLite(t, path)
	sys2 := testutil.StartNode(t, actor.Config{Store: st2, Workflows: actor.Register(callee), NodeID: "n"})
	b, err := actor.CallFrom[balance](ctx, sys2, "held", deposit{Amount: 7}, actor.CallOptions{ID: "restart"})
	if err != nil || b.Total != 7 {
		t.Fatalf("call again after the restart: %+v, %v; want 7", b, err)
	}
	assertOneRequestOneReply(t, ctx, sys2, "held", "$call:restart")
}

// assertOneRequestOneReply checks the histories: the callee received one
// request and sent one reply, the caller received one reply.
func assertOneRequestOneReply(t *testing.T, ctx context.Context, sys *actor.System, callee, caller string) {
	t.Helper()
	count := func(pid string, kind actor.EventKind) int {
		h, err := sys.History(ctx, actor.PID(pid))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range h {
			if e.Kind == kind {
				n++
			}
		}
		return n
	}
	if n := count(callee, actor.EventReceived); n != 1 {
		t.Errorf("%s received %d requests, want 1", callee, n)
	}
	if n := count(callee, actor.EventSent); n != 1 {
		t.Errorf("%s sent %d replies, want 1", callee, n)
	}
	if n := count(caller, actor.EventSent); n != 1 {
		t.Errorf("%s sent %d requests, want 1", caller, n)
	}
	if n := count(caller, actor.EventReceived); n != 1 {
		t.Errorf("%s received %d replies, want 1", caller, n)
	}
}

func init() { registerChildRole("call-node", callNodeChild) }

// callWorkflows are the crash test's callee (which holds each request in
// an activity that, in the child, blocks until the process is killed) and
// a workflow caller.
func callWorkflows(block bool) (*actor.WorkflowDef[int, int], *actor.WorkflowDef[int, int]) {
	hold := actor.Activity("hold", func(ctx context.Context, n int) (int, error) {
		if block {
			childSay("RECEIVED %d", n)
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return n, nil
	})
	callee := actor.Workflow("crash-callee", func(ctx *actor.Context, _ int) (int, error) {
		for {
			req, err := actor.ReceiveCall[deposit](ctx)
			if err != nil {
				return 0, err
			}
			n, err := hold.Run(ctx, req.Value.Amount)
			if err != nil {
				return 0, err
			}
			if err := req.Reply(ctx, balance{Total: n}); err != nil {
				return 0, err
			}
		}
	})
	caller := actor.Workflow("crash-caller", func(ctx *actor.Context, n int) (int, error) {
		b, err := actor.Call[balance](ctx, "callee", deposit{Amount: n}, actor.CallOptions{Timeout: time.Hour})
		return b.Total, err
	})
	return callee, caller
}

// callNodeChild runs a callee and a workflow caller, whose request the
// callee holds until the process is killed.
func callNodeChild() int {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, os.Getenv("NORN_CHILD_DB"), sqlite.Options{})
	if err != nil {
		return childFail("open: %v", err)
	}
	callee, caller := callWorkflows(true)
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(callee, caller), NodeID: "child",
		LeaseTTL: time.Second, Logger: testutil.Logger()})
	if err != nil {
		return childFail("start: %v", err)
	}
	if _, err := actor.Spawn(ctx, sys, callee, 0, actor.WithID("callee")); err != nil {
		return childFail("spawn: %v", err)
	}
	if _, err := actor.Spawn(ctx, sys, caller, 42, actor.WithID("caller")); err != nil {
		return childFail("spawn: %v", err)
	}
	select {}
}

// A node killed (kill -9) while its callee holds a workflow's request: after
// another node takes over, the callee gets the same request again (not a
// second one) and the caller gets exactly one reply.
func TestCallSurvivesKill(t *testing.T) {
	t.Parallel()
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	child := startChild(t, "call-node", "NORN_CHILD_DB="+path)
	child.waitLine(t, "RECEIVED 42", time.Minute)
	child.kill9(t)

	callee, caller := callWorkflows(false)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(callee, caller), NodeID: "survivor",
		RecoveryInterval: 50 * time.Millisecond})
	ctx := testutil.Ctx(t, liveWait)
	got, err := actor.Await(ctx, sys, caller, "caller")
	if err != nil || got != 42 {
		t.Fatalf("caller after the kill = %d, %v; want 42", got, err)
	}
	assertOneRequestOneReply(t, ctx, sys, "callee", "caller")
}
