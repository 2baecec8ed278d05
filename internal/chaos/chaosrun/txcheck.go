package chaosrun

import (
	"context"
	"errors"
	"fmt"

	"github.com/nornlabs/norn/persistence"
)

// execTx runs one statement on the store's database in a transactional
// step that records nothing else.
func execTx(ctx context.Context, st persistence.Store, query string) error {
	_, err := st.ApplyTx(ctx, "", func(ctx context.Context, tx persistence.Tx) error {
		_, err := tx.Exec(ctx, query)
		return err
	}, func() (persistence.Step, error) { return persistence.Step{}, nil })
	return err
}

var errReadOnly = errors.New("chaosrun: read only")

// readCounters reads the run's counter rows (missing rows read 0).
func readCounters(ctx context.Context, st persistence.Store, run string) ([]int64, error) {
	out := make([]int64, txRows)
	_, err := st.ApplyTx(ctx, "", func(ctx context.Context, tx persistence.Tx) error {
		for row := range txRows {
			err := tx.QueryRow(ctx, txReadRow, txRow(run, row)).Scan(&out[row])
			if err != nil && !errors.Is(err, persistence.ErrNoRows) {
				return err
			}
		}
		return errReadOnly
	}, func() (persistence.Step, error) { return persistence.Step{}, nil })
	if !errors.Is(err, errReadOnly) {
		return nil, fmt.Errorf("read the counters: %w", err)
	}
	return out, nil
}

// checkTx checks the tx workload: every workflow completed with its one
// activity recorded once, and each counter row holds exactly the number of
// completed workflows that count on it, however often their activity ran.
// A row above it had a write applied twice (RecordedTwice); below it, a
// recorded result whose write is missing (Lost).
func (r *runner) checkTx(ctx context.Context, effects map[string]int) (Result, error) {
	res := Result{Mode: "tx", Items: r.cfg.Workflows, DupExecutions: dupExecutions(effects, txPrefix(r.run))}
	completed := make([]int64, txRows) // per row: workflows whose count committed
	err := r.checkEnds(ctx, &res, "tx", func(i int) string { return txID(r.run, i) }, 1, txWant, effects,
		func(i int, acts map[string]persistence.Event) {
			if e, ok := acts[countName+":1"]; ok && e.Error == "" {
				completed[i%txRows]++
			}
		})
	if err != nil {
		return res, err
	}
	counters, err := readCounters(ctx, r.st, r.run)
	if err != nil {
		return res, err
	}
	res.Counted = 0
	for row, n := range counters {
		res.Counted += n
		switch want := completed[row]; {
		case n > want:
			res.RecordedTwice += int(n - want)
			res.note("counter %s = %d, but %d recorded results count on it: a write applied twice", txRow(r.run, row), n, want)
		case n < want:
			res.Lost += int(want - n)
			res.note("counter %s = %d, but %d recorded results count on it: a write lost", txRow(r.run, row), n, want)
		}
	}
	return res, nil
}
