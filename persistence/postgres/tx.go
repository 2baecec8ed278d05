package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nornlabs/norn/persistence"
)

// ApplyTx implements persistence.TxApplier on a pool connection of its
// own, outside the group-commit writers: run may take as long as ctx
// allows without holding up other steps (only the rows it locks). If ctx
// ends first, ApplyTx returns at once; the transaction is rolled back and
// the connection released when run returns, since a connection cannot be
// used by two goroutines at once.
func (s *Store) ApplyTx(ctx context.Context, run func(ctx context.Context, tx persistence.Tx) error, mk func() (persistence.Step, error)) (persistence.StepResult, error) {
	s.closeMu.RLock()
	closed := s.closed
	s.closeMu.RUnlock()
	if closed {
		return persistence.StepResult{}, persistence.ErrStoreClosed
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return persistence.StepResult{}, fmt.Errorf("postgres: connect to %s: %w", s.target, err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		conn.Release()
		return persistence.StepResult{}, fmt.Errorf("postgres: begin: %w", err)
	}
	end := func() {
		rctx, cancel := context.WithTimeout(context.Background(), s.opts.WriteTimeout)
		defer cancel()
		_ = tx.Rollback(rctx) // a failed rollback closes the connection
		conn.Release()
	}
	finished := make(chan error, 1)
	go func() { finished <- run(ctx, pgTx{tx: tx}) }()
	select {
	case err = <-finished:
	case <-ctx.Done():
		go func() {
			if err := <-finished; err != nil {
				s.opts.Logger.Debug("norn/postgres: abandoned transactional step ended", "err", err)
			}
			end() // rolled back whatever run returned
		}()
		return persistence.StepResult{}, ctx.Err()
	}
	if err != nil {
		end()
		return persistence.StepResult{}, err
	}
	step, err := mk()
	if err == nil {
		err = step.Validate()
	}
	if err != nil {
		end()
		return persistence.StepResult{}, err
	}
	defer conn.Release()
	return s.commitTx(ctx, conn, tx, step)
}

// commitTx applies step in tx, after the caller's writes, and commits; a
// step that fails rolls everything back. The step runs in a savepoint so
// that a Dedupe message found used can be left out without losing the
// caller's writes (see errUsed).
func (s *Store) commitTx(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx, step persistence.Step) (persistence.StepResult, error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.WriteTimeout)
	defer cancel()
	start := time.Now()
	fail := func(err error) (persistence.StepResult, error) {
		_ = tx.Rollback(wctx) // a failed rollback closes the connection
		s.observe(1, start, err)
		return persistence.StepResult{}, err
	}
	r := &writeReq{step: step}
	for {
		r.res, r.err, r.retry = persistence.StepResult{}, nil, false
		r.ops = s.compile(r)
		ops := []op{ctl(sqlSavepoint)}
		if l, ok := batchLocks([]*writeReq{r}); ok {
			ops = append(ops, l)
		}
		ops = append(ops, r.ops...)
		ops = append(ops, ctl(sqlRelease))
		if len(step.Emit) > 0 {
			// Delivered at the commit, as for group commits (see runTx).
			ops = append(ops, op{label: "notify relayers", name: sqlNotify, args: []any{s.outboxChannel, s.origin}})
		}
		failAt, err := runOps(wctx, conn, ops)
		if err == nil {
			break
		}
		o := ops[failAt]
		var pe *pgconn.PgError
		if o.req == nil || !errors.As(err, &pe) {
			return fail(fmt.Errorf("postgres: %s: %w", o.label, err))
		}
		follow := stepFailed(&o, err, pe)
		if errors.Is(r.err, errUsed) {
			// compile marked the used message: apply the step again
			// without it, keeping the caller's writes.
			if _, err := runOps(wctx, conn, []op{ctl(sqlRollbackTo), ctl(sqlRelease)}); err != nil {
				return fail(fmt.Errorf("postgres: rollback to savepoint: %w", err))
			}
			continue
		}
		// The step failed on its own (fenced, say): the transaction did
		// not fail as such, and the caller's writes go with the step.
		_ = tx.Rollback(wctx)
		if follow != nil {
			if _, ferr := runOps(wctx, conn, []op{*follow}); ferr != nil {
				r.err = fmt.Errorf("postgres: settle failed step: %w", ferr)
			}
		}
		s.observe(1, start, nil)
		return persistence.StepResult{}, r.err
	}
	if err := tx.Commit(wctx); err != nil {
		return fail(fmt.Errorf("postgres: commit: %w", err))
	}
	s.observe(1, start, nil)
	woken := r.res.Woken
	if c := step.Create; c != nil && r.res.Existing == nil && c.LeaseOwner == "" {
		woken = append(woken, c.ID)
	}
	if len(woken) > 0 {
		s.queueWake(woken)
	}
	return r.res, nil
}

// pgTx is persistence.Tx over a pgx transaction.
type pgTx struct{ tx pgx.Tx }

var _ persistence.Tx = pgTx{}

func (t pgTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (t pgTx) Query(ctx context.Context, query string, args ...any) (persistence.Rows, error) {
	rows, err := t.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgRows{rows}, nil
}

func (t pgTx) QueryRow(ctx context.Context, query string, args ...any) persistence.Row {
	return pgRow{t.tx.QueryRow(ctx, query, args...)}
}

func (t pgTx) Dialect() string { return "postgres" }

type pgRows struct{ pgx.Rows }

func (r pgRows) Close() error {
	r.Rows.Close()
	return r.Err()
}

type pgRow struct{ row pgx.Row }

func (r pgRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
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
// code that takes one. Do not Commit or Roll it back: the store does,
// together with the step.
func PgxTx(tx persistence.Tx) (pgx.Tx, bool) {
	t, ok := tx.(pgTx)
	if !ok {
		return nil, false
	}
	return t.tx, true
}
