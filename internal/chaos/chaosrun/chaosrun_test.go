package chaosrun_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nornlabs/norn/internal/chaos/chaosrun"
	"github.com/nornlabs/norn/internal/testutil"
)

// The workers are this test binary, re-executed: TestMain runs the worker
// instead of the tests when the worker environment is set.
func TestMain(m *testing.M) {
	if chaosrun.IsWorker() {
		os.Exit(chaosrun.WorkerMain())
	}
	code := m.Run()
	testutil.StopPostgres()
	os.Exit(code)
}

// A short chaos run: small enough for the test suite on two cores, long
// enough that the kills land during spawning, activities, receives and
// recovery.
func short(t *testing.T, store string, workers int) {
	t.Helper()
	dir := t.TempDir()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if os.Getenv("NORN_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	// NORN_TEST_SOAK=1: 3,000 workflows and messages, 100 kills.
	workflows, kills := testutil.Soak(t, 500, 3000), testutil.Soak(t, 20, 100)
	deadline := time.Duration(testutil.Soak(t, 3, 20)) * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), deadline+2*time.Minute)
	defer cancel()
	results, err := chaosrun.Run(ctx, chaosrun.Config{Store: store, Workflows: workflows, Kills: kills, Workers: workers,
		// The short run takes 10–25 s here (with -race); the deadline is
		// only there to turn a hang into "stuck".
		Chain: true, Queue: true, Timeout: deadline, WorkerCommand: []string{os.Args[0], "-test.run=^$"},
		Dir: dir, Logger: log})
	if err != nil {
		t.Fatalf("chaos run: %v\n%s", err, logs.String())
	}
	var table bytes.Buffer
	if err := chaosrun.PrintTable(&table, results); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	if len(results) != 2 {
		t.Fatalf("%d results, want chain and queue", len(results))
	}
	for _, r := range results {
		for _, n := range r.Notes {
			t.Logf("%s: %s", r.Mode, n)
		}
		if !r.OK() || r.Completed != r.Items || r.Items != workflows {
			t.Errorf("%s (seed %d): %d of %d completed, %d lost, %d recorded twice, %d stuck, %d failed, %d never ran, %d crashes",
				r.Mode, r.Seed, r.Completed, r.Items, r.Lost, r.RecordedTwice, r.Stuck, r.Failed, r.NeverRan, r.Crashes)
		}
		if r.Kills < kills/2 {
			t.Errorf("%s: only %d kills; the run proves little", r.Mode, r.Kills)
		}
	}
	if t.Failed() {
		t.Logf("run log:\n%s", logs.String())
		for _, f := range []string{"worker-0.log", "worker-1.log"} {
			if b, err := os.ReadFile(dir + "/" + f); err == nil {
				t.Logf("%s:\n%s", f, tail(b, 8<<10))
			}
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// The four runs are independent (each has its own store and directory).
func TestChaosSQLite(t *testing.T) {
	t.Parallel()
	short(t, "", 1)
}

func TestChaosPostgres(t *testing.T) {
	t.Parallel()
	short(t, testutil.PostgresURL(t), 2) // skips when no PostgreSQL is available
}

// A short tx run: every workflow's transactional activity increments a
// counter row; after the kills the counters equal the completed workflows
// exactly.
func shortTx(t *testing.T, store string, workers int) {
	t.Helper()
	dir := t.TempDir()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	results, err := chaosrun.Run(ctx, chaosrun.Config{Store: store, Workflows: 300, Kills: 10, Workers: workers,
		Tx: true, Timeout: 3 * time.Minute, WorkerCommand: []string{os.Args[0], "-test.run=^$"}, Dir: dir, Logger: log})
	if err != nil {
		t.Fatalf("chaos run: %v\n%s", err, logs.String())
	}
	var table bytes.Buffer
	if err := chaosrun.PrintTable(&table, results); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	if len(results) != 1 || results[0].Mode != "tx" {
		t.Fatalf("results %+v, want one of mode tx", results)
	}
	r := results[0]
	for _, n := range r.Notes {
		t.Logf("tx: %s", n)
	}
	if !r.OK() || r.Completed != r.Items || r.Items != 300 || r.Counted != int64(r.Completed) {
		t.Errorf("tx (seed %d): %d of %d completed, counters sum to %d, %d lost, %d recorded twice, %d stuck, %d failed, %d crashes",
			r.Seed, r.Completed, r.Items, r.Counted, r.Lost, r.RecordedTwice, r.Stuck, r.Failed, r.Crashes)
	}
	if r.Kills < 5 {
		t.Errorf("only %d kills; the run proves little", r.Kills)
	}
	if t.Failed() {
		t.Logf("run log:\n%s", tail(logs.Bytes(), 16<<10))
	}
}

func TestChaosTxSQLite(t *testing.T) {
	t.Parallel()
	shortTx(t, "", 1)
}

func TestChaosTxPostgres(t *testing.T) {
	t.Parallel()
	shortTx(t, testutil.PostgresURL(t), 2) // skips when no PostgreSQL is available
}
