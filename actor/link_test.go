package actor_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
)

type linkDefs struct {
	child, failing, stuck  *actor.WorkflowDef[int, int]
	sum, dies, traps, ends *actor.WorkflowDef[int, string]
}

func newLinkDefs() *linkDefs {
	d := &linkDefs{}
	d.child = actor.Workflow("square", func(ctx *actor.Context, n int) (int, error) { return n * n, nil })
	d.failing = actor.Workflow("failing", func(ctx *actor.Context, n int) (int, error) { return 0, errors.New("child broke") })
	d.stuck = actor.Workflow("stuck", func(ctx *actor.Context, n int) (int, error) {
		_, err := actor.Receive[int](ctx, mailbox.OnChannel("never"))
		return 0, err
	})
	d.sum = actor.Workflow("sum", func(ctx *actor.Context, n int) (string, error) {
		total := 0
		var pids []actor.PID
		for i := 1; i <= n; i++ {
			pid, err := actor.SpawnChild(ctx, d.child, i)
			if err != nil {
				return "", err
			}
			pids = append(pids, pid)
		}
		for _, pid := range pids {
			v, err := actor.AwaitChild(ctx, d.child, pid)
			if err != nil {
				return "", err
			}
			total += v
		}
		return strings.Repeat("x", total), nil
	})
	d.dies = actor.Workflow("dies", func(ctx *actor.Context, n int) (string, error) {
		if _, err := actor.SpawnChild(ctx, d.failing, 0); err != nil {
			return "", err
		}
		// A catch-all receive must not swallow the failed child's Down.
		_, err := actor.Receive[int](ctx)
		return "survived", err
	})
	d.traps = actor.Workflow("traps", func(ctx *actor.Context, n int) (string, error) {
		ctx.TrapExits()
		pid, err := actor.SpawnChild(ctx, d.failing, 0)
		if err != nil {
			return "", err
		}
		m, err := actor.Receive[mailbox.Down](ctx, mailbox.OnChannel(mailbox.DownChannel))
		if err != nil {
			return "", err
		}
		if m.Value.PID != pid {
			return "", errors.New("Down from someone else")
		}
		return m.Value.Status + ": " + m.Value.Error, nil
	})
	d.ends = actor.Workflow("ends", func(ctx *actor.Context, n int) (string, error) {
		if _, err := actor.SpawnChild(ctx, d.stuck, 0); err != nil {
			return "", err
		}
		return "done", nil
	})
	return d
}

func TestLinkedChildren(t *testing.T) {
	d := newLinkDefs()
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)),
		Workflows: actor.Register(d.child, d.failing, d.stuck, d.sum, d.dies, d.traps, d.ends)})
	ctx := testutil.Ctx(t, 30*time.Second)

	pid, _ := actor.Spawn(ctx, sys, d.sum, 3)
	if got, err := actor.Await(ctx, sys, d.sum, pid); err != nil || len(got) != 1+4+9 {
		t.Fatalf("sum of children = %q, %v", got, err)
	}
	if info, _ := sys.Inspect(ctx, pid+"/child:2"); info.Parent != string(pid) || info.Status != persistence.StatusCompleted {
		t.Fatalf("child record = %+v", info.Instance)
	}

	pid, _ = actor.Spawn(ctx, sys, d.dies, 0)
	_, err := actor.Await(ctx, sys, d.dies, pid)
	var we *actor.WorkflowError
	if !errors.As(err, &we) || !strings.Contains(we.Message, "child broke") {
		t.Fatalf("parent of a failed child: %v", err)
	}

	pid, _ = actor.Spawn(ctx, sys, d.traps, 0)
	if got, err := actor.Await(ctx, sys, d.traps, pid); err != nil || got != "failed: child broke" {
		t.Fatalf("trapping parent = %q, %v", got, err)
	}

	pid, _ = actor.Spawn(ctx, sys, d.ends, 0)
	if _, err := actor.Await(ctx, sys, d.ends, pid); err != nil {
		t.Fatal(err)
	}
	child, err := sys.AwaitDone(ctx, pid+"/child:1")
	if err != nil || child.Status != persistence.StatusCancelled {
		t.Fatalf("child of an ended parent = %+v, %v", child, err)
	}
}

// A link survives a restart of the node between the child's spawn and its end.
func TestLinkSurvivesRestart(t *testing.T) {
	slowChild := actor.Workflow("slow-child", func(ctx *actor.Context, n int) (int, error) {
		if err := ctx.Sleep(300 * time.Millisecond); err != nil {
			return 0, err
		}
		return n + 1, nil
	})
	parent := actor.Workflow("parent", func(ctx *actor.Context, n int) (int, error) {
		pid, err := actor.SpawnChild(ctx, slowChild, n)
		if err != nil {
			return 0, err
		}
		return actor.AwaitChild(ctx, slowChild, pid)
	})
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	ctx := testutil.Ctx(t, 30*time.Second)
	cfg := actor.Config{Store: st, Workflows: actor.Register(slowChild, parent), NodeID: "n", Logger: testutil.Logger()}
	sys1, err := actor.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := actor.Spawn(ctx, sys1, parent, 41)
	for {
		if info, _ := sys1.Inspect(ctx, pid+"/child:1"); info.HistoryLen >= 2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := sys1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	sys2 := testutil.StartNode(t, cfg)
	if got, err := actor.Await(ctx, sys2, parent, pid); err != nil || got != 42 {
		t.Fatalf("parent = %d, %v", got, err)
	}
}

func TestMonitorAndCancel(t *testing.T) {
	waiter := actor.Workflow("waiter", func(ctx *actor.Context, _ int) (int, error) {
		m, err := actor.Receive[int](ctx)
		return m.Value, err
	})
	watcher := actor.Workflow("watcher", func(ctx *actor.Context, target string) (string, error) {
		out := ""
		for _, pid := range []actor.PID{actor.PID(target), "no-such-instance"} {
			if err := ctx.Monitor(pid); err != nil {
				return "", err
			}
		}
		if err := ctx.Cancel(actor.PID(target), "watcher says stop"); err != nil {
			return "", err
		}
		for i := 0; i < 2; i++ {
			m, err := actor.Receive[mailbox.Down](ctx, mailbox.OnChannel(mailbox.DownChannel))
			if err != nil {
				return "", err
			}
			out += string(m.Value.PID) + "=" + m.Value.Status + ";"
		}
		// Monitoring an ended instance still yields one Down, from it.
		if err := ctx.Monitor(actor.PID(target)); err != nil {
			return "", err
		}
		m, err := actor.Receive[mailbox.Down](ctx, mailbox.OnChannel(mailbox.DownChannel), mailbox.From(actor.PID(target)))
		if err != nil {
			return "", err
		}
		return out + string(m.Value.PID) + "=" + m.Value.Status, nil
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(waiter, watcher)})
	ctx := testutil.Ctx(t, 30*time.Second)
	target, _ := actor.Spawn(ctx, sys, waiter, 0, actor.WithID("target"))
	pid, _ := actor.Spawn(ctx, sys, watcher, string(target))
	got, err := actor.Await(ctx, sys, watcher, pid)
	want1 := "no-such-instance=noproc;target=cancelled;target=cancelled"
	want2 := "target=cancelled;no-such-instance=noproc;target=cancelled"
	if err != nil || (got != want1 && got != want2) {
		t.Fatalf("watcher = %q, %v", got, err)
	}
	if info, _ := sys.Inspect(ctx, target); info.Status != persistence.StatusCancelled || info.Error != "watcher says stop" {
		t.Fatalf("target = %+v", info.Instance)
	}
	if info, _ := sys.Inspect(ctx, pid); info.MailboxDepth != 0 {
		t.Fatalf("watcher left %d messages", info.MailboxDepth)
	}
}

// Links and monitors across a kill -9: the child process spawns a parent
// that awaits a linked child sleeping on a durable timer, and a watcher that
// monitors the sleeper; it is killed while they wait. A new process finishes
// them all: the parent gets the child's result, the watcher its Down.
var (
	napper = actor.Workflow("napper", func(ctx *actor.Context, n int) (int, error) {
		if err := ctx.Sleep(1500 * time.Millisecond); err != nil {
			return 0, err
		}
		return n * 2, nil
	})
	napParent = actor.Workflow("nap-parent", func(ctx *actor.Context, n int) (int, error) {
		pid, err := actor.SpawnChild(ctx, napper, n)
		if err != nil {
			return 0, err
		}
		return actor.AwaitChild(ctx, napper, pid)
	})
	napWatcher = actor.Workflow("nap-watcher", func(ctx *actor.Context, target string) (string, error) {
		if err := ctx.Monitor(actor.PID(target)); err != nil {
			return "", err
		}
		m, err := actor.Receive[mailbox.Down](ctx, mailbox.OnChannel(mailbox.DownChannel))
		if err != nil {
			return "", err
		}
		return m.Value.Status + " " + string(m.Value.Output), nil
	})
)

func init() { registerChildRole("links", linksChild) }

func linksChild() int {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, os.Getenv("NORN_CHILD_DB"), sqlite.Options{})
	if err != nil {
		return childFail("open: %v", err)
	}
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(napper, napParent, napWatcher),
		NodeID: "links-child", LeaseTTL: time.Second, Logger: testutil.Logger()})
	if err != nil {
		return childFail("start: %v", err)
	}
	if _, err := actor.Spawn(ctx, sys, napParent, 21, actor.WithID("p")); err != nil {
		return childFail("spawn: %v", err)
	}
	for { // the watcher must find the child running, or its Down comes at once
		if _, err := st.Instance(ctx, "p/child:1"); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := actor.Spawn(ctx, sys, napWatcher, "p/child:1", actor.WithID("w")); err != nil {
		return childFail("spawn: %v", err)
	}
	for {
		subs, _ := st.Subscriptions(ctx, "w")
		h, _ := st.History(ctx, "p/child:1", 0)
		if len(subs) == 1 && countStoredKind(h, "timer") == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	childSay("WAITING")
	select {}
}

func TestLinksAndMonitorsSurviveKill9(t *testing.T) {
	path := testutil.SQLitePath(t)
	c := startChild(t, "links", "NORN_CHILD_DB="+path)
	c.waitLine(t, "WAITING", time.Minute)
	c.kill9(t)
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, path), Workflows: actor.Register(napper, napParent, napWatcher),
		LeaseTTL: time.Second})
	ctx := testutil.Ctx(t, 60*time.Second)
	if got, err := actor.Await(ctx, sys, napParent, "p"); err != nil || got != 42 {
		t.Fatalf("parent = %d, %v", got, err)
	}
	if got, err := actor.Await(ctx, sys, napWatcher, "w"); err != nil || got != "completed 42" {
		t.Fatalf("watcher = %q, %v", got, err)
	}
}

func countStoredKind(h []persistence.Event, kind string) int {
	n := 0
	for _, e := range h {
		if e.Kind == kind {
			n++
		}
	}
	return n
}
