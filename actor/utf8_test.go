package actor_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
)

// An input or a message holding invalid UTF-8 is refused, naming where, and
// nothing is written: JSON would have recorded U+FFFD instead.
func TestInvalidUTF8IsRefused(t *testing.T) {
	t.Parallel()
	type greeting struct{ Name string }
	wf := actor.Workflow("utf8", func(ctx *actor.Context, g greeting) (string, error) {
		m, err := actor.Receive[greeting](ctx)
		return g.Name + m.Value.Name, err
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	if _, err := actor.Spawn(ctx, sys, wf, greeting{Name: "bad\xff"}, actor.WithID("u-1")); !errors.Is(err, actor.ErrInvalidInput) ||
		!strings.Contains(err.Error(), "Name holds invalid UTF-8") {
		t.Fatalf("Spawn = %v, want ErrInvalidInput naming Name", err)
	}
	if _, err := sys.Instance(ctx, "u-1"); !errors.Is(err, actor.ErrNotFound) {
		t.Fatalf("the refused spawn wrote an instance: %v", err)
	}
	pid, err := actor.Spawn(ctx, sys, wf, greeting{Name: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Send(ctx, pid, greeting{Name: "\xfe"}); !errors.Is(err, actor.ErrInvalidInput) {
		t.Fatalf("Send = %v, want ErrInvalidInput", err)
	}
	if err := sys.Send(ctx, pid, greeting{Name: "-é"}); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != "ann-é" {
		t.Fatalf("Await = %q, %v", got, err)
	}
}

// A message sent without a type (as the norn command, HTTP clients and
// other languages do) is taken by Receive[T] only if it decodes into T
// strictly; one that does not stays in the mailbox.
func TestUntypedMessagesMatchStrictly(t *testing.T) {
	t.Parallel()
	type approval struct{ By string }
	wf := actor.Workflow("strict-untyped", func(ctx *actor.Context, _ int) (string, error) {
		m, err := actor.Receive[approval](ctx)
		return m.Value.By, err
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{`{"Bye": "wrong field"}`, `{"By": 7}`, `"just text"`, `{"By": "x"} {"By": "y"}`} {
		if _, err := sys.Deliver(ctx, actor.Outgoing{Target: pid, Payload: []byte(raw)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sys.Deliver(ctx, actor.Outgoing{Target: pid, Payload: []byte(`{"By": "ann"}`)}); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != "ann" {
		t.Fatalf("Await = %q, %v; want the one message that fits", got, err)
	}
	// The four that do not fit came first: the receive skipped them.
	info, err := sys.Inspect(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range info.History {
		if e.Kind == actor.EventReceived && !strings.Contains(string(e.Payload), "ann") {
			t.Fatalf("received a message that does not fit: %s", e.Payload)
		}
	}
}
