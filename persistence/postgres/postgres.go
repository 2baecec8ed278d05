package postgres

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"net/url"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/rotate"
	"github.com/nornlabs/norn/persistence/internal/rowcodec"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Options configure a Store. The zero value is usable.
type Options struct {
	// MaxConns is the size of the connection pool shared by the writers,
	// reads and lease operations. Listen uses a connection of its own,
	// outside the pool. Default 16, or Writers+TxWriters+4 if that is
	// more; it must exceed Writers+TxWriters. It overrides a
	// pool_max_conns in the URL.
	MaxConns int
	// Writers is the number of group-commit writer goroutines, each
	// committing its own batches on its own connection, in parallel.
	// Default 2. More writers start more, smaller transactions: with 4,
	// one spawner's chain workflows cost 4.2 commits each instead of 2.4,
	// and ran 8-12 % slower on a 2-core server; at 64 spawners both ran
	// alike. Raise it for a server with many cores and many callers.
	Writers int
	// TxWriters is the number of writers of transactional steps
	// (persistence.TxApplier), which group them into transactions as the
	// other writers group steps, each on its own connection. Default 2.
	TxWriters int
	// TxTimeout bounds how long a transactional step may run its caller's
	// function, which holds up the steps that share its transaction
	// meanwhile. Past it the function's statements are cancelled, its
	// writes rolled back, and ApplyTx fails with persistence.ErrTxTimeout.
	// Default 5s.
	TxTimeout time.Duration
	// MaxBatch caps how many steps share one transaction. Default 128.
	// Whatever it is, at most 64 of a group-commit writer's steps run in
	// savepoints of their own (the steps that may fail alone, or every
	// step after a failed batch), which keeps its transaction's
	// subtransactions within PostgreSQL's per-backend cache; the others
	// wait for the next transaction. The writers of transactional steps,
	// each of which runs in savepoints, take at most 64 steps at a time.
	MaxBatch int
	// CommitDelay is how long a writer may wait, before a commit, for more
	// steps when fewer are queued than its previous commit carried: the
	// callers that commit answered are usually back with their next step
	// within tens of microseconds, and sharing this commit saves them
	// waiting for another. After a commit of one step a writer never
	// waits, so a lone caller pays this at most once per writer, just
	// after a burst. Default 50µs; negative turns it off. (This is
	// PostgreSQL's commit_delay, done before the steps reach the server.)
	CommitDelay time.Duration
	// ConnectTimeout bounds each attempt to connect (TCP, TLS and
	// authentication), so that Open fails fast when the server is down or
	// unreachable. A connect_timeout in the URL takes precedence. Default 5s.
	ConnectTimeout time.Duration
	// WriteTimeout bounds one batch commit, lock waits included; the
	// batch's steps fail when it expires. Default 30s.
	WriteTimeout time.Duration
	// Schema holds Norn's tables; it is created if missing and becomes the
	// connections' search_path. Several Norn deployments may share a
	// database under different schemas. Default "norn".
	Schema string
	// Logger receives warnings (a lost listener connection, notifications
	// that could not be sent). Default slog.Default().
	Logger *slog.Logger
	// Commits, if set, learns of every group commit (steps, duration,
	// failure), for metrics.
	Commits persistence.CommitObserver
	// NoCreate makes Open fail with persistence.ErrNoSchema, creating
	// nothing, when the database holds no Norn schema (Schema without its
	// tables), for tools that only read. An older Norn schema is still
	// migrated.
	NoCreate bool
}

func (o *Options) fill() error {
	if o.CommitDelay == 0 {
		o.CommitDelay = 50 * time.Microsecond
	}
	if o.Writers <= 0 {
		o.Writers = 2
	}
	if o.TxWriters <= 0 {
		o.TxWriters = 2
	}
	if o.TxTimeout <= 0 {
		o.TxTimeout = 5 * time.Second
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 16
		if o.MaxConns <= o.Writers+o.TxWriters {
			o.MaxConns = o.Writers + o.TxWriters + 4
		}
	}
	if o.MaxConns <= o.Writers+o.TxWriters {
		return fmt.Errorf("postgres: MaxConns (%d) must exceed Writers+TxWriters (%d+%d), or reads could wait for every writer", o.MaxConns, o.Writers, o.TxWriters)
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 128
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.Schema == "" {
		o.Schema = "norn"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if !schemaRE.MatchString(o.Schema) {
		return fmt.Errorf("postgres: schema name %q: want lower-case letters, digits and underscores, starting with a letter", o.Schema)
	}
	return nil
}

var schemaRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,50}$`)

// Store is the PostgreSQL driver. Create it with Open.
type Store struct {
	opts Options
	// cursors move the competing subscribers each queued message names
	// on through all of a channel's (see competingWindow).
	cursors rotate.Cursors
	target  string // where we connect, for error messages (no password)
	pool    *pgxpool.Pool
	listen  *pgx.ConnConfig // base config for Listen's dedicated connections

	// origin identifies this Store in the wake-up notifications it sends, so
	// that its own Listen skips them.
	origin  string
	channel string // NOTIFY channel

	// outboxChannel is the NOTIFY channel of committed outgoing events
	// (see ListenOutbox).
	outboxChannel string

	chanLocks, instLocks, instBucketLocks int32 // advisory lock spaces, see lockSpace
	// guarded counts down the batches that put every step in a savepoint
	// (see guardedBatches).
	guarded atomic.Int32
	// reruns counts the batches that ran again, every step in a savepoint,
	// after a step without one failed.
	reruns atomic.Int64

	// observers learn of commits besides opts.Commits (ObserveCommits).
	observers persistence.CommitObservers
	// lockFullLogged is when a full lock table was last logged (Unix ns).
	lockFullLogged atomic.Int64

	reqs   chan *writeReq
	txReqs chan *txReq // transactional steps (see ApplyTx)
	// loadReqs are the loads waiting for a loader (see Load).
	loadReqs chan *loadReq
	wake     chan []string // woken IDs of committed batches, for the notifier
	// wakeLost records that a wake-up could not be sent: the next
	// notification asks listeners to rescan.
	wakeLost     atomic.Bool
	wakeMu       sync.RWMutex
	wakeClosed   bool
	notifierDone chan struct{}

	// Wake-up listeners (see othersListening): each holds a shared
	// advisory lock (listenerLocks, lockHash(channel)) on its connection.
	listenerLocks int32
	listenMu      sync.Mutex
	listenPIDs    map[uint32]int // backends of this store's own listeners
	listenGen     uint64         // changes with listenPIDs
	// presenceTTL and presenceLag (nanoseconds; tests change them).
	presenceTTL, presenceLag atomic.Int64
	// The notifier's last look: its answer, time and listenGen.
	others    bool
	othersAt  time.Time
	othersGen uint64

	closeMu sync.RWMutex
	closed  bool
	writers sync.WaitGroup

	closeCtx context.Context // cancelled by Close: stops Listen calls
	stop     context.CancelFunc
	// statsCtx ends the stats keeper (see statsKeeper), first thing in
	// Close.
	statsCtx  context.Context
	stopStats context.CancelFunc
	listeners sync.WaitGroup

	// clockOffset (nanoseconds) shifts the store's reading of the local
	// clock (see now). Only this package's tests set it, to show that no
	// lease time depends on the local clock.
	clockOffset atomic.Int64
}

var (
	_ persistence.Store    = (*Store)(nil)
	_ persistence.Notifier = (*Store)(nil)
)

// Open connects to the database at url (a postgres:// URL or a key=value
// connection string), applies migrations and starts the writers. Several
// processes may open the same database at once: migrations run under an
// advisory lock.
//
// A malformed URL fails at once, an unreachable or unresponsive server
// within Options.ConnectTimeout; the error names the server but never the
// password.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	target := describeTarget(url)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: invalid connection URL %s: %w", target, err)
	}
	cc := cfg.ConnConfig
	target = fmt.Sprintf("%s:%d/%s", cc.Host, cc.Port, cc.Database)
	if cc.ConnectTimeout <= 0 {
		cc.ConnectTimeout = opts.ConnectTimeout
	}
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = "norn"
	}
	cc.RuntimeParams["search_path"] = opts.Schema
	if _, set := cc.RuntimeParams["jit"]; !set {
		// The driver's statements run for a millisecond or less, and a
		// listing whose estimate is high (many workflows times a page of
		// each, see querysql) would spend a hundred milliseconds
		// compiling itself. The URL may still turn it on (jit=on).
		cc.RuntimeParams["jit"] = "off"
	}
	// The driver runs its statements by the names it prepared them under
	// (see prepare), which needs the extended protocol whatever the URL asks.
	cc.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	listen := cc.Copy()
	listen.RuntimeParams["application_name"] = cc.RuntimeParams["application_name"] + " listener"
	// When a caller's context (or a batch's WriteTimeout) ends mid-query,
	// ask the server to cancel the statement, so that it does not go on
	// waiting for locks, holding its own, for a client that left.
	cc.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 2 * time.Second}
	}

	// Migrate on a connection of its own: the pool's connections prepare
	// statements over the schema as they connect.
	conn, err := pgx.ConnectConfig(ctx, cc.Copy())
	if err != nil {
		return nil, fmt.Errorf("postgres: connect to %s: %w", target, err)
	}
	err = migrate(ctx, conn, opts.Schema, opts.NoCreate)
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("postgres: migrate %s: %w", target, err)
	}
	err = fillBuckets(ctx, conn)
	conn.Close(context.Background())
	if err != nil {
		return nil, fmt.Errorf("postgres: fill in buckets in %s: %w", target, err)
	}

	cfg.MaxConns = int32(opts.MaxConns)
	cfg.MinConns = 0
	cfg.AfterConnect = prepare
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open %s: %w", target, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect to %s: %w", target, err)
	}

	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	s := &Store{
		opts:      opts,
		target:    target,
		pool:      pool,
		listen:    listen,
		origin:    hex.EncodeToString(rnd[:]),
		channel:   opts.Schema + "_wake",
		chanLocks: lockSpace(opts.Schema, "channel"),
		instLocks: lockSpace(opts.Schema, "instance"),
		// A new space: before, instance locks were their buckets, in the
		// space of instLocks.
		instBucketLocks: lockSpace(opts.Schema, "instance-bucket"),
		listenerLocks:   lockSpace(opts.Schema, "listener"),
		listenPIDs:      map[uint32]int{},
		reqs:            make(chan *writeReq, 4096),
		txReqs:          make(chan *txReq, 1024),
		loadReqs:        make(chan *loadReq, 1024),
		wake:            make(chan []string, 1024),
		notifierDone:    make(chan struct{}),
	}
	s.outboxChannel = opts.Schema + "_outbox"
	s.presenceTTL.Store(int64(presenceTTL))
	s.presenceLag.Store(int64(presenceLag))
	s.closeCtx, s.stop = context.WithCancel(context.Background())
	s.statsCtx, s.stopStats = context.WithCancel(context.Background())
	go s.notifier()
	for i := 0; i < opts.Writers; i++ {
		s.writers.Add(1)
		go s.writer()
	}
	for i := 0; i < opts.TxWriters; i++ {
		s.writers.Add(1)
		go s.txWriter()
	}
	for range loaders {
		s.writers.Add(1)
		go s.loader()
	}
	s.writers.Add(1)
	go s.statsKeeper()
	return s, nil
}

// describeTarget names the server of a connection string for error messages,
// with any password masked.
func describeTarget(connString string) string {
	if u, err := url.Parse(connString); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		if u.Host == "" {
			return "(no host)"
		}
		return u.Host + u.Path
	}
	if rest, ok := strings.CutPrefix(connString, "postgres://"); ok || strings.HasPrefix(connString, "postgresql://") {
		if !ok {
			rest = strings.TrimPrefix(connString, "postgresql://")
		}
		rest, _, _ = strings.Cut(rest, "/")
		rest, _, _ = strings.Cut(rest, "?")
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			rest = rest[i+1:]
		}
		return rest
	}
	for _, f := range strings.Fields(connString) {
		if h, ok := strings.CutPrefix(f, "host="); ok {
			return h
		}
	}
	return "(unparsable connection string)"
}

// lockSpace derives the first key of the two-key advisory locks the store
// takes on channels and instances, so that other applications' advisory
// locks and other Norn schemas in the same database do not collide.
func lockSpace(schema, what string) int32 {
	h := fnv.New32a()
	h.Write([]byte("norn:" + schema + ":" + what))
	return int32(h.Sum32())
}

// Target describes the server and database the store uses (never the
// password).
func (s *Store) Target() string { return s.target }

// Pool is the store's connection pool, for tools and tests that need to run
// their own SQL. Its connections use the store's schema as search_path.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// prepare prepares the driver's statements on a new pool connection. It
// does so inside one transaction: outside one, each statement's
// preparation is a transaction of its own on the server (some seventy per
// connection), while a prepared statement outlives the transaction that
// prepared it.
func prepare(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	for name, sql := range statements {
		if _, err := conn.Prepare(ctx, name, sql); err != nil {
			return fmt.Errorf("prepare %s: %w", name, err)
		}
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	return nil
}

// migrationLock is the advisory lock (one bigint key) migrations hold.
func migrationLock(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("norn:migrate:" + schema))
	return int64(h.Sum64())
}

// migrate applies the embedded migrations not yet recorded in
// schema_migrations, in one transaction under an advisory lock: concurrent
// openers wait for the first, then find nothing left to do.
func migrate(ctx context.Context, conn *pgx.Conn, schema string, noCreate bool) error {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	versions := make([]int, len(names))
	for i, name := range names {
		if versions[i], err = strconv.Atoi(strings.SplitN(path.Base(name), "_", 2)[0]); err != nil {
			return fmt.Errorf("migration %s: bad version: %w", name, err)
		}
	}
	// Look without the lock first: once the schema is up to date, opening
	// needs neither the lock nor the privilege to create a schema.
	if upToDate(ctx, conn, schema, versions) {
		return nil
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit this is a no-op
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock(schema)); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	if noCreate {
		var found bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&found); err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("schema %s: %w", schema, persistence.ErrNoSchema)
		}
	}
	ident := pgx.Identifier{schema}.Sanitize()
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA `+ident); err != nil {
			return fmt.Errorf("create schema %s: %w", schema, err)
		}
	}
	if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+ident); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		return err
	}
	for i, name := range names {
		v := versions[i]
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM schema_migrations WHERE version = $1`, v).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		body, err := migrationFS.ReadFile(name)
		if err != nil {
			return err
		}
		// No arguments: the simple protocol, which runs every statement
		// of the file.
		if _, err := tx.Exec(ctx, string(body), pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("migration %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`, v, time.Now().UnixNano()); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// bucketChunk is how many instances one statement of fillBuckets updates,
// so that it never holds many row locks at once.
const bucketChunk = 1000

// fillBuckets sets the bucket of the rows written before migration 0005,
// which it left at -1 (SQL cannot compute BucketOf), in chunks. Every Open
// looks, so rows that a process of an older release wrote meanwhile are
// filled in by the next one to open; concurrent openers may fill in the
// same rows, with the same values.
func fillBuckets(ctx context.Context, conn *pgx.Conn) error {
	var todo bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM instances WHERE bucket < 0)
		OR EXISTS (SELECT 1 FROM timers WHERE bucket < 0)`).Scan(&todo); err != nil || !todo {
		return err
	}
	// Rows are locked in key order (l), as the writers lock them, so that
	// filling in does not deadlock with a batch.
	for _, q := range []struct{ what, pick, set string }{
		{"instances", `SELECT id FROM instances WHERE bucket < 0 LIMIT $1`,
			`UPDATE instances i SET bucket = u.b
			FROM (SELECT id AS locked FROM instances WHERE id = ANY($1::text[]) AND bucket < 0 ORDER BY id FOR UPDATE) l
			JOIN unnest($1::text[], $2::integer[]) AS u(id, b) ON u.id = l.locked
			WHERE i.id = l.locked`},
		// A timer is in its instance's bucket (the instance may be gone).
		// No DISTINCT, which could read all timers rather than the few
		// with bucket -1 by the index; the IDs are deduplicated below.
		{"timers", `SELECT instance_id FROM timers WHERE bucket < 0 LIMIT $1`,
			`UPDATE timers t SET bucket = u.b
			FROM (SELECT instance_id AS locked, timer_id AS tid FROM timers
				WHERE instance_id = ANY($1::text[]) AND bucket < 0 ORDER BY instance_id, timer_id FOR UPDATE) l
			JOIN unnest($1::text[], $2::integer[]) AS u(id, b) ON u.id = l.locked
			WHERE t.instance_id = l.locked AND t.timer_id = l.tid`},
	} {
		for {
			rows, _ := conn.Query(ctx, q.pick, bucketChunk)
			picked, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return fmt.Errorf("%s: %w", q.what, err)
			}
			seen := make(map[string]bool, len(picked))
			var ids []string
			var buckets []int32
			for _, id := range picked {
				if !seen[id] {
					seen[id] = true
					ids = append(ids, id)
					buckets = append(buckets, int32(persistence.BucketOf(id)))
				}
			}
			for attempt := 1; ; attempt++ {
				_, err = conn.Exec(ctx, q.set, ids, buckets)
				if err == nil || !retryable(err) || attempt == maxAttempts {
					break
				}
			}
			if err != nil {
				return fmt.Errorf("%s: %w", q.what, err)
			}
			if len(picked) < bucketChunk {
				break
			}
		}
	}
	return nil
}

// upToDate reports whether schema_migrations lists every version in want.
// Not a count of its rows: a database that a build with another set of
// migrations migrated (one with a later migration but not an earlier one
// of this build's) may hold as many rows and still miss a version.
func upToDate(ctx context.Context, conn *pgx.Conn, schema string, want []int) bool {
	var exists bool
	err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&exists)
	if err != nil || !exists {
		return false
	}
	want32 := make([]int32, len(want))
	for i, v := range want {
		want32[i] = int32(v)
	}
	var missing bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM unnest($1::integer[]) AS w(v) WHERE v NOT IN (SELECT version FROM `+
		pgx.Identifier{schema, "schema_migrations"}.Sanitize()+`))`, want32).Scan(&missing)
	return err == nil && !missing
}

// Close lets the writers finish the steps already queued, stops Listen
// calls, and closes the pool. Apply calls made after Close began fail with
// persistence.ErrStoreClosed.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	close(s.reqs)
	close(s.txReqs)
	close(s.loadReqs)
	s.closeMu.Unlock()
	s.stopStats()
	s.writers.Wait()
	s.wakeMu.Lock()
	s.wakeClosed = true
	close(s.wake)
	s.wakeMu.Unlock()
	<-s.notifierDone
	// Listeners last: while the last wake-ups go out, the store's own
	// listeners are still its own (see othersListening).
	s.stop()
	s.listeners.Wait()
	s.pool.Close()
	return nil
}

// isClosed reports whether Close was called.
func (s *Store) isClosed() bool {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	return s.closed
}

// retryable reports whether err is a transient conflict with another
// transaction (deadlock, serialization failure, lock not available), after
// which the same work may simply be tried again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "40P01", "40001", "55P03":
		return true
	}
	return false
}

// now is the local clock, as the store reads it: for the times it records
// (updated_at, history, messages), never for leases, which the server's
// clock decides (see serverNowNS).
func (s *Store) now() time.Time { return time.Now().Add(time.Duration(s.clockOffset.Load())) }

func ns(t time.Time) int64 { return rowcodec.NS(t) }

func fromNS(v int64) time.Time { return rowcodec.FromNS(v) }
