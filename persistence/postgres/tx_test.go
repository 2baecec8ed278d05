package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
)

const (
	txTable = `CREATE TABLE IF NOT EXISTS tx_counter (k TEXT PRIMARY KEY, n BIGINT NOT NULL)`
	txInc   = `INSERT INTO tx_counter (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = tx_counter.n + 1`
)

// commitSizes records the number of steps of every commit.
type commitSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (c *commitSizes) ObserveCommit(ci persistence.CommitInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ci.Err == nil {
		c.sizes = append(c.sizes, ci.Steps)
	}
}

func (c *commitSizes) has(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.sizes {
		if s == n {
			return true
		}
	}
	return false
}

// txCase is one transactional step of a batch: what its function does,
// the epoch its step claims, and the error ApplyTx is to return.
type txCase struct {
	id    string
	run   func(ctx context.Context, tx persistence.Tx) error
	epoch int64
	want  error
}

// txStep appends an event to id's history under epoch.
func txStep(id string, epoch int64) func() (persistence.Step, error) {
	return func() (persistence.Step, error) {
		return persistence.Step{Instance: id, Epoch: epoch, History: []persistence.Event{{Seq: 1, Kind: "activity"}}}, nil
	}
}

func incOf(id string) func(ctx context.Context, tx persistence.Tx) error {
	return func(ctx context.Context, tx persistence.Tx) error {
		_, err := tx.Exec(ctx, txInc, id)
		return err
	}
}

// runBatch applies cases while the only transactional writer is held by
// another step, so that they queue and share the next transaction. It
// returns each case's error.
func runBatch(t *testing.T, st *postgres.Store, cases []txCase) []error {
	t.Helper()
	create(t, st, "holder")
	held, release := make(chan struct{}), make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		_, err := st.ApplyTx(bg, "", func(ctx context.Context, tx persistence.Tx) error {
			close(held)
			<-release
			return incOf("holder")(ctx, tx)
		}, txStep("holder", 1))
		holder <- err
	}()
	<-held
	errs := make([]error, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = st.ApplyTx(bg, "", c.run, txStep(c.id, c.epoch))
		}()
		// Queued in order, so that the batch runs them in this order.
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%d steps queued", i+1), func() bool { return postgres.QueuedTx(st) == i+1 })
	}
	close(release)
	if err := <-holder; err != nil {
		t.Fatalf("holding step: %v", err)
	}
	wg.Wait()
	return errs
}

func counter(t *testing.T, st *postgres.Store, k string) int64 {
	t.Helper()
	var n int64
	errRead := errors.New("read only")
	_, err := st.ApplyTx(bg, "", func(ctx context.Context, tx persistence.Tx) error {
		err := tx.QueryRow(ctx, `SELECT n FROM tx_counter WHERE k = $1`, k).Scan(&n)
		if errors.Is(err, persistence.ErrNoRows) {
			n = 0
		} else if err != nil {
			return err
		}
		return errRead
	}, func() (persistence.Step, error) { return persistence.Step{}, nil })
	if !errors.Is(err, errRead) {
		t.Fatalf("read counter %s: %v", k, err)
	}
	return n
}

func checkBatch(t *testing.T, st *postgres.Store, cases []txCase, errs []error) {
	t.Helper()
	for i, c := range cases {
		if !matches(errs[i], c.want) {
			t.Errorf("%s: error %v, want %v", c.id, errs[i], c.want)
		}
		want, wantLen := int64(1), int64(2)
		if c.want != nil {
			want, wantLen = 0, 1
		}
		if n := counter(t, st, c.id); n != want {
			t.Errorf("%s: counter %d, want %d", c.id, n, want)
		}
		in, err := st.Instance(bg, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if in.HistoryLen != wantLen {
			t.Errorf("%s: history %d, want %d", c.id, in.HistoryLen, wantLen)
		}
	}
}

func setupTx(t *testing.T, opts postgres.Options, cases []txCase) (*postgres.Store, *commitSizes) {
	t.Helper()
	return setupTxAt(t, testutil.PostgresURL(t), opts, cases)
}

func setupTxAt(t *testing.T, url string, opts postgres.Options, cases []txCase) (*postgres.Store, *commitSizes) {
	t.Helper()
	opts.TxWriters = 1
	st := openURL(t, url, opts)
	sizes := &commitSizes{}
	t.Cleanup(st.ObserveCommits(sizes))
	if _, err := st.ApplyTx(bg, "", func(ctx context.Context, tx persistence.Tx) error {
		_, err := tx.Exec(ctx, txTable)
		return err
	}, func() (persistence.Step, error) { return persistence.Step{}, nil }); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		create(t, st, c.id)
	}
	return st, sizes
}

// Transactional steps queued together share one transaction: one commit
// carries every step that succeeded, and a function that fails, or a step
// that is fenced, rolls back only its own writes.
func TestTxStepsShareACommit(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	cases := []txCase{
		{id: "a", run: incOf("a"), epoch: 1},
		{id: "b", run: incOf("b"), epoch: 1},
		{id: "boom", run: func(ctx context.Context, tx persistence.Tx) error {
			if err := incOf("boom")(ctx, tx); err != nil {
				return err
			}
			return errBoom
		}, epoch: 1, want: errBoom},
		{id: "c", run: incOf("c"), epoch: 1},
		{id: "fenced", run: incOf("fenced"), epoch: 7, want: persistence.ErrFenced},
		{id: "bad-sql", run: func(ctx context.Context, tx persistence.Tx) error {
			if err := incOf("bad-sql")(ctx, tx); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT no_such_column FROM tx_counter`)
			return err
		}, epoch: 1, want: errAny},
		{id: "ignores-error", run: func(ctx context.Context, tx persistence.Tx) error {
			if err := incOf("ignores-error")(ctx, tx); err != nil {
				return err
			}
			_, _ = tx.Exec(ctx, `SELECT no_such_column FROM tx_counter`)
			return nil
		}, epoch: 1, want: errAny},
		{id: "d", run: incOf("d"), epoch: 1},
	}
	st, sizes := setupTx(t, postgres.Options{}, cases)
	errs := runBatch(t, st, cases)
	checkBatch(t, st, cases, errs)
	if !sizes.has(4) {
		t.Fatalf("commit sizes %v: want one commit of the 4 steps that succeeded", sizes.sizes)
	}
}

// errAny stands for any error in a txCase.
var errAny = errors.New("any error")

func matches(err, want error) bool {
	switch want {
	case nil:
		return err == nil
	case errAny:
		return err != nil
	}
	return errors.Is(err, want)
}

// A function that holds its step past TxTimeout (in a statement, in its own
// code, or with the native transaction) is cut off and rolled back, and
// the steps queued with it still commit.
func TestTxTimeoutInBatch(t *testing.T) {
	t.Parallel()
	cases := []txCase{
		{id: "sleeps-in-sql", run: func(ctx context.Context, tx persistence.Tx) error {
			if err := incOf("sleeps-in-sql")(ctx, tx); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT pg_sleep(60)`)
			return err
		}, epoch: 1, want: persistence.ErrTxTimeout},
		{id: "a", run: incOf("a"), epoch: 1},
		{id: "sleeps-in-go", run: func(ctx context.Context, tx persistence.Tx) error {
			if err := incOf("sleeps-in-go")(ctx, tx); err != nil {
				return err
			}
			<-ctx.Done()
			// Too late: the step is over.
			_, err := tx.Exec(context.Background(), txInc, "sleeps-in-go")
			return err
		}, epoch: 1, want: persistence.ErrTxTimeout},
		{id: "open-rows", run: func(ctx context.Context, tx persistence.Tx) error {
			if err := incOf("open-rows")(ctx, tx); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `SELECT generate_series(1, 10000)`)
			if err != nil {
				return err
			}
			rows.Next() // left open: the store closes them
			return nil
		}, epoch: 1},
		{id: "native", run: func(ctx context.Context, tx persistence.Tx) error {
			ptx, ok := postgres.PgxTx(tx)
			if !ok {
				return errors.New("no native transaction")
			}
			if _, err := ptx.Exec(ctx, txInc, "native"); err != nil {
				return err
			}
			if ptx.Commit(ctx) == nil || ptx.Rollback(ctx) == nil {
				return errors.New("the native transaction's end was not refused")
			}
			_, err := ptx.Exec(ctx, `SELECT pg_sleep(60)`)
			return err
		}, epoch: 1, want: persistence.ErrTxTimeout},
		{id: "after-native", run: incOf("after-native"), epoch: 1},
	}
	st, _ := setupTx(t, postgres.Options{TxTimeout: 300 * time.Millisecond}, cases)
	errs := runBatch(t, st, cases)
	checkBatch(t, st, cases, errs)
}

// A function that waits for a lock while it shares its transaction with
// others gives up after a moment and runs again alone once that
// transaction committed: the lock's holder may be waiting for what the
// earlier functions hold.
func TestTxLockWaitRunsAlone(t *testing.T) {
	t.Parallel()
	url := testutil.PostgresURL(t)
	cases := []txCase{
		{id: "a", run: incOf("a"), epoch: 1},
		{id: "hot", run: incOf("hot"), epoch: 1},
		{id: "c", run: incOf("c"), epoch: 1},
	}
	st, sizes := setupTxAt(t, url, postgres.Options{}, cases)
	if _, err := st.ApplyTx(bg, "", incOf("hot"), func() (persistence.Step, error) { return persistence.Step{}, nil }); err != nil {
		t.Fatal(err)
	}
	// Another connection holds the row "hot" until a and c committed.
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = "norn"
	other, err := pgx.ConnectConfig(bg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(bg)
	otx, err := other.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otx.Exec(bg, `UPDATE tx_counter SET n = n WHERE k = 'hot'`); err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		testutil.Eventually(t, 30*time.Second, "a and c committed", func() bool { return sizes.has(2) })
		if err := otx.Commit(bg); err != nil {
			t.Error(err)
		}
	}()
	errs := runBatch(t, st, cases)
	<-released
	for i, c := range cases {
		if errs[i] != nil {
			t.Errorf("%s: %v", c.id, errs[i])
		}
	}
	if n := counter(t, st, "hot"); n != 2 {
		t.Errorf("hot: counter %d, want 2", n)
	}
	for _, id := range []string{"a", "c"} {
		if n := counter(t, st, id); n != 1 {
			t.Errorf("%s: counter %d, want 1", id, n)
		}
	}
}
