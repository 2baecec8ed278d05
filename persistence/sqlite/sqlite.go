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
	// Readers is the number of read connections. Default 4.
	Readers int
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
	if o.Readers <= 0 {
		o.Readers = 4
	}
	return nil
}

// Store is the SQLite driver. Create it with Open.
type Store struct {
	path string
	opts Options
	w    *sql.DB // exactly one connection: the group-commit writer
	r    *sql.DB // read-only pool

	reqs    chan *writeReq
	closeMu sync.RWMutex
	closed  bool
	done    chan struct{}

	st stmts
}

var _ persistence.Store = (*Store)(nil)

// writeReq is one unit of work for the writer goroutine. fn runs inside a
// savepoint of the shared transaction; its error rolls back only its own work.
type writeReq struct {
	fn   func(tx *sql.Tx) error
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
	w, err := sql.Open("sqlite", pragmas("_txlock", "immediate"))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := migrate(ctx, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: migrate %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", pragmas("_pragma", "query_only(1)"))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	r.SetMaxOpenConns(opts.Readers)
	r.SetMaxIdleConns(opts.Readers)
	s := &Store{path: path, opts: opts, w: w, r: r, reqs: make(chan *writeReq, 4096), done: make(chan struct{})}
	if err := s.st.prepare(ctx, w); err != nil {
		s.w.Close()
		s.r.Close()
		return nil, fmt.Errorf("sqlite: prepare %s: %w", path, err)
	}
	go s.writer()
	return s, nil
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

func migrate(ctx context.Context, db *sql.DB) error {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	// BEGIN IMMEDIATE (the writer DSN's txlock) serialises concurrent
	// openers: the second waits, then sees the versions the first applied.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return err
	}
	for _, name := range names {
		v, err := strconv.Atoi(strings.SplitN(filepath.Base(name), "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: bad version: %w", name, err)
		}
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
	return errors.Join(s.w.Close(), s.r.Close())
}

// write queues fn for the writer and waits for its commit.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	req := &writeReq{fn: fn, done: make(chan struct{})}
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
// previous commit was on disk and applies them in one transaction, each in
// its own savepoint so that one failing step does not fail its neighbours.
func (s *Store) writer() {
	defer close(s.done)
	batch := make([]*writeReq, 0, s.opts.MaxBatch)
	for {
		req, ok := <-s.reqs
		if !ok {
			return
		}
		batch = append(batch[:0], req)
	fill:
		for len(batch) < s.opts.MaxBatch {
			select {
			case r, ok := <-s.reqs:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		s.commit(batch)
	}
}

func (s *Store) commit(batch []*writeReq) {
	ctx := context.Background()
	fail := func(err error) {
		for _, r := range batch {
			if r.err == nil {
				r.err = err
			}
			close(r.done)
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		fail(fmt.Errorf("sqlite: begin: %w", err))
		return
	}
	single := len(batch) == 1
	for _, r := range batch {
		if single {
			r.err = r.fn(tx)
			continue
		}
		if _, err := tx.Exec(`SAVEPOINT step`); err != nil {
			r.err = fmt.Errorf("sqlite: savepoint: %w", err)
			continue
		}
		r.err = r.fn(tx)
		if r.err != nil {
			if _, err := tx.Exec(`ROLLBACK TO step`); err != nil {
				tx.Rollback() //nolint:errcheck
				fail(fmt.Errorf("sqlite: rollback to savepoint: %w", err))
				return
			}
		}
		if _, err := tx.Exec(`RELEASE step`); err != nil {
			tx.Rollback() //nolint:errcheck
			fail(fmt.Errorf("sqlite: release savepoint: %w", err))
			return
		}
	}
	if single && batch[0].err != nil {
		if err := tx.Rollback(); err != nil {
			batch[0].err = errors.Join(batch[0].err, err)
		}
		close(batch[0].done)
		return
	}
	if err := tx.Commit(); err != nil {
		cerr := fmt.Errorf("sqlite: commit: %w", err)
		for _, r := range batch {
			r.err = cerr
		}
		fail(cerr)
		return
	}
	for _, r := range batch {
		close(r.done)
	}
}

func ns(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v)
}
