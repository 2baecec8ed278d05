package testutil

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// ExecTx runs one statement on st's database in a transactional step that
// records nothing else (creating the user's tables, say), and commits it.
func ExecTx(tb testing.TB, st persistence.Store, query string, args ...any) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := st.ApplyTx(ctx, "", func(ctx context.Context, tx persistence.Tx) error {
		_, err := tx.Exec(ctx, query, args...)
		return err
	}, func() (persistence.Step, error) { return persistence.Step{}, nil })
	if err != nil {
		tb.Fatalf("exec %q: %v", query, err)
	}
}

var errRollback = errors.New("testutil: read only")

// QueryInt reads one integer from st's database in a transaction that is
// rolled back; a query that returns no row reads 0.
func QueryInt(tb testing.TB, st persistence.Store, query string, args ...any) int64 {
	tb.Helper()
	n, err := ReadInt(context.Background(), st, query, args...)
	if err != nil {
		tb.Fatalf("query %q: %v", query, err)
	}
	return n
}

// ReadInt is QueryInt returning its error, for code outside tests.
func ReadInt(ctx context.Context, st persistence.Store, query string, args ...any) (int64, error) {
	var n int64
	_, err := st.ApplyTx(ctx, "", func(ctx context.Context, tx persistence.Tx) error {
		if err := tx.QueryRow(ctx, query, args...).Scan(&n); err != nil && !errors.Is(err, persistence.ErrNoRows) {
			return err
		}
		return errRollback
	}, func() (persistence.Step, error) { return persistence.Step{}, nil })
	if !errors.Is(err, errRollback) {
		return 0, err
	}
	return n, nil
}
