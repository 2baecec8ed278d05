package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
)

const (
	counterTable = `CREATE TABLE IF NOT EXISTS counter (k TEXT PRIMARY KEY, n INTEGER NOT NULL)`
	counterInc   = `INSERT INTO counter (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = counter.n + 1`
)

// A transactional step that holds the writer past TxTimeout is rolled
// back, and the writer goes on with other steps without waiting for the
// function, whose later statements fail.
func TestApplyTxTimeout(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "norn.db")
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{TxTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	if _, err := st.Apply(ctx, persistence.Step{
		Create:  &persistence.Instance{ID: "a", Workflow: "wf", LeaseOwner: "n", LeaseEpoch: 1, LeaseExpires: time.Now().Add(time.Hour)},
		History: []persistence.Event{{Seq: 0, Kind: "started"}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyTx(ctx, "", func(ctx context.Context, tx persistence.Tx) error {
		raw, ok := sqlite.SQLTx(tx)
		if !ok {
			return errors.New("no *sql.Tx behind the SQLite driver's Tx")
		}
		_, err := raw.ExecContext(ctx, counterTable)
		return err
	}, func() (persistence.Step, error) { return persistence.Step{}, nil }); err != nil {
		t.Fatal(err)
	}

	release, later := make(chan struct{}), make(chan error, 1)
	_, err = st.ApplyTx(ctx, "", func(ctx context.Context, tx persistence.Tx) error {
		if _, err := tx.Exec(ctx, counterInc, "a"); err != nil {
			return err
		}
		<-release // ignores ctx: the writer must not wait for it
		_, err := tx.Exec(context.Background(), counterInc, "a")
		later <- err
		return err
	}, func() (persistence.Step, error) {
		return persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{{Seq: 1, Kind: "activity"}}}, nil
	})
	if !errors.Is(err, persistence.ErrTxTimeout) {
		t.Fatalf("error %v, want ErrTxTimeout", err)
	}
	// The function still runs; the writer is free.
	if _, err := st.Apply(ctx, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{{Seq: 1, Kind: "other"}}}); err != nil {
		t.Fatalf("a step after the timed-out one: %v", err)
	}
	close(release)
	if err := <-later; !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("a statement of the abandoned function: error %v, want sql.ErrTxDone", err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM counter`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the timed-out step's write is in the table (%d rows)", n)
	}
}
