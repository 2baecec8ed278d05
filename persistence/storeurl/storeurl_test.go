package storeurl_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.StopPostgres()
	os.Exit(code)
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, u := range []string{"sqlite://" + filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db"),
		"sqlite://" + filepath.Join(dir, "c.db") + "?synchronous=normal"} {
		openAndList(t, u)
	}
	for _, bad := range []string{"", "mysql://x", "sqlite://", "sqlite://x.db?fsync=no"} {
		if _, err := storeurl.Open(ctx, bad); err == nil || !strings.Contains(err.Error(), "storeurl") {
			t.Fatalf("Open(%q) = %v, want a storeurl error", bad, err)
		}
	}
}

func TestOpenPostgres(t *testing.T) { openAndList(t, testutil.PostgresURL(t)) }

func openAndList(t *testing.T, u string) {
	ctx := context.Background()
	st, err := storeurl.Open(ctx, u)
	if err != nil {
		t.Fatalf("Open(%s): %v", u, err)
	}
	defer st.Close()
	if _, err := st.List(ctx, persistence.ListFilter{}); err != nil {
		t.Fatalf("List on %s: %v", u, err)
	}
}

// A failed Open returns a nil interface, not a typed nil pointer that
// compares non-nil and panics on Close.
func TestOpenErrorReturnsNilStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	for _, u := range []string{
		dir,               // a directory, not a database file
		"sqlite://" + dir, // the same through the scheme
		"postgres://norn@127.0.0.1:1/db?connect_timeout=5&sslmode=disable", // nothing listens on port 1
	} {
		st, err := storeurl.Open(ctx, u)
		if err == nil {
			st.Close()
			t.Fatalf("Open(%q) succeeded; want an error", u)
		}
		if st != nil {
			t.Fatalf("Open(%q) = (%#v, %v); want a nil Store with the error", u, st, err)
		}
	}
}
