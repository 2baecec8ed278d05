package actor_test

import (
	"slices"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
)

type waitApproval struct{ By string }

// A parked instance says what it waits for, from its row (so a client
// without the workflow's code, e.g. the norn command, sees it too): the
// receive's types, filters and timeout, its timers and the child it
// awaits; and its mailbox says which messages no waiting receive takes.
func TestWaitsVisible(t *testing.T) {
	t.Parallel()
	child := actor.Workflow("waits-child", func(ctx *actor.Context, _ int) (int, error) {
		m, err := actor.Receive[int](ctx)
		return m.Value, err
	})
	boss := actor.Workflow("waits-boss", func(ctx *actor.Context, _ int) (int, error) {
		m, err := actor.Receive[string](ctx)
		if err != nil {
			return 0, err
		}
		return 0, ctx.SendOn("approvals", actor.PID(m.Value), waitApproval{By: "boss"})
	})
	order := actor.Workflow("waits-order", func(ctx *actor.Context, bossPID string) (string, error) {
		timer := ctx.Timer(48 * time.Hour)
		m, err := actor.Receive[waitApproval](ctx, mailbox.OnChannel("approvals"), mailbox.From(actor.PID(bossPID)), mailbox.Timeout(time.Hour))
		if err != nil {
			return "", err
		}
		_ = timer
		c, err := actor.SpawnChild(ctx, child, 1)
		if err != nil {
			return "", err
		}
		if _, err := actor.AwaitChild(ctx, child, c); err != nil {
			return "", err
		}
		return m.Value.By, nil
	})
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	names := []actor.MessageName{actor.Message[waitApproval]("approval", "old.approval")}
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(order, child, boss), Messages: names})
	ctx := testutil.Ctx(t, 30*time.Second)
	bossPID, err := actor.Spawn(ctx, sys, boss, 0)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := actor.Spawn(ctx, sys, order, string(bossPID))
	if err != nil {
		t.Fatal(err)
	}
	client := testutil.StartNode(t, actor.Config{Store: st, Client: true})
	var info actor.InstanceInfo
	testutil.Eventually(t, 10*time.Second, "the order parked in its receive", func() bool {
		info, err = client.Inspect(ctx, pid)
		return err == nil && info.Status == actor.StatusWaiting && len(info.Waits) == 2
	})
	r, tm := info.Waits[0], info.Waits[1]
	if r.Kind != actor.WaitReceive || !slices.Equal(r.Types, []string{"approval", "old.approval", "actor_test.waitApproval"}) ||
		!r.OnChannel || r.Channel != "approvals" || r.From != bossPID || r.Due.IsZero() || !r.Strict {
		t.Fatalf("receive wait = %+v", r)
	}
	if tm.Kind != actor.WaitTimer || tm.Due.Before(r.Due) {
		t.Fatalf("timer wait = %+v", tm)
	}

	// Mail it will not take: another type, the right type from someone
	// else, an untyped one that does not decode strictly.
	if err := sys.SendOn(ctx, "approvals", pid, 42); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Deliver(ctx, actor.Outgoing{Target: pid, Channel: "approvals", Payload: []byte(`{"Bye":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "both messages judged unmatched", func() bool {
		msgs, err := client.Mailbox(ctx, pid, 0)
		if err != nil || len(msgs) != 2 {
			return false
		}
		return msgs[0].Unmatched && msgs[1].Unmatched
	})

	if err := sys.SendOn(ctx, "approvals", pid, waitApproval{By: "someone"}); err != nil {
		t.Fatal(err)
	}
	msgs, err := client.Mailbox(ctx, pid, 0)
	if err != nil || len(msgs) < 3 {
		t.Fatalf("mailbox = %+v, %v", msgs, err)
	}
	if !msgs[2].Unmatched || msgs[2].Type != "approval" {
		t.Fatalf("the awaited type from another sender: %+v", msgs[2])
	}

	// The child: the parent waits for it, by PID.
	if err := sys.Send(ctx, pid, waitApproval{By: "nobody"}); err != nil { // no channel: refused by the filter
		t.Fatal(err)
	}
	if err := sys.Send(ctx, bossPID, string(pid)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the order awaits its child", func() bool {
		info, err = client.Inspect(ctx, pid)
		return err == nil && info.Status == actor.StatusWaiting && len(info.Waits) >= 1 && info.Waits[0].Kind == actor.WaitChild
	})
	if info.Waits[0].Name == "" || info.Waits[0].Name == string(pid) {
		t.Fatalf("child wait = %+v", info.Waits[0])
	}
	if err := sys.Send(ctx, actor.PID(info.Waits[0].Name), 7); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, order, pid); err != nil || got != "boss" {
		t.Fatalf("order = %q, %v", got, err)
	}
	if info, err := client.Inspect(ctx, pid); err != nil || len(info.Waits) != 0 {
		t.Fatalf("an ended order still waits: %+v, %v", info.Waits, err)
	}
}

// A message without a type that does not decode strictly into the awaited
// type stays, and the mailbox says no receive takes it; one that does is
// taken.
func TestUntypedLeftoverShownUnmatched(t *testing.T) {
	t.Parallel()
	order := actor.Workflow("leftover-order", func(ctx *actor.Context, _ int) (string, error) {
		m, err := actor.Receive[waitApproval](ctx)
		return m.Value.By, err
	})
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	// Passivation writes what it waits for, with what it looked at: the
	// client (a process without the workflow) reads that.
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(order), PassivateAfter: 50 * time.Millisecond})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, order, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Deliver(ctx, actor.Outgoing{Target: pid, Payload: []byte(`{"Bye":"wrong field"}`)}); err != nil {
		t.Fatal(err)
	}
	client := testutil.StartNode(t, actor.Config{Store: st, Client: true})
	for name, s := range map[string]*actor.System{"node": sys, "client": client} {
		testutil.Eventually(t, 10*time.Second, "the untyped leftover judged unmatched by the "+name, func() bool {
			msgs, err := s.Mailbox(ctx, pid, 0)
			return err == nil && len(msgs) == 1 && msgs[0].Unmatched
		})
	}
	if _, err := sys.Deliver(ctx, actor.Outgoing{Target: pid, Payload: []byte(`{"By":"ann"}`)}); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, order, pid); err != nil || got != "ann" {
		t.Fatalf("order = %q, %v", got, err)
	}
}
