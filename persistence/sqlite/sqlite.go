package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/gather"
	"github.com/nornlabs/norn/persistence/internal/rotate"
	"github.com/nornlabs/norn/persistence/internal/rowcodec"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Synchronous is SQLite's durability setting (PRAGMA synchronous).
type Synchronous string

// Durability settings. See the package doc for why Full is the default.
const (
	Full   Synchronous = "FULL"
	Normal Synchronous = "NORMAL"
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// Synchronous is PRAGMA synchronous. Default Full: every commit is on
	// disk before Apply returns.
	Synchronous Synchronous
	// BusyTimeout is how long a write waits for another process's write
	// lock. Default 10s.
	BusyTimeout time.Duration
	// MaxBatch caps how many steps share one commit. Default 512.
	MaxBatch int
	// CommitDelay is how long the writer may wait, before a commit, for
	// more steps when fewer are queued than the previous commit carried
	// (PostgreSQL's commit_delay, for the same reason): the callers that
	// commit answered are usually back with their next step within tens
	// of microseconds, and sharing this commit saves them waiting for the
	// whole next one. A lone caller never waits. Default 50µs; negative
	// turns it off.
	CommitDelay time.Duration
	// Readers is the number of read connections. Default 4.
	Readers int
	// Commits, if set, learns of every group commit (steps, duration,
	// failure), for metrics.
	Commits persistence.CommitObserver
	// WakePoll is how often Listen looks for wake-ups that client
	// processes requested (see RequestWake): the delay between, say, a
	// `norn cancel` and the node acting on it. Each look is one indexed
	// read. Default 100ms.
	WakePoll time.Duration
	// TxTimeout bounds how long a transactional step (ApplyTx) may run
	// its caller's function while it holds the writer, which every other
	// write of every process sharing the file waits for meanwhile. Past it
	// the function's statements are interrupted, the transaction is rolled
	// back and ApplyTx fails with persistence.ErrTxTimeout. Default 5s.
	TxTimeout time.Duration
	// NoCreate makes Open fail with persistence.ErrNoSchema, creating
	// nothing, when the file does not exist or holds no Norn schema, for
	// tools that only read. An older Norn schema is still migrated.
	NoCreate bool
}

func (o *Options) fill() error {
	if o.Synchronous == "" {
		o.Synchronous = Full
	}
	if o.Synchronous != Full && o.Synchronous != Normal {
		return fmt.Errorf("sqlite: unknown synchronous setting %q (want FULL or NORMAL)", o.Synchronous)
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 10 * time.Second
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 512
	}
	if o.CommitDelay == 0 {
		o.CommitDelay = 50 * time.Microsecond
	}
	if o.Readers <= 0 {
		o.Readers = 4
	}
	if o.TxTimeout <= 0 {
		o.TxTimeout = 5 * time.Second
	}
	if o.WakePoll <= 0 {
		o.WakePoll = 100 * time.Millisecond
	}
	return nil
}

// Store is the SQLite driver. Create it with Open.
type Store struct {
	path string
	opts Options
	w    *sql.DB // exactly one connection: the group-commit writer
	r    *sql.DB // read-only pool
	// cursors move the competing subscribers each queued message names
	// on through all of a channel's (see channelSubs).
	cursors rotate.Cursors

	reqs    chan *writeReq
	closeMu sync.RWMutex
	closed  bool
	done    chan struct{}

	// observers learn of commits besides opts.Commits (ObserveCommits).
	observers persistence.CommitObservers

	st  stmts
	rst readStmts
	ob  outboxStmts
	// txStmts are the writer's statements bound to its current
	// transaction (see stmt). The old transaction stays referenced until
	// the next one, so its address cannot be reused meanwhile.
	txStmts struct {
		tx    *sql.Tx
		bound map[*sql.Stmt]*sql.Stmt
	}
}

var _ persistence.Store = (*Store)(nil)

// writeReq is one unit of work for the writer goroutine. fn runs inside a
// savepoint of the shared transaction; its error rolls back only its own work.
type writeReq struct {
	fn func(tx *sql.Tx) error
	// simple requests fail, if at all, before their first write, so they
	// need no savepoint of their own (see commit).
	simple bool
	// tx requests (transactional steps) run caller code in the
	// transaction: they must never be redone, which would run it twice,
	// so a batch that holds one has a savepoint around every request
	// from the start (see commit).
	tx   bool
	err  error
	done chan struct{}
}

// Open opens (creating if needed) the database at path and applies
// migrations. Several processes may open the same file at once.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	if opts.NoCreate {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("sqlite: %s does not exist: %w", path, persistence.ErrNoSchema)
		}
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("sqlite: create directory for %s: %w", path, err)
		}
	}
	pragmas := func(extra ...string) string {
		q := url.Values{}
		q.Add("_pragma", "busy_timeout("+strconv.FormatInt(opts.BusyTimeout.Milliseconds(), 10)+")")
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous("+string(opts.Synchronous)+")")
		q.Add("_pragma", "foreign_keys(OFF)")
		for i := 0; i+1 < len(extra); i += 2 {
			q.Add(extra[i], extra[i+1])
		}
		return "file:" + path + "?" + q.Encode()
	}
	// The writer's savepoint journal (the savepoints of the steps in a
	// shared commit that can fail part-way) spills to a temporary file past
	// 64 KiB and then costs two write syscalls per page; in memory it is a
	// copy. Readers keep temp files on disk: their sorts can be large.
	w, err := sql.Open("sqlite", pragmas("_txlock", "immediate", "_pragma", "temp_store(MEMORY)"))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := retryBusy(ctx, opts.BusyTimeout, func() error { return w.PingContext(ctx) }); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := retryBusy(ctx, opts.BusyTimeout, func() error { return migrate(ctx, w, pragmas(), opts.NoCreate) }); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: migrate %s: %w", path, err)
	}
	if err := fillBuckets(ctx, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: fill in buckets in %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", pragmas("_pragma", "query_only(1)"))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	r.SetMaxOpenConns(opts.Readers)
	r.SetMaxIdleConns(opts.Readers)
	s := &Store{path: path, opts: opts, w: w, r: r, reqs: make(chan *writeReq, 4096), done: make(chan struct{})}
	if err := errors.Join(s.st.prepare(ctx, w), s.rst.prepare(ctx, r), s.ob.prepare(ctx, w, r)); err != nil {
		s.w.Close()
		s.r.Close()
		return nil, fmt.Errorf("sqlite: prepare %s: %w", path, err)
	}
	go s.writer()
	return s, nil
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// upToDate reports whether schema_migrations lists every version in want.
// Not a count of its rows: a database that a build with another set of
// migrations migrated (one with a later migration but not an earlier one
// of this build's) may hold as many rows and still miss a version.
func upToDate(ctx context.Context, dsn string, want []int) bool {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return false
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return false
	}
	defer rows.Close()
	have := map[int]bool{}
	for rows.Next() {
		var v int
		if rows.Scan(&v) != nil {
			return false
		}
		have[v] = true
	}
	if rows.Err() != nil {
		return false
	}
	for _, v := range want {
		if !have[v] {
			return false
		}
	}
	return true
}

// retryBusy retries fn while SQLite reports the database locked. Switching a
// new file to WAL mode takes an exclusive lock that the busy handler does not
// wait for, so processes opening one new file at once need this.
func retryBusy(ctx context.Context, limit time.Duration, fn func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := fn()
		if err == nil || !strings.Contains(err.Error(), "SQLITE_BUSY") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func migrate(ctx context.Context, db *sql.DB, readDSN string, noCreate bool) error {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	versions := make([]int, len(names))
	for i, name := range names {
		if versions[i], err = strconv.Atoi(strings.SplitN(filepath.Base(name), "_", 2)[0]); err != nil {
			return fmt.Errorf("migration %s: bad version: %w", name, err)
		}
	}
	// Look without taking the write lock first: a busy writer in another
	// process would keep this opener waiting for nothing.
	if upToDate(ctx, readDSN, versions) {
		return nil
	}
	// BEGIN IMMEDIATE (the writer DSN's txlock) serialises concurrent
	// openers: the second waits, then sees the versions the first applied.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	if noCreate {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return persistence.ErrNoSchema
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return err
	}
	for i, name := range names {
		v := versions[i]
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, v).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		body, err := migrationFS.ReadFile(name)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("migration %s: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations(version, applied_at) VALUES (?, ?)`, v, time.Now().UnixNano()); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// bucketChunk is how many instances one transaction of fillBuckets updates:
// other processes' writers wait for it, so it takes turns with them.
const bucketChunk = 1000

// fillBuckets sets the bucket of the rows written before migration 0005,
// which it left at -1 (SQL cannot compute BucketOf), in chunks, each its
// own transaction. Every Open looks, so rows that a process of an older
// release wrote meanwhile are filled in by the next one to open.
func fillBuckets(ctx context.Context, db *sql.DB) error {
	// Look without the write lock first: usually every row has its bucket,
	// and a busy writer in another process would keep this opener waiting
	// for nothing.
	var todo bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM instances WHERE bucket < 0)
		OR EXISTS (SELECT 1 FROM timers WHERE bucket < 0)`).Scan(&todo); err != nil || !todo {
		return err
	}
	for _, q := range []struct{ what, pick, set string }{
		{"instances", `SELECT id FROM instances WHERE bucket < 0 LIMIT ?`,
			`UPDATE instances SET bucket = ? WHERE id = ? AND bucket < 0`},
		// A timer is in its instance's bucket (the instance may be gone).
		// No DISTINCT: it would read timers in key order, from the start
		// each chunk, rather than the few with bucket -1 by the index.
		{"timers", `SELECT instance_id FROM timers WHERE bucket < 0 LIMIT ?`,
			`UPDATE timers SET bucket = ? WHERE instance_id = ? AND bucket < 0`},
	} {
		for {
			n, err := fillBucketChunk(ctx, db, q.pick, q.set)
			if err != nil {
				return fmt.Errorf("%s: %w", q.what, err)
			}
			if n < bucketChunk {
				break
			}
		}
	}
	return nil
}

// fillBucketChunk sets the bucket of up to bucketChunk rows, whose instance
// IDs pick lists, with set (args: bucket, ID), in one transaction. It
// returns how many rows pick listed.
func fillBucketChunk(ctx context.Context, db *sql.DB, pick, set string) (int, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	rows, err := tx.QueryContext(ctx, pick, bucketChunk)
	if err != nil {
		return 0, err
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, err
	}
	upd, err := tx.PrepareContext(ctx, set)
	if err != nil {
		return 0, err
	}
	defer upd.Close()
	for _, id := range distinct(ids) {
		if _, err := upd.ExecContext(ctx, persistence.BucketOf(id), id); err != nil {
			return 0, err
		}
	}
	return len(ids), tx.Commit()
}

// distinct drops repeated IDs (an instance's timers), keeping the order.
func distinct(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// Close stops the writer after it finishes queued work and closes the
// database.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	close(s.reqs)
	s.closeMu.Unlock()
	<-s.done
	s.st.close()
	s.rst.close()
	s.ob.close()
	return errors.Join(s.w.Close(), s.r.Close())
}

// write queues fn for the writer and waits for its commit.
func (s *Store) write(ctx context.Context, simple bool, fn func(tx *sql.Tx) error) error {
	return s.submit(ctx, &writeReq{fn: fn, simple: simple, done: make(chan struct{})})
}

// submit queues req for the writer and waits for its commit.
func (s *Store) submit(ctx context.Context, req *writeReq) error {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return persistence.ErrStoreClosed
	}
	select {
	case s.reqs <- req:
	case <-ctx.Done():
		s.closeMu.RUnlock()
		return ctx.Err()
	}
	s.closeMu.RUnlock()
	// Once queued the request is applied whatever the caller's context does,
	// so wait for the outcome: returning early would hide a commit.
	<-req.done
	return req.err
}

// writer is the group-commit loop: it takes every request queued while the
// previous commit was on disk (and waits up to CommitDelay for more, see
// gather) and applies them in one transaction; a step that can fail after
// writing gets a savepoint, so that it does not fail its neighbours (see
// commitBatch).
func (s *Store) writer() {
	defer close(s.done)
	g := gather.New(s.reqs, s.opts.MaxBatch, s.opts.CommitDelay)
	for {
		batch, ok := g.Next()
		if !ok {
			return
		}
		s.commit(batch)
	}
}

// ObserveCommits adds o to the observers of this store's commits.
func (s *Store) ObserveCommits(o persistence.CommitObserver) (remove func()) {
	return s.observers.Add(o)
}

func (s *Store) commit(batch []*writeReq) {
	start := time.Now()
	savepointAll := false
	for _, r := range batch {
		savepointAll = savepointAll || r.tx
	}
	done, err := s.commitBatch(batch, savepointAll)
	if !done {
		// A simple request failed after writing: redo the batch with a
		// savepoint around every request.
		_, err = s.commitBatch(batch, true)
	}
	ci := persistence.CommitInfo{Driver: "sqlite", Steps: len(batch), Duration: time.Since(start), Err: err}
	if s.opts.Commits != nil {
		s.opts.Commits.ObserveCommit(ci)
	}
	s.observers.Notify(ci)
	// Answered once observed: a caller that saw its write return sees it
	// counted.
	for _, r := range batch {
		close(r.done)
	}
}

// commitBatch applies batch in one transaction, leaving the answers (each
// request's err; commit closes done) to its caller. Each request runs in its own
// savepoint unless it is simple (it fails before writing anything) or alone.
// It returns false, having rolled back and answered nobody, when a simple
// request failed in an unexpected way; and the error that failed the whole
// transaction, if one did.
func (s *Store) commitBatch(batch []*writeReq, savepointAll bool) (bool, error) {
	ctx := context.Background()
	finish := func(err error) (bool, error) {
		for _, r := range batch {
			if err != nil {
				r.err = err
			}
		}
		return true, err
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return finish(fmt.Errorf("sqlite: begin: %w", err))
	}
	single := len(batch) == 1
	for _, r := range batch {
		r.err = nil
		if single || (r.simple && !savepointAll) {
			r.err = r.fn(tx)
			if r.err != nil && !single && !failsBeforeWriting(r.err) {
				tx.Rollback() //nolint:errcheck // redone with savepoints
				return false, nil
			}
			continue
		}
		if _, err := s.stmt(tx, s.st.savepoint).Exec(); err != nil {
			tx.Rollback() //nolint:errcheck
			return finish(fmt.Errorf("sqlite: savepoint: %w", err))
		}
		r.err = r.fn(tx)
		if r.err != nil {
			if _, err := s.stmt(tx, s.st.rollbackTo).Exec(); err != nil {
				tx.Rollback() //nolint:errcheck
				return finish(fmt.Errorf("sqlite: rollback to savepoint: %w", err))
			}
		}
		if _, err := s.stmt(tx, s.st.release).Exec(); err != nil {
			tx.Rollback() //nolint:errcheck
			return finish(fmt.Errorf("sqlite: release savepoint: %w", err))
		}
	}
	if single && batch[0].err != nil {
		if err := tx.Rollback(); err != nil {
			batch[0].err = errors.Join(batch[0].err, err)
		}
		return true, nil
	}
	if err := tx.Commit(); err != nil {
		return finish(fmt.Errorf("sqlite: commit: %w", err))
	}
	return finish(nil)
}

// failsBeforeWriting lists the errors a simple request returns only before
// its first write.
func failsBeforeWriting(err error) bool {
	for _, e := range []error{persistence.ErrFenced, persistence.ErrHistoryGap, persistence.ErrNotFound,
		persistence.ErrInstanceDone, persistence.ErrInvalidRecord, persistence.ErrLeaseHeld} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func ns(t time.Time) int64 { return rowcodec.NS(t) }

func fromNS(v int64) time.Time { return rowcodec.FromNS(v) }
