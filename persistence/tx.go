package persistence

import (
	"context"
	"errors"
)

// Tx is the database transaction of a transactional step (see
// TxApplier.ApplyTx), through which the caller writes its own tables. It
// has no Commit or Rollback: the store commits the caller's writes
// together with the step that records them, or rolls both back.
//
// Both drivers take PostgreSQL-style positional parameters ($1, $2 …), so
// a query can be written once for both; Dialect says which database runs
// it, for the statements that differ (upserts, types). Each driver also
// hands out its native transaction for libraries that need one (see
// sqlite.SQLTx and postgres.PgxTx).
type Tx interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// Query runs a query; the rows must be closed before the function
	// that received the Tx returns.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	// QueryRow runs a query expected to return at most one row; Scan
	// reports sql.ErrNoRows or pgx.ErrNoRows when it returned none (both
	// match ErrNoRows with errors.Is).
	QueryRow(ctx context.Context, query string, args ...any) Row
	// Dialect is the database: "sqlite" or "postgres".
	Dialect() string
}

// Rows is the result of Tx.Query.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// Row is the result of Tx.QueryRow.
type Row interface {
	Scan(dest ...any) error
}

// ErrNoRows is what Row.Scan matches (errors.Is) when the query returned
// no row, whatever the driver.
var ErrNoRows = errors.New("norn: no rows in result set")

// ErrTxTimeout is what ApplyTx returns (wrapped) when the caller's
// function held the transaction past the store's limit (see the SQLite
// driver's TxTimeout): the transaction was rolled back.
var ErrTxTimeout = errors.New("norn: transactional step held its transaction past the store's limit")

// TxApplier is the part of Store that runs a caller's writes and a step in
// one database transaction: the transactional activities of the actor
// runtime, whose writes to the user's own tables commit exactly when the
// step recording their result does.
type TxApplier interface {
	// ApplyTx opens a transaction (or a savepoint of one that the driver
	// shares among transactional steps), calls run with it, and, if run
	// returns nil, calls step for the step to apply, applies it in the
	// same transaction (as Apply would, validation and fencing included)
	// and commits. If run or step returns an error, or the step fails
	// (ErrFenced, ErrHistoryGap …), or the commit does, everything is
	// rolled back, the caller's writes included, and that error is
	// returned as it was (run's error is not wrapped, so that callers can
	// branch on it).
	//
	// instance is the instance the step is for ("" if none): a driver
	// that shares a transaction among steps applies them in the order of
	// their instances, as its other writers lock instances, so that
	// transactions holding instance rows do not wait for each other in a
	// cycle.
	//
	// run gets ctx, bounded by the driver's own limit if it has one; if
	// ctx ends before run returns, the transaction is rolled back and
	// ApplyTx returns ctx's error (or ErrTxTimeout for the driver's
	// limit) without waiting for run, whose later statements fail. step
	// is called on whatever goroutine the driver runs the transaction on,
	// while the caller of ApplyTx waits; it must not call the store.
	ApplyTx(ctx context.Context, instance string, run func(ctx context.Context, tx Tx) error, step func() (Step, error)) (StepResult, error)
}
