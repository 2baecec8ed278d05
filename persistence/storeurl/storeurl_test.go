package storeurl_test

import (
	"context"
	"errors"
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

// OpenExisting creates nothing: not a missing SQLite file, not the tables
// in an empty SQLite file, not the schema in an empty PostgreSQL database;
// once Open made the schema it opens the store.
func TestOpenExisting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	missing := filepath.Join(dir, "sub", "missing.db")
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pg := testutil.PostgresURL(t)
	for _, u := range []string{missing, "sqlite://" + empty, pg} {
		st, err := storeurl.OpenExisting(ctx, u)
		if !errors.Is(err, persistence.ErrNoSchema) || st != nil {
			if st != nil {
				st.Close()
			}
			t.Fatalf("OpenExisting(%s) = %v, want ErrNoSchema", u, err)
		}
	}
	if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenExisting created the directory of a missing file: %v", err)
	}
	// The refused opens left no schema behind: second ones are refused too.
	for _, u := range []string{empty, pg} {
		if _, err := storeurl.OpenExisting(ctx, u); !errors.Is(err, persistence.ErrNoSchema) {
			t.Fatalf("second OpenExisting(%s) = %v, want ErrNoSchema", u, err)
		}
	}
	for _, u := range []string{"sqlite://" + empty, pg} {
		openAndList(t, u) // Open creates the schema
		st, err := storeurl.OpenExisting(ctx, u)
		if err != nil {
			t.Fatalf("OpenExisting(%s) after Open: %v", u, err)
		}
		st.Close()
	}
}
