package norntest_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntest"
)

// orderFlowV2 is orderFlow after a change that running instances cannot
// take: it ships before it charges.
var orderFlowV2 = actor.Workflow("order", func(ctx *actor.Context, item string) (string, error) {
	r, err := reserve.Run(ctx, item)
	if err != nil {
		return "", err
	}
	if err := ctx.Sleep(24 * time.Hour); err != nil {
		return "", err
	}
	s, err := ship.Run(ctx, item)
	if err != nil {
		return "", err
	}
	c, err := charge.Run(ctx, len(item))
	return r + " " + c + " " + s, err
})

func TestReplayOfExportedHistory(t *testing.T) {
	t.Parallel()
	env := norntest.New(t, norntest.Options{Workflows: actor.Register(orderFlow)})
	mockCharge(env)
	pid := norntest.Spawn(env, orderFlow, "widget")
	if _, err := norntest.Await(env, orderFlow, pid); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "order.json")
	env.WriteHistory(pid, path)

	// Today's code replays it.
	norntest.Replay(t, orderFlow, path)

	// Changed code does not: Replay fails the test, naming the divergence.
	msg := expectFailure(t, func(tb testing.TB) { norntest.Replay(tb, orderFlowV2, path) })
	if !strings.Contains(msg, "non-deterministic") || !strings.Contains(msg, "ship") {
		t.Fatalf("failed with %q, want the divergence at the ship call", msg)
	}
}

// testdata/order-widget.json was written by Env.WriteHistory from a run
// of orderFlow (the same file `norn history --export` writes).
func TestReplayOfStoredFile(t *testing.T) {
	t.Parallel()
	norntest.Replay(t, orderFlow, "testdata/order-widget.json")
	msg := expectFailure(t, func(tb testing.TB) { norntest.Replay(tb, orderFlowV2, "testdata/order-widget.json") })
	if !strings.Contains(msg, "non-deterministic") {
		t.Fatalf("failed with %q, want a divergence", msg)
	}
}
