package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nornlabs/norn/persistence"
)

// The caller's own table, in the store's database, that the transactional
// steps below write: the same SQL on every driver.
const (
	txTable  = `CREATE TABLE IF NOT EXISTS tx_counter (k TEXT PRIMARY KEY, n BIGINT NOT NULL)`
	txInc    = `INSERT INTO tx_counter (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = tx_counter.n + 1`
	txSelect = `SELECT n FROM tx_counter WHERE k = $1`
)

var errReadOnly = errors.New("storetest: read only, roll back")

func noStep() (persistence.Step, error) { return persistence.Step{}, nil }

// txCreateTable creates the caller's table in a transactional step that
// writes nothing else.
func txCreateTable(t *testing.T, st persistence.Store) {
	t.Helper()
	_, err := st.ApplyTx(ctx(), "", func(ctx context.Context, tx persistence.Tx) error {
		_, err := tx.Exec(ctx, txTable)
		return err
	}, noStep)
	if err != nil {
		t.Fatalf("create the caller's table: %v", err)
	}
}

// txCount reads the caller's counter k (0 if it has no row) in a
// transaction that is rolled back.
func txCount(t *testing.T, st persistence.Store, k string) int64 {
	t.Helper()
	var n int64
	_, err := st.ApplyTx(ctx(), "", func(ctx context.Context, tx persistence.Tx) error {
		err := tx.QueryRow(ctx, txSelect, k).Scan(&n)
		if errors.Is(err, persistence.ErrNoRows) {
			n = 0
			return errReadOnly
		}
		if err != nil {
			return err
		}
		return errReadOnly
	}, noStep)
	if !errors.Is(err, errReadOnly) {
		t.Fatalf("read counter %s: %v", k, err)
	}
	return n
}

func historyLen(t *testing.T, st persistence.Store, id string) int64 {
	t.Helper()
	in, err := st.Instance(ctx(), id)
	if err != nil {
		t.Fatalf("instance %s: %v", id, err)
	}
	return in.HistoryLen
}

// testApplyTx checks that the caller's writes and the step commit
// together, and roll back together whichever of them fails.
func testApplyTx(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	txCreateTable(t, st)
	inc := func(ctx context.Context, tx persistence.Tx) error {
		if tx.Dialect() == "" {
			return errors.New("no dialect")
		}
		n, err := tx.Exec(ctx, txInc, "a")
		if err == nil && n != 1 {
			err = errors.New("upsert affected no row")
		}
		return err
	}
	stepAt := func(seq, epoch int64) func() (persistence.Step, error) {
		return func() (persistence.Step, error) {
			return persistence.Step{Instance: "a", Epoch: epoch, History: []persistence.Event{ev(seq, "activity")},
				Emit: []persistence.OutboxEvent{{ID: fmt.Sprintf("tx-ev-%d", seq), Instance: "a", Type: "t", Data: []byte(`{}`)}}}, nil
		}
	}

	if _, err := st.ApplyTx(ctx(), "", inc, stepAt(1, 1)); err != nil {
		t.Fatalf("transactional step: %v", err)
	}
	if n, h := txCount(t, st, "a"), historyLen(t, st, "a"); n != 1 || h != 2 {
		t.Fatalf("after a committed step: counter %d, history %d; want 1 and 2", n, h)
	}
	if _, err := st.ListOutbox(ctx(), "", "", 0); err == nil {
		if _, ok := outboxRecord(t, st, "tx-ev-1"); !ok {
			t.Fatalf("the step's outgoing event is not in the outbox")
		}
	}

	// Each failure leaves neither the write nor the step.
	errBoom := errors.New("boom")
	failing := []struct {
		name string
		run  func(context.Context, persistence.Tx) error
		step func() (persistence.Step, error)
		want error
	}{
		{"run fails after writing", func(ctx context.Context, tx persistence.Tx) error {
			if err := inc(ctx, tx); err != nil {
				return err
			}
			return errBoom
		}, stepAt(2, 1), errBoom},
		{"step refused", inc, func() (persistence.Step, error) { return persistence.Step{}, errBoom }, errBoom},
		{"fenced", inc, stepAt(2, 7), persistence.ErrFenced},
		{"history gap", inc, stepAt(5, 1), persistence.ErrHistoryGap},
		{"invalid step", inc, func() (persistence.Step, error) {
			return persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{{Seq: 2, Kind: "bad\x00kind"}}}, nil
		}, persistence.ErrInvalidRecord},
	}
	for _, f := range failing {
		if _, err := st.ApplyTx(ctx(), "", f.run, f.step); !errors.Is(err, f.want) {
			t.Fatalf("%s: error %v, want %v", f.name, err, f.want)
		}
		if n, h := txCount(t, st, "a"), historyLen(t, st, "a"); n != 1 || h != 2 {
			t.Fatalf("%s: counter %d, history %d; want them unchanged (1 and 2)", f.name, n, h)
		}
	}

	// A caller's deadline passing while run holds the transaction rolls
	// it back, and the store goes on.
	dctx, cancel := context.WithCancel(ctx())
	_, err := st.ApplyTx(dctx, "", func(ctx context.Context, tx persistence.Tx) error {
		if err := inc(ctx, tx); err != nil {
			return err
		}
		cancel()
		<-ctx.Done()
		return ctx.Err()
	}, stepAt(2, 1))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while running: error %v, want context.Canceled", err)
	}
	if _, err := st.ApplyTx(ctx(), "", inc, stepAt(2, 1)); err != nil {
		t.Fatalf("transactional step after a cancelled one: %v", err)
	}
	if n, h := txCount(t, st, "a"), historyLen(t, st, "a"); n != 2 || h != 3 {
		t.Fatalf("after a cancelled then a committed step: counter %d, history %d; want 2 and 3", n, h)
	}
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(3, "x")}})
}
