package actor_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// The child of TestTxActivityKilled: it spawns the workflow, and its
// transactional activity writes, says WROTE and waits to be killed.
func init() { registerChildRole("tx-write-then-wait", txWriteThenWait) }

const txCrashID = "tx-crash"

func txCrashWorkflow(act func(ctx context.Context, tx actor.Tx, k string) (int64, error)) (*actor.WorkflowDef[string, int64], *actor.ActivityDef[string, int64]) {
	inc := actor.TxActivity("inc", act)
	return actor.Workflow("tx-crash", func(ctx *actor.Context, k string) (int64, error) { return inc.Run(ctx, k) }), inc
}

func txWriteThenWait() int {
	ctx := context.Background()
	st, err := storeurl.Open(ctx, os.Getenv("NORN_CHILD_STORE"))
	if err != nil {
		return childFail("open store: %v", err)
	}
	wf, _ := txCrashWorkflow(func(ctx context.Context, tx actor.Tx, k string) (int64, error) {
		n, err := incCounter(ctx, tx, k)
		if err != nil {
			return 0, err
		}
		childSay("WROTE %d", n)
		<-ctx.Done() // the parent kills the process first
		return n, ctx.Err()
	})
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(wf), NodeID: "child", LeaseTTL: time.Second})
	if err != nil {
		return childFail("start: %v", err)
	}
	if _, err := actor.Spawn(ctx, sys, wf, "k", actor.WithID(txCrashID)); err != nil {
		return childFail("spawn: %v", err)
	}
	select {}
}

// A process killed between a transactional activity's write and the
// record of its result leaves neither: the node that takes over runs the
// activity again, and the counter counts one.
func TestTxActivityKilled(t *testing.T) {
	t.Parallel()
	for name, url := range crashStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := url(t)
			ctx := testutil.Ctx(t, 2*time.Minute)
			st, err := storeurl.Open(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			testutil.ExecTx(t, st, txCounterTable)

			child := startChild(t, "tx-write-then-wait", "NORN_CHILD_STORE="+u)
			if got := child.waitLine(t, "WROTE", time.Minute); got != "WROTE 1" {
				t.Fatalf("child said %q, want WROTE 1", got)
			}
			child.kill9(t)

			var runs atomic.Int32
			wf, _ := txCrashWorkflow(func(ctx context.Context, tx actor.Tx, k string) (int64, error) {
				runs.Add(1)
				return incCounter(ctx, tx, k)
			})
			sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), NodeID: "parent",
				RecoveryInterval: 100 * time.Millisecond})
			n, err := actor.Await(ctx, sys, wf, actor.PID(txCrashID))
			if err != nil || n != 1 || runs.Load() != 1 {
				t.Fatalf("result %d, %v after %d runs here; want 1 after 1 (the killed write rolled back)", n, err, runs.Load())
			}
			if c := testutil.QueryInt(t, st, txCounterGet, "k"); c != 1 {
				t.Fatalf("counter = %d, want 1", c)
			}
		})
	}
}
