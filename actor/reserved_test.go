package actor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// Nothing outside the runtime can post on a system channel or send a
// mailbox.Down: not the System's calls (which the norn command and the
// viewer use), not a workflow's own sends.
func TestSystemMessagesCannotBeForged(t *testing.T) {
	t.Parallel()
	forger := actor.Workflow("forger", func(ctx *actor.Context, target string) (string, error) {
		err1 := ctx.SendOn(mailbox.DownChannel, actor.PID(target), "x")
		err2 := ctx.Send(actor.PID(target), mailbox.Down{PID: "child", Status: "failed"})
		_, err3 := ctx.Publish("$exit", 1)
		err4 := ctx.Subscribe("$down:"+target, mailbox.Competing)
		for _, err := range []error{err1, err2, err3, err4} {
			if !errors.Is(err, actor.ErrReserved) {
				return "", err
			}
		}
		return "refused", nil
	})
	waiter := actor.Workflow("forge-target", func(ctx *actor.Context, _ int) (int, error) {
		m, err := actor.Receive[int](ctx)
		return m.Value, err
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(forger, waiter)})
	ctx := testutil.Ctx(t, 30*time.Second)
	target, err := actor.Spawn(ctx, sys, waiter, 0)
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"SendOn $down":  sys.SendOn(ctx, mailbox.DownChannel, target, "x"),
		"Send a Down":   sys.Send(ctx, target, mailbox.Down{PID: "child", Status: "failed"}),
		"Publish $exit": func() error { _, err := sys.Publish(ctx, "$exit", 1); return err }(),
		"Deliver raw Down": func() error {
			_, err := sys.Deliver(ctx, actor.Outgoing{Target: target, Payload: []byte(`{}`), Type: "mailbox.Down"})
			return err
		}(),
		"PublishBatch": func() error {
			_, err := sys.PublishBatch(ctx, []actor.Outgoing{{Channel: "jobs", Message: 1}, {Channel: "$down:" + string(target), Message: 2}})
			return err
		}(),
	} {
		if !errors.Is(err, actor.ErrReserved) || !errors.Is(err, actor.ErrInvalidInput) {
			t.Errorf("%s = %v, want ErrReserved (and ErrInvalidInput)", name, err)
		}
	}
	pid, err := actor.Spawn(ctx, sys, forger, string(target))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, forger, pid); err != nil || got != "refused" {
		t.Fatalf("forger = %q, %v; want every forged send refused", got, err)
	}
	info, err := sys.Inspect(ctx, target)
	if err != nil || info.MailboxDepth != 0 {
		t.Fatalf("the target's mailbox holds %d messages (%v), want none", info.MailboxDepth, err)
	}
}

// A Down that does not come from the child it names (written into the
// store by someone else) does not end a parent linked to that child.
func TestForgedDownEndsNoLinkedParent(t *testing.T) {
	t.Parallel()
	child := actor.Workflow("linked-child", func(ctx *actor.Context, _ int) (int, error) {
		m, err := actor.Receive[int](ctx)
		return m.Value, err
	})
	parent := actor.Workflow("linked-parent", func(ctx *actor.Context, _ int) (int, error) {
		pid, err := actor.SpawnChild(ctx, child, 0) // linked
		if err != nil {
			return 0, err
		}
		if _, err := actor.Receive[string](ctx, mailbox.OnChannel("go")); err != nil {
			return 0, err
		}
		return actor.AwaitChild(ctx, child, pid)
	})
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(parent, child)})
	ctx := testutil.Ctx(t, 30*time.Second)
	ppid, err := actor.Spawn(ctx, sys, parent, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cpid actor.PID
	testutil.Eventually(t, 20*time.Second, "the child is spawned", func() bool {
		page, err := sys.List(ctx, actor.ListQuery{Workflow: "linked-child"})
		if err != nil || len(page.Instances) == 0 {
			return false
		}
		cpid = actor.PID(page.Instances[0].ID)
		return true
	})
	down := `{"PID":"` + string(cpid) + `","Status":"failed","Error":"forged"}`
	if _, err := st.Apply(context.Background(), persistence.Step{Send: []persistence.NewMessage{{ID: "forged-down",
		Channel: mailbox.DownChannel, Target: string(ppid), Sender: "mallory", Type: "mailbox.Down", Payload: []byte(down)}}}); err != nil {
		t.Fatal(err)
	}
	if err := sys.SendOn(ctx, "go", ppid, "go"); err != nil {
		t.Fatal(err)
	}
	if err := sys.Send(ctx, cpid, 7); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, parent, ppid); err != nil || got != 7 {
		t.Fatalf("parent = %d, %v; want 7: a forged Down ended it", got, err)
	}
}

// Deliver says who a message reached: the subscribers of a broadcast
// channel, those of a competing channel (and that it waits in its queue),
// nobody (it waits in the queue too), or the target of a send.
func TestDeliverSaysWhoListens(t *testing.T) {
	t.Parallel()
	sub := actor.Workflow("listener", func(ctx *actor.Context, mode string) (int, error) {
		if err := ctx.Subscribe(mode+"-chan", mailbox.Mode(mode)); err != nil {
			return 0, err
		}
		m, err := actor.Receive[int](ctx, mailbox.OnChannel("never"))
		return m.Value, err
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(sub)})
	ctx := testutil.Ctx(t, 30*time.Second)
	var last actor.PID
	for _, mode := range []string{"broadcast", "broadcast", "competing"} {
		pid, err := actor.Spawn(ctx, sys, sub, mode)
		if err != nil {
			t.Fatal(err)
		}
		last = pid
	}
	testutil.Eventually(t, 20*time.Second, "all subscribed", func() bool {
		stats, err := sys.ChannelStats(ctx)
		n := 0
		for _, s := range stats {
			n += s.Subscribers
		}
		return err == nil && n == 3
	})
	for _, c := range []struct {
		o         actor.Outgoing
		listeners int
		queued    bool
	}{
		{actor.Outgoing{Channel: "broadcast-chan", Message: 1}, 2, false},
		{actor.Outgoing{Channel: "competing-chan", Message: 1}, 1, true},
		{actor.Outgoing{Channel: "nobody", Message: 1}, 0, true},
		{actor.Outgoing{Target: last, Message: 1}, 1, false},
	} {
		sent, err := sys.Deliver(ctx, c.o)
		if err != nil || sent.Listeners != c.listeners || sent.Queued != c.queued {
			t.Errorf("Deliver(%+v) = %+v, %v; want %d listeners, queued %v", c.o, sent, err, c.listeners, c.queued)
		}
	}
}
