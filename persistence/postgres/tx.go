package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/gather"
)

// txReq is one ApplyTx call waiting for a transactional writer.
type txReq struct {
	ctx      context.Context
	instance string // orders the steps of a batch (see txBatch)
	run      func(ctx context.Context, tx persistence.Tx) error
	mk       func() (persistence.Step, error)
	// state says who has the request: queued, taken by a writer (which
	// then completes it), or given up by its caller (whose ctx ended
	// while it was queued: the writer skips it).
	state atomic.Int32
	res   persistence.StepResult
	err   error
	done  chan struct{}
	// woken are the instances its commit gives work to, for the
	// wake-up notifications (see queueWake).
	woken []string
}

const (
	txQueued int32 = iota
	txTaken
	txGone
)

// ApplyTx implements persistence.TxApplier. Transactional steps have
// writers of their own (Options.TxWriters), which share a transaction
// among the steps queued together as the group-commit writers do: each
// step's function, then its step, runs in a savepoint of its own, so that
// one that fails rolls back only its own work, and the batch commits once.
// The functions of one batch run one after another on its connection, so
// Options.TxTimeout bounds each: past it, or once ctx ends, the function's
// statements are cancelled, its savepoint is rolled back and ApplyTx
// fails (with persistence.ErrTxTimeout, or ctx's error) while the batch
// goes on without it.
func (s *Store) ApplyTx(ctx context.Context, instance string, run func(ctx context.Context, tx persistence.Tx) error, mk func() (persistence.Step, error)) (persistence.StepResult, error) {
	if err := ctx.Err(); err != nil {
		return persistence.StepResult{}, err
	}
	r := &txReq{ctx: ctx, instance: instance, run: run, mk: mk, done: make(chan struct{})}
	if err := enqueue(s, ctx, s.txReqs, r); err != nil {
		return persistence.StepResult{}, err
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		if r.state.CompareAndSwap(txQueued, txGone) {
			return persistence.StepResult{}, ctx.Err()
		}
		// A writer runs it: it ends run at once (run's context ends
		// with ctx), but step may be built already and must not be
		// left to commit unseen.
		<-r.done
	}
	return r.res, r.err
}

// txWriter is one writer of transactional steps (see ApplyTx).
func (s *Store) txWriter() {
	defer s.writers.Done()
	// Every transactional step runs in savepoints (its function's and its
	// step's): a batch of them holds at most maxSavepoints steps, as
	// before MaxBatch outgrew that. With two subtransactions a step, a
	// full batch whose functions write can still pass the server's cache
	// of 64.
	g := gather.New(s.txReqs, min(s.opts.MaxBatch, maxSavepoints), s.opts.CommitDelay)
	for {
		batch, ok := g.Next()
		if !ok {
			return
		}
		for _, r := range s.txBatch(batch) {
			// Each alone, after the transaction that held them up.
			r.state.Store(txQueued)
			s.txBatch([]*txReq{r})
		}
	}
}

// txBatch runs batch's requests in one transaction and commits it. It
// returns the requests whose functions waited too long for a lock there,
// to run again.
//
// They run in the order of their instances. The transaction holds the row
// of each instance whose step it applied until it commits, while later
// functions run; taken in ID order, as the group-commit writers and lease
// renewals take them, those rows cannot close a cycle of transactions
// waiting for each other (a deadlock PostgreSQL would break only after
// deadlock_timeout, failing a step).
func (s *Store) txBatch(batch []*txReq) (alone []*txReq) {
	sort.SliceStable(batch, func(i, j int) bool { return batch[i].instance < batch[j].instance })
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.WriteTimeout)
	defer cancel()
	b := &txRun{s: s}
	defer func() {
		b.finish(start)
		alone = b.alone
	}()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		b.failAll(batch, fmt.Errorf("postgres: connect to %s: %w", s.target, err))
		return
	}
	b.conn = conn
	otx, err := conn.Begin(ctx)
	if err != nil {
		b.failAll(batch, fmt.Errorf("postgres: begin: %w", err))
		return
	}
	b.otx = otx
	b.shared = len(batch) > 1
	pre := []op{ctl(sqlFnSavepoint)}
	if b.shared {
		pre = []op{ctl(sqlFnLockWait), ctl(sqlFnSavepoint)}
	}
	if _, err := runOps(ctx, conn, pre); err != nil {
		b.failAll(batch, fmt.Errorf("postgres: savepoint: %w", err))
		return
	}
	for i, r := range batch {
		if !r.state.CompareAndSwap(txQueued, txTaken) {
			continue // its caller left
		}
		if err := r.ctx.Err(); err != nil {
			r.err = err // waited in the queue past the caller's deadline
			close(r.done)
			continue
		}
		if err := b.member(r); err != nil {
			// The transaction is gone, and every step of it.
			b.failAll(batch[i+1:], err)
			return nil
		}
	}
	return nil
}

// lockWait reports whether err is a lock wait that timed out, or a
// deadlock.
func lockWait(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "40P01")
}

// txRun is one transaction of a transactional writer.
type txRun struct {
	s       *Store
	conn    *pgxpool.Conn
	otx     pgx.Tx
	members []*txReq // steps applied, waiting for the commit
	emits   bool
	failed  error // ended the transaction: the members get it
	// shared says the transaction runs several functions: one that waits
	// for a lock longer than 100ms (sqlFnLockWait) gives up, and goes to
	// alone, since the
	// lock may be held by a transaction waiting for one of the earlier
	// functions' (a cycle PostgreSQL would break only after
	// deadlock_timeout) or by one that is simply slow.
	shared bool
	alone  []*txReq // to run again, each in a transaction of its own
}

// member runs r's function and step in the transaction, whose savepoint
// fn is set: what the function writes is rolled back to it if the
// function or the step fails. Once the step is applied, fn is set again
// for the next member (in the same round trip). It returns an error that
// ended the transaction.
func (b *txRun) member(r *txReq) error {
	s := b.s
	cctx, cancel := context.WithTimeout(context.Background(), s.opts.WriteTimeout)
	defer cancel()
	// undo rolls back to the savepoint, the caller's writes with it.
	undo := func(stepErr error) error {
		if _, err := runOps(cctx, b.conn, []op{ctl(sqlFnRollbackTo)}); err != nil {
			return b.fail(r, fmt.Errorf("postgres: rollback to savepoint: %w", err))
		}
		r.err = stepErr
		close(r.done)
		return nil
	}

	limit, cancelLimit := context.WithTimeout(r.ctx, s.opts.TxTimeout)
	defer cancelLimit()
	ut := &pgTx{tx: nativeTx{b.otx}, limit: limit}
	finished := make(chan error, 1)
	go func() { finished <- r.run(limit, ut) }()
	var err error
	select {
	case err = <-finished:
		ut.end()
	case <-limit.Done():
		// The statement running (if any) is being cancelled; end waits
		// for it, then refuses the function's later ones.
		ut.end()
		if cerr := r.ctx.Err(); cerr != nil {
			err = cerr
		} else {
			err = fmt.Errorf("postgres: %w (%v)", persistence.ErrTxTimeout, s.opts.TxTimeout)
		}
		if ut.raw.Load() {
			// The function may still use the native transaction, which
			// end cannot stop: wait for it to return. Its statements run
			// with its context (as PgxTx asks) are being cancelled.
			if ferr := <-finished; ferr != nil {
				s.opts.Logger.Debug("norn/postgres: transactional step ended after its deadline", "err", ferr)
			}
		}
	}
	if b.shared && lockWait(err) {
		// Rolled back; it runs again once this transaction is over.
		if _, err := runOps(cctx, b.conn, []op{ctl(sqlFnRollbackTo)}); err != nil {
			return b.fail(r, fmt.Errorf("postgres: rollback to savepoint: %w", err))
		}
		b.alone = append(b.alone, r)
		return nil
	}
	if err == nil && b.conn.Conn().PgConn().TxStatus() == 'E' {
		// A statement failed and the function went on as if not: the
		// savepoint can only be rolled back.
		err = errTxAborted
	}
	if err != nil {
		return undo(err)
	}
	step, err := r.mk()
	if err == nil {
		err = step.Validate()
	}
	if err != nil {
		return undo(err)
	}
	res, stepErr, err := s.applyInTx(cctx, b.conn, step, b.shared)
	if err != nil {
		return b.fail(r, err)
	}
	if stepErr != nil {
		return undo(stepErr)
	}
	r.res = res
	r.woken = res.Woken
	if ids := step.Unleased(&res); len(ids) > 0 {
		r.woken = append(r.woken[:len(r.woken):len(r.woken)], ids...)
	}
	b.members = append(b.members, r)
	b.emits = b.emits || len(step.Emit) > 0
	return nil
}

// fail ends the transaction on an error: r and every step applied so far
// get it (see finish). It returns err.
func (b *txRun) fail(r *txReq, err error) error {
	r.err = err
	close(r.done)
	b.failed = err
	return err
}

// failAll gives err to every request of rs its caller still waits for.
func (b *txRun) failAll(rs []*txReq, err error) {
	for _, r := range rs {
		if r.state.CompareAndSwap(txQueued, txTaken) {
			r.err = err
			close(r.done)
		}
	}
}

// finish commits the steps applied (or rolls back a transaction that has
// none), completes their requests and releases the connection.
func (b *txRun) finish(start time.Time) {
	s := b.s
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.WriteTimeout)
	defer cancel()
	err := b.failed
	if b.otx != nil {
		if err == nil && len(b.members) > 0 {
			var ops []op
			if b.emits {
				// Delivered at the commit, as for group commits (see runTx).
				ops = append(ops, op{label: "notify relayers", name: sqlNotify, args: []any{s.outboxChannel, s.origin}})
			}
			ops = append(ops, op{label: "commit", name: sqlCommit, read: readCommit})
			var failAt int
			if failAt, err = runOps(ctx, b.conn, ops); err != nil {
				err = fmt.Errorf("postgres: %s: %w", ops[failAt].label, err)
			}
		}
		if err != nil || len(b.members) == 0 {
			_ = b.otx.Rollback(ctx) // a failed rollback closes the connection
		}
		if len(b.members) > 0 || err != nil {
			// A transaction with no step to commit (its functions all
			// failed) was rolled back: nothing to report.
			s.observe(len(b.members), start, err)
		}
	}
	var woken []string
	for _, m := range b.members {
		if err != nil {
			m.err = err
		} else {
			woken = append(woken, m.woken...)
		}
		close(m.done)
	}
	if len(woken) > 0 {
		s.queueWake(woken)
	}
	if b.conn != nil {
		b.conn.Release()
	}
}

// applyInTx applies step in the transaction open on conn, in a savepoint
// of its own (so that a Dedupe message found used can be left out without
// losing the caller's writes, see errUsed), after the function's writes
// since savepoint fn; if it succeeds, fn is set anew. stepErr is the step's own
// failure (fenced, a history gap …), after which the transaction goes on;
// err is one that ended the transaction.
func (s *Store) applyInTx(ctx context.Context, conn *pgxpool.Conn, step persistence.Step, shared bool) (res persistence.StepResult, stepErr, err error) {
	r := &writeReq{step: step}
	for {
		r.res, r.err, r.retry = persistence.StepResult{}, nil, false
		r.ops = s.compile(r)
		ops := []op{ctl(sqlSavepoint)}
		if shared {
			ops = append(ops, ctl(sqlStepLockWait))
		}
		if l, ok := batchLocks(s, []*writeReq{r}); ok {
			ops = append(ops, l)
		}
		ops = append(ops, r.ops...)
		// Keep the function's writes, and set the savepoint anew for
		// the next step of the transaction.
		ops = append(ops, ctl(sqlRelease), ctl(sqlFnRelease))
		if shared {
			ops = append(ops, ctl(sqlFnLockWait))
		}
		ops = append(ops, ctl(sqlFnSavepoint))
		failAt, err := runOps(ctx, conn, ops)
		if err == nil {
			return r.res, nil, nil
		}
		o := ops[failAt]
		var pe *pgconn.PgError
		if o.req == nil || !errors.As(err, &pe) {
			return res, nil, fmt.Errorf("postgres: %s: %w", o.label, err)
		}
		follow := stepFailed(&o, err, pe)
		undo := []op{ctl(sqlRollbackTo), ctl(sqlRelease)}
		if errors.Is(r.err, errUsed) {
			// compile marked the used message: apply the step again
			// without it, keeping the caller's writes.
			if _, err := runOps(ctx, conn, undo); err != nil {
				return res, nil, fmt.Errorf("postgres: rollback to savepoint: %w", err)
			}
			continue
		}
		if follow != nil {
			undo = append(undo, *follow)
		}
		if _, err := runOps(ctx, conn, undo); err != nil {
			return res, nil, fmt.Errorf("postgres: settle failed step: %w", err)
		}
		return res, r.err, nil
	}
}

// pgTx is persistence.Tx over the savepoint of one transactional step in
// a writer's transaction. Every statement also ends with limit, so that a
// function passing a context without the deadline cannot hold the
// transaction past it, and none runs once the step is over (see end): the
// transaction then carries other steps.
type pgTx struct {
	tx    pgx.Tx
	limit context.Context
	mu    sync.Mutex // held by each statement (and row read), and by end
	over  bool
	rows  []*pgRows // not closed yet
	// raw records that the function took the native transaction
	// (PgxTx), whose statements end cannot stop.
	raw atomic.Bool
}

var _ persistence.Tx = (*pgTx)(nil)

// errTxAborted is what ApplyTx returns when the function returned nil
// after one of its statements failed, which aborts the transaction.
var errTxAborted = errors.New("postgres: a statement of the transactional step failed, which aborted its transaction, and the function returned no error")

// errTxOver is what a statement gets once its transactional step is over.
var errTxOver = fmt.Errorf("postgres: the transactional step is over: %w", pgx.ErrTxClosed)

// end refuses every later statement, once the one running (if any) is
// done, and closes the rows the function left open: the connection then
// goes on with other steps.
func (t *pgTx) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.over = true
	for _, r := range t.rows {
		r.close()
	}
	t.rows = nil
}

// bound is ctx, also cancelled when limit ends.
func (t *pgTx) bound(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(t.limit, cancel)
	return ctx, func() { stop(); cancel() }
}

func (t *pgTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	ctx, done := t.bound(ctx)
	defer done()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over {
		return 0, errTxOver
	}
	tag, err := t.tx.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (t *pgTx) Query(ctx context.Context, query string, args ...any) (persistence.Rows, error) {
	ctx, done := t.bound(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over {
		done()
		return nil, errTxOver
	}
	rows, err := t.tx.Query(ctx, query, args...)
	if err != nil {
		done()
		return nil, err
	}
	r := &pgRows{t: t, rows: rows, done: done}
	t.rows = append(t.rows, r)
	return r, nil
}

func (t *pgTx) QueryRow(ctx context.Context, query string, args ...any) persistence.Row {
	return pgRow{t: t, ctx: ctx, query: query, args: args}
}

func (t *pgTx) Dialect() string { return "postgres" }

// nativeTx is the writer's transaction as the function may use it (see
// PgxTx): the store ends it, so Commit and Rollback are refused, and its
// statements run after the function's savepoint.
type nativeTx struct{ pgx.Tx }

// errNativeEnd is what the native transaction's Commit and Rollback return.
var errNativeEnd = errors.New("postgres: a transactional step's transaction is committed or rolled back by the store, together with its step")

func (nativeTx) Commit(context.Context) error   { return errNativeEnd }
func (nativeTx) Rollback(context.Context) error { return errNativeEnd }

// pgRows reads under the transaction's lock, so that end can close them.
type pgRows struct {
	t      *pgTx
	rows   pgx.Rows
	done   func()
	closed bool
}

func (r *pgRows) Next() bool {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	return !r.closed && r.rows.Next()
}

func (r *pgRows) Scan(dest ...any) error {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	if r.closed {
		return errTxOver
	}
	return r.rows.Scan(dest...)
}

func (r *pgRows) Err() error {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	return r.rows.Err()
}

func (r *pgRows) Close() error {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	r.close()
	return r.rows.Err()
}

// close closes the rows; the transaction's lock is held.
func (r *pgRows) close() {
	if r.closed {
		return
	}
	r.closed = true
	r.rows.Close()
	r.done()
	for i, x := range r.t.rows {
		if x == r {
			r.t.rows = append(r.t.rows[:i], r.t.rows[i+1:]...)
			break
		}
	}
}

// pgRow runs its query when scanned, under the transaction's lock.
type pgRow struct {
	t     *pgTx
	ctx   context.Context
	query string
	args  []any
}

func (r pgRow) Scan(dest ...any) error {
	ctx, done := r.t.bound(r.ctx)
	defer done()
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	if r.t.over {
		return errTxOver
	}
	err := r.t.tx.QueryRow(ctx, r.query, r.args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return noRows{err}
	}
	return err
}

// noRows matches both pgx.ErrNoRows and persistence.ErrNoRows.
type noRows struct{ err error }

func (e noRows) Error() string        { return e.err.Error() }
func (e noRows) Unwrap() error        { return e.err }
func (e noRows) Is(target error) bool { return target == persistence.ErrNoRows }

// PgxTx is the pgx.Tx behind a transactional step's Tx on this driver, for
// code that takes one. It is the writer's transaction, which goes on with
// other steps once the function returns, so its Commit and Rollback
// return an error (the store commits the function's writes together with
// the step, or rolls both back); Begin makes a nested savepoint. Use it
// only inside the function, and with the function's context, whose
// deadline (Options.TxTimeout) cancels its statements: a function that
// uses it is waited for even past that deadline.
func PgxTx(tx persistence.Tx) (pgx.Tx, bool) {
	t, ok := tx.(*pgTx)
	if !ok {
		return nil, false
	}
	t.raw.Store(true)
	return t.tx, true
}
