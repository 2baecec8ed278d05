package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence"
)

// The user table the chaintx workload's activities write, in the store's
// database: one row per workflow.
const (
	benchCounterTable = `CREATE TABLE IF NOT EXISTS bench_counter (k TEXT PRIMARY KEY, n BIGINT NOT NULL)`
	benchCounterInc   = `INSERT INTO bench_counter (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = bench_counter.n + 1`
	benchCounterSum   = `SELECT COALESCE(SUM(n), 0) FROM bench_counter WHERE k LIKE $1`
)

// chainVariant is one way of running the chain's three activities.
type chainVariant struct {
	name string
	wf   *actor.WorkflowDef[int, int]
	own  *atomic.Int64 // the activities' own commits (own-write), else nil
}

// ownConn is the user's own connection to the store's database, for the
// own-write variant; opened once the node has created the database.
type ownConn struct {
	exec  func(ctx context.Context, key string) error
	close func()
}

// chainVariants are the chain three ways: plain (activities that write
// nothing, as in the chain workload), own-write (each activity increments
// its workflow's row of a user table in a transaction of its own, then
// Norn records its result: two commits, and the write is at least once),
// and tx (each a transactional activity incrementing the row in the
// transaction that records its result: exactly once).
func chainVariants(conn *atomic.Pointer[ownConn]) []chainVariant {
	chainOf := func(name string, act *actor.ActivityDef[int, int]) *actor.WorkflowDef[int, int] {
		return actor.Workflow(name, func(ctx *actor.Context, n int) (int, error) {
			for range 3 {
				var err error
				if n, err = act.Run(ctx, n); err != nil {
					return 0, err
				}
			}
			return n, nil
		})
	}
	key := func(ctx context.Context) string { i, _ := actor.Info(ctx); return i.InstanceID }
	own := &atomic.Int64{}
	plain := actor.Activity("inc-plain", func(_ context.Context, n int) (int, error) { return n + 1, nil })
	ownWrite := actor.Activity("inc-own", func(ctx context.Context, n int) (int, error) {
		if err := conn.Load().exec(ctx, key(ctx)); err != nil {
			return 0, err
		}
		own.Add(1)
		return n + 1, nil
	})
	tx := actor.TxActivity("inc-tx", func(ctx context.Context, tx actor.Tx, n int) (int, error) {
		if _, err := tx.Exec(ctx, benchCounterInc, key(ctx)); err != nil {
			return 0, err
		}
		return n + 1, nil
	})
	return []chainVariant{
		{name: "plain", wf: chainOf("chain-plain", plain)},
		{name: "own-write", wf: chainOf("chain-own", ownWrite), own: own},
		{name: "tx", wf: chainOf("chain-tx", tx)},
	}
}

// commitCounter counts the store's transactions (persistence.CommitWatcher).
type commitCounter struct{ n atomic.Int64 }

func (c *commitCounter) ObserveCommit(persistence.CommitInfo) { c.n.Add(1) }

// runChainTx runs n chain workflows of each variant, one variant after the
// other on one node, and reports each one's throughput and commits per
// workflow: the store's transactions, plus the activities' own for
// own-write. It checks that the tx variant's counters hold exactly three
// increments per workflow.
func runChainTx(ctx context.Context, r *runner) (result, error) {
	n := size(2000, r.opts.N)
	res := result{N: fmtInt(int64(n)), Unit: "wf/s", Metrics: map[string]float64{}}
	var conn atomic.Pointer[ownConn]
	variants := chainVariants(&conn)
	var defs []actor.Definition
	for _, v := range variants {
		defs = append(defs, v.wf)
	}
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(defs...), PassivateAfter: r.opts.PassivateAfter})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()
	oc, err := openOwn(ctx, nd)
	if err != nil {
		return res, fmt.Errorf("open the user's own connection: %w", err)
	}
	defer oc.close()
	conn.Store(oc)
	if err := execStore(ctx, nd.store, benchCounterTable); err != nil {
		return res, fmt.Errorf("create the user table: %w", err)
	}
	commits := &commitCounter{}
	remove := nd.store.ObserveCommits(commits)
	defer remove()

	for _, v := range variants {
		r.logf("chaintx: %d %s chains", n, v.name)
		c0 := commits.n.Load()
		var o0 int64
		if v.own != nil {
			o0 = v.own.Load()
		}
		wall, err := runChains(ctx, r, nd, v.wf, n)
		if err != nil {
			return res, fmt.Errorf("%s: %w", v.name, err)
		}
		store := float64(commits.n.Load()-c0) / float64(n)
		total := store
		if v.own != nil {
			total += float64(v.own.Load()-o0) / float64(n)
		}
		res.Metrics[v.name+"_wf_per_s"] = rate(n, wall)
		res.Metrics[v.name+"_store_commits_per_wf"] = store
		res.Metrics[v.name+"_commits_per_wf"] = total
		if res.Extra != "" {
			res.Extra += "; "
		}
		res.Extra += fmt.Sprintf("%s %s wf/s, %.2f commits/wf", v.name, fmtRate(rate(n, wall)), total)
		if v.name == "tx" {
			res.Throughput, res.Wall = rate(n, wall), wall
		}
	}
	sum, err := readStoreInt(ctx, nd.store, benchCounterSum, "%")
	if err != nil {
		return res, err
	}
	// own-write and tx both incremented every workflow's row three times.
	if want := int64(2 * 3 * n); sum != want {
		return res, fmt.Errorf("the counters sum to %d, want %d (3 increments per own-write and tx workflow)", sum, want)
	}
	return res, nil
}

// runChains spawns n workflows of wf from -spawners goroutines and waits
// for all of them; it returns the time from the first spawn to the last end.
func runChains(ctx context.Context, r *runner, nd *node, wf *actor.WorkflowDef[int, int], n int) (time.Duration, error) {
	actx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	var awaits sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	t0 := time.Now()
	err := parallel(ctx, n, r.opts.Spawners, func(ctx context.Context, i int) error {
		pid, err := actor.Spawn(ctx, nd.sys, wf, i)
		if err != nil {
			return err
		}
		awaits.Go(func() {
			got, err := actor.Await(actx, nd.sys, wf, pid)
			if err == nil && got != i+3 {
				err = fmt.Errorf("%s returned %d, want %d", pid, got, i+3)
			}
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
		return nil
	})
	awaits.Wait()
	return time.Since(t0), errors.Join(err, firstErr)
}

// openOwn opens the user's own connection to nd's database: each exec
// increments a row in a transaction of its own (one autocommitted
// statement).
func openOwn(ctx context.Context, nd *node) (*ownConn, error) {
	if nd.t.postgres() {
		cfg, err := pgxpool.ParseConfig(nd.t.url)
		if err != nil {
			return nil, err
		}
		// The store made the user table in its schema (the default one).
		cfg.ConnConfig.RuntimeParams["search_path"] = "norn"
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return &ownConn{exec: func(ctx context.Context, key string) error {
			_, err := pool.Exec(ctx, benchCounterInc, key)
			return err
		}, close: pool.Close}, nil
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	db, err := sql.Open("sqlite", "file:"+nd.path+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1) // one writer at a time anyway
	return &ownConn{exec: func(ctx context.Context, key string) error {
		_, err := db.ExecContext(ctx, benchCounterInc, key)
		return err
	}, close: func() { _ = db.Close() }}, nil
}

func execStore(ctx context.Context, st persistence.Store, query string) error {
	_, err := st.ApplyTx(ctx, "", func(ctx context.Context, tx persistence.Tx) error {
		_, err := tx.Exec(ctx, query)
		return err
	}, func() (persistence.Step, error) { return persistence.Step{}, nil })
	return err
}

var errReadOnly = errors.New("bench: read only")

func readStoreInt(ctx context.Context, st persistence.Store, query string, args ...any) (int64, error) {
	var n int64
	_, err := st.ApplyTx(ctx, "", func(ctx context.Context, tx persistence.Tx) error {
		if err := tx.QueryRow(ctx, query, args...).Scan(&n); err != nil {
			return err
		}
		return errReadOnly
	}, func() (persistence.Step, error) { return persistence.Step{}, nil })
	if !errors.Is(err, errReadOnly) {
		return 0, err
	}
	return n, nil
}
