package actor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
	"github.com/nornlabs/norn/supervisor"
)

// The user's own table that the transactional activities below write, in
// the store's database; the same SQL on both stores.
const (
	txCounterTable = `CREATE TABLE IF NOT EXISTS tx_counter (k TEXT PRIMARY KEY, n BIGINT NOT NULL)`
	txCounterInc   = `INSERT INTO tx_counter (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = tx_counter.n + 1`
	txCounterGet   = `SELECT n FROM tx_counter WHERE k = $1`
)

func txStores(t *testing.T) map[string]func(t *testing.T) persistence.Store {
	return map[string]func(t *testing.T) persistence.Store{
		"sqlite": func(t *testing.T) persistence.Store { return testutil.OpenSQLite(t, testutil.SQLitePath(t)) },
		"postgres": func(t *testing.T) persistence.Store {
			return openPostgres(t, testutil.PostgresURL(t))
		},
	}
}

func incCounter(ctx context.Context, tx actor.Tx, k string) (int64, error) {
	if _, err := tx.Exec(ctx, txCounterInc, k); err != nil {
		return 0, err
	}
	var n int64
	err := tx.QueryRow(ctx, txCounterGet, k).Scan(&n)
	return n, err
}

// Each call's write commits with its recorded result, and its outgoing
// event with both; a failed attempt's write and event are rolled back.
func TestTxActivity(t *testing.T) {
	t.Parallel()
	for name, open := range txStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := open(t)
			testutil.ExecTx(t, st, txCounterTable)
			var attempts atomic.Int32
			inc := actor.TxActivity("inc", func(ctx context.Context, tx actor.Tx, k string) (int64, error) {
				n, err := incCounter(ctx, tx, k)
				if err != nil {
					return 0, err
				}
				if _, err := actor.EmitTx(ctx, "", "counted", []byte(fmt.Sprintf(`{"n":%d}`, n))); err != nil {
					return 0, err
				}
				if attempts.Add(1) == 2 {
					// The second call's first attempt: written, emitted, then failed.
					return 0, errors.New("flaky")
				}
				return n, nil
			}, actor.WithRetry(supervisor.RetryPolicy{MaxAttempts: 3, Initial: time.Millisecond, MaxInterval: time.Millisecond, Multiplier: 1}))
			wf := actor.Workflow("tx-counter", func(ctx *actor.Context, k string) ([]int64, error) {
				var got []int64
				for i := 0; i < 3; i++ {
					n, err := inc.Run(ctx, k)
					if err != nil {
						return nil, err
					}
					got = append(got, n)
				}
				return got, nil
			})
			sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf)})
			ctx := testutil.Ctx(t, 60*time.Second)
			pid, err := actor.Spawn(ctx, sys, wf, "k1")
			if err != nil {
				t.Fatal(err)
			}
			got, err := actor.Await(ctx, sys, wf, pid)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != "[1 2 3]" || attempts.Load() != 4 {
				t.Fatalf("results %v after %d attempts; want [1 2 3] after 4", got, attempts.Load())
			}
			if n := testutil.QueryInt(t, st, txCounterGet, "k1"); n != 3 {
				t.Fatalf("counter = %d, want 3 (the failed attempt's write rolled back)", n)
			}
			recs, err := st.ListOutbox(ctx, "", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range recs {
				ids = append(ids, r.ID+"="+string(r.Data))
			}
			want := fmt.Sprintf("[%[1]s/inc:1/emit:1={\"n\":1} %[1]s/inc:2/emit:1={\"n\":2} %[1]s/inc:3/emit:1={\"n\":3}]", pid)
			if fmt.Sprint(ids) != want {
				t.Fatalf("outbox %v, want %s", ids, want)
			}
			info, err := sys.Inspect(ctx, pid)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, e := range info.History {
				kinds = append(kinds, string(e.Kind))
			}
			if k := strings.Join(kinds, " "); !strings.Contains(k, " activity activity_retry activity activity ") {
				t.Fatalf("history %s: want the failed attempt recorded as a retry", k)
			}
		})
	}
}

// On SQLite a transactional attempt that holds the writer past TxTimeout
// is rolled back and retried as a timed-out attempt.
func TestTxActivitySQLiteTimeout(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), testutil.SQLitePath(t), sqlite.Options{TxTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	testutil.ExecTx(t, st, txCounterTable)
	var attempts atomic.Int32
	inc := actor.TxActivity("inc", func(ctx context.Context, tx actor.Tx, k string) (int64, error) {
		n, err := incCounter(ctx, tx, k)
		if err != nil {
			return 0, err
		}
		if attempts.Add(1) == 1 {
			<-ctx.Done() // held past the store's limit
			return 0, ctx.Err()
		}
		return n, nil
	}, actor.WithRetry(supervisor.RetryPolicy{MaxAttempts: 3, Initial: time.Millisecond, MaxInterval: time.Millisecond, Multiplier: 1}))
	wf := actor.Workflow("tx-timeout", func(ctx *actor.Context, k string) (int64, error) { return inc.Run(ctx, k) })
	var retried atomic.Value
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), Hooks: hookFunc(func(e actor.HookEvent) {
		if e.Kind == actor.HookActivityRetried {
			retried.Store(e.Err)
		}
	})})
	ctx := testutil.Ctx(t, 60*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, "k")
	if err != nil {
		t.Fatal(err)
	}
	n, err := actor.Await(ctx, sys, wf, pid)
	if err != nil || n != 1 {
		t.Fatalf("result %d, %v; want 1 (the timed-out attempt's write rolled back)", n, err)
	}
	if e, _ := retried.Load().(error); !errors.Is(e, actor.ErrActivityTimeout) || !errors.Is(e, persistence.ErrTxTimeout) {
		t.Fatalf("retried after %v, want ErrActivityTimeout and ErrTxTimeout", e)
	}
	if c := testutil.QueryInt(t, st, txCounterGet, "k"); c != 1 {
		t.Fatalf("counter = %d, want 1", c)
	}
}

// An activation that lost its lease while its transactional attempt ran
// commits nothing of it: the write goes with the fenced step, and the
// activation that takes over runs the activity again, once.
func TestTxActivityFenced(t *testing.T) {
	t.Parallel()
	st := openPostgres(t, testutil.PostgresURL(t))
	testutil.ExecTx(t, st, txCounterTable)
	wrote, resume := make(chan struct{}), make(chan struct{})
	var attempts atomic.Int32
	inc := actor.TxActivity("inc", func(ctx context.Context, tx actor.Tx, k string) (int64, error) {
		n, err := incCounter(ctx, tx, k)
		if err != nil {
			return 0, err
		}
		if attempts.Add(1) == 1 {
			close(wrote)
			<-resume
		}
		return n, nil
	})
	wf := actor.Workflow("tx-fenced", func(ctx *actor.Context, k string) (int64, error) { return inc.Run(ctx, k) })
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), NodeID: "node-a",
		RecoveryInterval: 50 * time.Millisecond})
	ctx := testutil.Ctx(t, 60*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, "k")
	if err != nil {
		t.Fatal(err)
	}
	<-wrote
	// What a cluster does to a node it declared dead: its leases go, their
	// epochs move on.
	if err := st.ReleaseLeases(ctx, "node-a"); err != nil {
		t.Fatal(err)
	}
	close(resume)
	n, err := actor.Await(ctx, sys, wf, pid)
	if err != nil || n != 1 || attempts.Load() != 2 {
		t.Fatalf("result %d, %v after %d attempts; want 1 after 2 (the fenced attempt's write rolled back)", n, err, attempts.Load())
	}
	if c := testutil.QueryInt(t, st, txCounterGet, "k"); c != 1 {
		t.Fatalf("counter = %d, want 1", c)
	}
}
