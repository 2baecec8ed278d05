package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/nornlabs/norn/persistence"
)

// ApplyTx implements persistence.TxApplier. The step shares the writer's
// group commit like any other (in a savepoint of its own, so that its
// failure rolls back only its own work, the caller's writes included), and
// run holds the writer, and the database file's write lock, while it runs:
// Options.TxTimeout bounds that. Past it the writer rolls the step back
// and goes on, without waiting for run to return; whatever run does with
// the transaction later fails.
func (s *Store) ApplyTx(ctx context.Context, instance string, run func(ctx context.Context, tx persistence.Tx) error, mk func() (persistence.Step, error)) (persistence.StepResult, error) {
	var res persistence.StepResult
	req := &writeReq{tx: true, done: make(chan struct{})}
	req.fn = func(tx *sql.Tx) error {
		if err := s.runTx(ctx, tx, run); err != nil {
			return err
		}
		step, err := mk()
		if err != nil {
			return err
		}
		if err := step.Validate(); err != nil {
			return err
		}
		res = persistence.StepResult{}
		return s.applyStep(tx, &step, &res)
	}
	if err := s.submit(ctx, req); err != nil {
		return persistence.StepResult{}, err
	}
	return res, nil
}

// runTx calls run with tx on a goroutine of its own and waits for it, or
// for ctx or the store's limit to end. Once it returns, run's Tx refuses
// every statement: the transaction goes on with other steps.
func (s *Store) runTx(ctx context.Context, tx *sql.Tx, run func(ctx context.Context, tx persistence.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err // waited in the queue past the caller's deadline
	}
	limit, cancel := context.WithTimeout(ctx, s.opts.TxTimeout)
	defer cancel()
	utx := &sqlTx{tx: tx, limit: limit}
	defer utx.end()
	done := make(chan error, 1)
	go func() { done <- run(limit, utx) }()
	var err error
	select {
	case err = <-done:
	case <-limit.Done():
		// A statement still running was interrupted by limit; end waits
		// for it. The caller rolls back to the step's savepoint.
		err = limit.Err()
	}
	if err != nil && limit.Err() != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("sqlite: %w (%v): %w", persistence.ErrTxTimeout, s.opts.TxTimeout, err)
	}
	return err
}

// errTxOver is what a statement gets once its transactional step is over.
var errTxOver = fmt.Errorf("sqlite: the transactional step is over: %w", sql.ErrTxDone)

// sqlTx is persistence.Tx over the writer's transaction. Every statement
// also ends with limit, so that a caller passing a context without the
// deadline cannot hold the writer past it, and none runs once the step is
// over (see end): the transaction then carries other steps.
type sqlTx struct {
	tx    *sql.Tx
	limit context.Context
	mu    sync.Mutex // held by each statement as it starts, and by end
	over  bool
}

var _ persistence.Tx = (*sqlTx)(nil)

// end refuses every later statement, once the one running (if any) is
// done.
func (t *sqlTx) end() {
	t.mu.Lock()
	t.over = true
	t.mu.Unlock()
}

// bound is ctx, also cancelled when limit ends.
func (t *sqlTx) bound(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(t.limit, cancel)
	return ctx, func() { stop(); cancel() }
}

func (t *sqlTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	ctx, done := t.bound(ctx)
	defer done()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over {
		return 0, errTxOver
	}
	r, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

func (t *sqlTx) Query(ctx context.Context, query string, args ...any) (persistence.Rows, error) {
	ctx, done := t.bound(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over {
		done()
		return nil, errTxOver
	}
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		done()
		return nil, err
	}
	return &sqlRows{Rows: rows, done: done}, nil
}

func (t *sqlTx) QueryRow(ctx context.Context, query string, args ...any) persistence.Row {
	ctx, done := t.bound(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over {
		done()
		return errRow{errTxOver}
	}
	return sqlRow{row: t.tx.QueryRowContext(ctx, query, args...), done: done}
}

func (t *sqlTx) Dialect() string { return "sqlite" }

type sqlRows struct {
	*sql.Rows
	done func()
}

func (r *sqlRows) Close() error {
	err := r.Rows.Close()
	r.done()
	return err
}

type sqlRow struct {
	row  *sql.Row
	done func()
}

func (r sqlRow) Scan(dest ...any) error {
	defer r.done()
	err := r.row.Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return noRows{err}
	}
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// noRows matches both the driver's no-rows error and persistence.ErrNoRows.
type noRows struct{ err error }

func (e noRows) Error() string        { return e.err.Error() }
func (e noRows) Unwrap() error        { return e.err }
func (e noRows) Is(target error) bool { return target == persistence.ErrNoRows }

// SQLTx is the *sql.Tx behind a transactional step's Tx on this driver,
// for code that takes one (generated query code, say). Do not Commit or
// Roll it back: the store does, together with the step. It is the
// writer's transaction, which goes on with other steps once the function
// returns: use it only inside the function, and with the function's
// context, whose deadline (Options.TxTimeout) interrupts its statements.
func SQLTx(tx persistence.Tx) (*sql.Tx, bool) {
	t, ok := tx.(*sqlTx)
	if !ok {
		return nil, false
	}
	return t.tx, true
}
