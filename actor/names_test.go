package actor_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
)

type (
	approvalV1 struct{ By string }
	approvalV2 struct{ By string }
	otherMsg   struct{ N int }
	namedMsg   struct{ N int }
)

func (namedMsg) MessageType() string { return "named.msg" }

func TestMessageNamesValidated(t *testing.T) {
	t.Parallel()
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	for _, tc := range []struct {
		name  string
		names []actor.MessageName
		want  string // in the error; "" for none
	}{
		{"ok", []actor.MessageName{actor.Message[approvalV2]("orders.approval", "main.Approval")}, ""},
		{"declared name repeated", []actor.MessageName{actor.Message[namedMsg]("named.msg", "old.msg")}, ""},
		{"zero", []actor.MessageName{{}}, "zero MessageName"},
		{"empty", []actor.MessageName{actor.Message[approvalV2]("")}, "empty name"},
		{"runtime prefix", []actor.MessageName{actor.Message[approvalV2]("$approval")}, "belong to the runtime"},
		{"space", []actor.MessageName{actor.Message[approvalV2]("an approval")}, "space or control"},
		{"down name", []actor.MessageName{actor.Message[approvalV2]("mailbox.Down")}, "runtime's own"},
		{"down type", []actor.MessageName{actor.Message[mailbox.Down]("down")}, "runtime's own"},
		{"bytes", []actor.MessageName{actor.Message[[]byte]("raw")}, "any type"},
		{"twice", []actor.MessageName{actor.Message[approvalV2]("a"), actor.Message[*approvalV2]("b")}, "twice"},
		{"shared name", []actor.MessageName{actor.Message[approvalV2]("a"), actor.Message[otherMsg]("b", "a")}, "both"},
		{"declared name differs", []actor.MessageName{actor.Message[namedMsg]("other")}, "MessageType method says"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys, err := actor.Start(context.Background(), actor.Config{Store: st, Messages: tc.names, Client: true})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				_ = sys.Stop(context.Background())
				return
			}
			if err == nil {
				_ = sys.Stop(context.Background())
			}
			if !errors.Is(err, actor.ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start = %v, want ErrInvalidInput saying %q", err, tc.want)
			}
		})
	}
}

// A type renamed in a later build keeps receiving: an instance parked by
// the old code on the old type, and a message stored under the old type's
// name, both meet the renamed type, which is stored under its new name.
func TestRenamedMessageTypeStillReceives(t *testing.T) {
	t.Parallel()
	ctx := testutil.Ctx(t, 30*time.Second)
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	oldName := "actor_test.approvalV1"

	old := actor.Workflow("rename-order", func(ctx *actor.Context, _ int) (string, error) {
		if _, err := ctx.Publish("approvals-log", approvalV1{By: "self"}); err != nil {
			return "", err
		}
		m, err := actor.Receive[approvalV1](ctx)
		return m.Value.By, err
	})
	sys1 := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(old)})
	parked, err := actor.Spawn(ctx, sys1, old, 1)
	if err != nil {
		t.Fatal(err)
	}
	queued, err := actor.Spawn(ctx, sys1, old, 2)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "both orders parked", func() bool {
		for _, pid := range []actor.PID{parked, queued} {
			if info, err := sys1.Inspect(ctx, pid); err != nil || info.Status != actor.StatusWaiting {
				return false
			}
		}
		return true
	})
	if err := sys1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Written by the old build while nothing runs: the old name.
	if err := testutil.StartNode(t, actor.Config{Store: st, Client: true}).Send(ctx, queued, approvalV1{By: "old build"}); err != nil {
		t.Fatal(err)
	}

	renamed := actor.Workflow("rename-order", func(ctx *actor.Context, _ int) (string, error) {
		if _, err := ctx.Publish("approvals-log", approvalV2{By: "self"}); err != nil {
			return "", err
		}
		m, err := actor.Receive[approvalV2](ctx)
		return m.Value.By, err
	})
	names := []actor.MessageName{actor.Message[approvalV2]("orders.approval", oldName)}
	sys2 := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(renamed), Messages: names})
	if err := sys2.Send(ctx, parked, approvalV2{By: "new build"}); err != nil {
		t.Fatal(err)
	}
	for pid, want := range map[actor.PID]string{parked: "new build", queued: "old build"} {
		got, err := actor.Await(ctx, sys2, renamed, pid)
		if err != nil || got != want {
			t.Fatalf("%s = %q, %v; want %q", pid, got, err, want)
		}
	}
	// The stored names: the old one for what the old build sent, the new
	// one for what the new build sent.
	for pid, want := range map[actor.PID]string{parked: "orders.approval", queued: oldName} {
		hist, err := sys2.History(ctx, pid)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		for _, e := range hist {
			if e.Kind == actor.EventReceived {
				got = receivedType(t, e)
			}
		}
		if got != want {
			t.Errorf("%s received a message stored as %q, want %q", pid, got, want)
		}
		// The publish recorded under the old name replays with the new code.
		if err := actor.Replay(ctx, renamed, hist, actor.ReplayMessages(names...)); err != nil {
			t.Errorf("replay of %s with the renamed type: %v", pid, err)
		}
	}
}

func receivedType(t *testing.T, e actor.HistoryEvent) string {
	t.Helper()
	var m struct{ Type string }
	if err := json.Unmarshal(e.Payload, &m); err != nil {
		t.Fatal(err)
	}
	return m.Type
}

// Two builds of one program on one store: the first parks an order on its
// Approval type; the second renames the type, names it, and approves the
// order with the renamed type. Both orders end approved: the parked one by
// the new build's message, the other by the old build's.
func TestRenamedMessageAcrossBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two programs")
	}
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "norn.db")
	for _, v := range []string{"v1", "v2"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, v), "./testdata/rename/"+v).CombinedOutput()
		if err != nil {
			t.Fatalf("build %s: %v\n%s", v, err, out)
		}
	}
	run := func(v string) string {
		cmd := exec.Command(filepath.Join(dir, v), db)
		cmd.Env = os.Environ()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", v, err, out)
		}
		return string(out)
	}
	run("v1")
	out := run("v2")
	for _, want := range []string{"order-1 approved by v2", "order-2 approved by v1"} {
		if !strings.Contains(out, want) {
			t.Errorf("v2 printed %q, want a line %q", out, want)
		}
	}
	st := testutil.OpenSQLite(t, db)
	ctx := testutil.Ctx(t, 10*time.Second)
	hist, err := st.History(ctx, "order-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var stored string
	for _, e := range hist {
		if e.Kind == string(actor.EventReceived) {
			var m struct{ Type string }
			_ = json.Unmarshal(e.Payload, &m)
			stored = m.Type
		}
	}
	if stored != "orders.approval" {
		t.Fatalf("order-1 received a message stored as %q, want the registered name", stored)
	}
}

// A query of a passivated instance replays its history with the node's
// message names, as a live run matches them: a message stored under the
// registered name is still taken by the replayed receive.
func TestQueryReplaysWithMessageNames(t *testing.T) {
	t.Parallel()
	ctx := testutil.Ctx(t, 30*time.Second)
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	names := []actor.MessageName{actor.Message[approvalV2]("orders.approval")}
	wf := actor.Workflow("named-query", func(ctx *actor.Context, _ int) (string, error) {
		by := ""
		if err := actor.HandleQuery(ctx, "by", func(struct{}) (string, error) { return by, nil }); err != nil {
			return "", err
		}
		m, err := actor.Receive[approvalV2](ctx)
		if err != nil {
			return "", err
		}
		by = m.Value.By
		_, err = actor.Receive[int](ctx) // parks for good
		return by, err
	})
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), Messages: names})
	pid, err := actor.Spawn(ctx, sys, wf, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Send(ctx, pid, approvalV2{By: "ann"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the approval taken", func() bool {
		h, err := sys.History(ctx, pid)
		return err == nil && countKind(h, actor.EventReceived) == 1
	})
	if err := sys.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Another node, with the same workflow and names, answers by replay.
	other := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), Messages: names, Client: true})
	got, err := actor.Query[string](ctx, other, pid, "by", nil)
	if err != nil || got != "ann" {
		t.Fatalf("query by replay = %q, %v; want ann", got, err)
	}
}
