package testutil

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// SQLitePath is a fresh database path in the test's temp dir.
func SQLitePath(tb testing.TB) string {
	return filepath.Join(tb.TempDir(), "norn.db")
}

// OpenSQLite opens a store at path and closes it when the test ends. It
// commits with synchronous=NORMAL: a commit survives the crash of any
// process (what the runtime's tests kill), only not a power cut, and the
// tests do not wait for the disk at each commit. The driver's own tests
// (persistence/sqlite) keep the default, FULL.
func OpenSQLite(tb testing.TB, path string) *sqlite.Store {
	tb.Helper()
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{Synchronous: sqlite.Normal})
	if err != nil {
		tb.Fatalf("open sqlite %s: %v", path, err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// Logger is quiet unless NORN_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("NORN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// StartNode starts a System with short test timings; cfg.Store must be set.
// The node is stopped when the test ends (before the store closes).
func StartNode(tb testing.TB, cfg actor.Config) *actor.System {
	tb.Helper()
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = Logger()
	}
	sys, err := actor.Start(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("start node: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sys.Stop(ctx); err != nil {
			tb.Errorf("stop node: %v", err)
		}
	})
	return sys
}

// Ctx is a context that ends with the test or after d.
func Ctx(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// Until polls cond as Eventually does until it holds or ctx ends, and
// reports whether it held: for a goroutine other than the test's, which
// must not end the test itself.
func Until(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

// Eventually polls cond every few milliseconds until it holds, failing the
// test if it still does not after d (a deadline, not a measurement).
func Eventually(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("still not true after %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
