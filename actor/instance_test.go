package actor_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
)

// System.Instance reads the record alone: what Inspect reports, without the
// history; ErrNotFound for an unknown ID.
func TestSystemInstance(t *testing.T) {
	wf := actor.Workflow("double", func(ctx *actor.Context, n int) (int, error) { return 2 * n, nil })
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, 21, actor.WithID("double-21"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Await(ctx, sys, wf, pid); err != nil {
		t.Fatal(err)
	}
	in, err := sys.Instance(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	info, err := sys.Inspect(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	if in.ID != "double-21" || in.Workflow != "double" || in.Status != actor.StatusCompleted ||
		string(in.Input) != "21" || string(in.Output) != "42" || in.HistoryLen != int64(len(info.History)) ||
		!in.CreatedAt.Equal(info.CreatedAt) {
		t.Fatalf("Instance = %+v; Inspect = %+v", in, info.Instance)
	}
	if _, err := sys.Instance(ctx, "nobody"); !errors.Is(err, actor.ErrNotFound) {
		t.Fatalf("unknown ID: %v", err)
	}
}
