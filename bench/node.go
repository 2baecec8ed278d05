package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// target is one -store value.
type target struct {
	label string // shown in the table
	url   string // empty: a fresh SQLite file in a temp dir per run
	seed  string // a temp SQLite target's file starts as a copy of this one (-prefill-ended)
}

func (t target) temp() bool { return t.url == "" }

func (t target) postgres() bool {
	return strings.HasPrefix(t.url, "postgres://") || strings.HasPrefix(t.url, "postgresql://")
}

// sqlitePath is the database file of an explicit SQLite target.
func (t target) sqlitePath() string {
	if t.temp() || t.postgres() {
		return ""
	}
	return strings.TrimPrefix(t.url, "sqlite://")
}

// parseTargets splits a comma-separated -store value. The word "sqlite"
// (or an empty value) means a fresh temp SQLite file for every run.
func parseTargets(s string) ([]target, error) {
	var out []target
	seen := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		var t target
		switch {
		case part == "" || part == "sqlite":
			t = target{label: "sqlite"}
		case strings.HasPrefix(part, "postgres://"), strings.HasPrefix(part, "postgresql://"):
			u, err := url.Parse(part)
			if err != nil {
				return nil, fmt.Errorf("-store %q: %w", redact(part), err)
			}
			t = target{label: "postgres", url: part}
			if u.Host != "" {
				t.label += "@" + u.Host + u.Path
			}
		case strings.Contains(part, "://") && !strings.HasPrefix(part, "sqlite://"):
			return nil, fmt.Errorf("-store %q: want sqlite, sqlite://PATH, a file path or postgres://", redact(part))
		default:
			t = target{label: "sqlite:" + filepath.Base(strings.TrimPrefix(part, "sqlite://")), url: part}
		}
		seen[t.label]++
		if n := seen[t.label]; n > 1 {
			t.label = fmt.Sprintf("%s#%d", t.label, n)
		}
		out = append(out, t)
	}
	return out, nil
}

// redact drops a password from a URL for messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}

// node is one store plus one System started on it.
type node struct {
	t      target
	store  persistence.Store
	sys    *actor.System
	path   string // SQLite database file, "" for postgres
	tmpDir string // removed by Close
	closed atomic.Bool
}

// startNode opens the target's store (a fresh temp file for the default
// SQLite target) and starts a System on it with logging discarded.
func startNode(ctx context.Context, t target, cfg actor.Config) (*node, error) {
	n := &node{t: t}
	u := t.url
	if t.temp() {
		dir, err := os.MkdirTemp("", "norn-bench-")
		if err != nil {
			return nil, err
		}
		n.tmpDir = dir
		n.path = filepath.Join(dir, "norn.db")
		u = "sqlite://" + n.path
		if t.seed != "" {
			if err := copyFile(t.seed, n.path); err != nil {
				n.removeTemp()
				return nil, fmt.Errorf("copy the prefilled store: %w", err)
			}
		}
	} else {
		n.path = t.sqlitePath()
	}
	st, err := storeurl.Open(ctx, u)
	if err != nil {
		n.removeTemp()
		return nil, fmt.Errorf("open store %s: %w", t.label, err)
	}
	n.store = st
	cfg.Store = st
	cfg.Logger = slog.New(slog.DiscardHandler)
	sys, err := actor.Start(ctx, cfg)
	if err != nil {
		st.Close()
		n.removeTemp()
		return nil, fmt.Errorf("start system on %s: %w", t.label, err)
	}
	n.sys = sys
	return n, nil
}

// Close stops the System, closes the store and removes a temp database.
func (n *node) Close() error {
	if n == nil || n.closed.Swap(true) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := n.sys.Stop(ctx)
	err = errors.Join(err, n.store.Close())
	n.removeTemp()
	return err
}

func (n *node) removeTemp() {
	if n.tmpDir != "" {
		os.RemoveAll(n.tmpDir)
	}
}

// diskBytes is the store's size on disk: the SQLite file plus its -wal and
// -shm, or pg_database_size of the PostgreSQL database (which includes
// whatever else lives in it).
func (n *node) diskBytes(ctx context.Context) (int64, error) {
	if n.t.postgres() {
		conn, err := pgx.Connect(ctx, n.t.url)
		if err != nil {
			return -1, err
		}
		defer conn.Close(context.Background())
		var size int64
		err = conn.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&size)
		return size, err
	}
	var total int64
	for _, suffix := range []string{"", "-wal", "-shm"} {
		fi, err := os.Stat(n.path + suffix)
		if err != nil {
			if suffix != "" && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return -1, err
		}
		total += fi.Size()
	}
	return total, nil
}

// countStatus counts, via the store, how many of ids are in status.
func countStatus(ctx context.Context, st persistence.Store, workflow string, status persistence.Status, ids map[actor.PID]bool) (int, error) {
	n, after := 0, ""
	for {
		page, err := st.List(ctx, persistence.ListFilter{Status: []persistence.Status{status}, Workflow: workflow, After: after, Limit: 5000})
		if err != nil {
			return n, err
		}
		for _, in := range page {
			if ids[actor.PID(in.ID)] {
				n++
			}
		}
		if len(page) < 5000 {
			return n, nil
		}
		after = page[len(page)-1].ID
	}
}

// waitStatus polls the store until all of ids are in status, or ctx ends;
// it returns the last count.
func waitStatus(ctx context.Context, st persistence.Store, workflow string, status persistence.Status, ids map[actor.PID]bool) (int, error) {
	for {
		n, err := countStatus(ctx, st, workflow, status, ids)
		if err != nil || n == len(ids) {
			return n, err
		}
		select {
		case <-ctx.Done():
			return n, fmt.Errorf("%d of %d %s: %w", n, len(ids), status, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// parallel runs fn(i) for every i in [0, n) on the given number of worker
// goroutines. It stops at the first error and returns it.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, min(workers, n)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// awaitAll waits, with a bounded pool, until every pid has ended, and
// returns how many did not complete successfully and the first such error.
func awaitAll(ctx context.Context, sys *actor.System, pids []actor.PID, workers int) (failed int, first error) {
	var mu sync.Mutex
	_ = parallel(ctx, len(pids), workers, func(ctx context.Context, i int) error {
		inst, err := sys.AwaitDone(ctx, pids[i])
		if err == nil && inst.Status != persistence.StatusCompleted {
			err = fmt.Errorf("%s ended %s: %s", pids[i], inst.Status, inst.Error)
		}
		if err != nil {
			mu.Lock()
			failed++
			if first == nil {
				first = err
			}
			mu.Unlock()
		}
		return ctx.Err()
	})
	return failed, first
}

// runID makes names (channels) unique per run, so that runs sharing one
// database (postgres, an explicit SQLite file) do not see each other.
func runID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// doneCounter counts distinct indices marked and closes Done when all are.
type doneCounter struct {
	flags []atomic.Bool
	n     atomic.Int64
	done  chan struct{}
	once  sync.Once
}

func newDoneCounter(n int) *doneCounter {
	d := &doneCounter{flags: make([]atomic.Bool, n), done: make(chan struct{})}
	if n == 0 {
		close(d.done)
	}
	return d
}

// mark counts i once; it reports whether this was the first mark of i.
func (d *doneCounter) mark(i int) bool {
	if i < 0 || i >= len(d.flags) || !d.flags[i].CompareAndSwap(false, true) {
		return false
	}
	if d.n.Add(1) == int64(len(d.flags)) {
		d.once.Do(func() { close(d.done) })
	}
	return true
}

func (d *doneCounter) count() int { return int(d.n.Load()) }

// wait blocks until every index is marked or ctx ends.
func (d *doneCounter) wait(ctx context.Context) error {
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%d of %d after timeout: %w", d.count(), len(d.flags), ctx.Err())
	}
}

// stamps are per-index wall-clock times written by workflows (a benchmark
// side channel) and read by the driver; the first write wins.
type stamps []atomic.Int64

func (s stamps) set(i int, t time.Time) bool {
	return i >= 0 && i < len(s) && s[i].CompareAndSwap(0, t.UnixNano())
}

func (s stamps) get(i int) (time.Time, bool) {
	v := s[i].Load()
	return time.Unix(0, v), v != 0
}

// last is the latest stamp (zero time if none).
func (s stamps) last() time.Time {
	var m int64
	for i := range s {
		m = max(m, s[i].Load())
	}
	if m == 0 {
		return time.Time{}
	}
	return time.Unix(0, m)
}

// relationBytes is, for a PostgreSQL store, each of its tables' size with
// their indexes and TOAST (pg_total_relation_size), each index's size, and
// the number of rows in instances; nils for SQLite, whose file size
// diskBytes reports. The store's schema is the one that holds the
// instances table (the bench opens stores with the default schema only).
func (n *node) relationBytes(ctx context.Context) (tables, indexes map[string]int64, count int64, err error) {
	if !n.t.postgres() {
		return nil, nil, 0, nil
	}
	conn, err := pgx.Connect(ctx, n.t.url)
	if err != nil {
		return nil, nil, 0, err
	}
	defer conn.Close(context.Background())
	var schema string
	if err := conn.QueryRow(ctx, `SELECT relnamespace::regnamespace::text FROM pg_class
		WHERE relname = 'instances' AND relkind = 'r' ORDER BY oid LIMIT 1`).Scan(&schema); err != nil {
		return nil, nil, 0, err
	}
	rows, _ := conn.Query(ctx, `SELECT c.relname::text, c.relkind = 'i', CASE c.relkind WHEN 'r' THEN pg_total_relation_size(c.oid)
		ELSE pg_relation_size(c.oid) END FROM pg_class c
		WHERE c.relkind IN ('r', 'i') AND c.relnamespace = $1::regnamespace`, schema)
	tables, indexes = map[string]int64{}, map[string]int64{}
	var name string
	var index bool
	var size int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &index, &size}, func() error {
		if index {
			indexes[name] = size
		} else {
			tables[name] = size
		}
		return nil
	}); err != nil {
		return nil, nil, 0, err
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "instances"}.Sanitize()).Scan(&count); err != nil {
		return nil, nil, 0, err
	}
	return tables, indexes, count, nil
}
