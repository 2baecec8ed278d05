package sqlite_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
	"github.com/nornlabs/norn/persistence/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T) persistence.Store {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "norn.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestConformance(t *testing.T) { storetest.Run(t, open) }

// Two stores on one file behave like two processes: each has its own writer
// and connections, and SQLite's write lock is all they share.
func TestConformanceShared(t *testing.T) {
	storetest.RunShared(t, func(t *testing.T) (persistence.Store, persistence.Store) {
		path := filepath.Join(t.TempDir(), "norn.db")
		var stores [2]persistence.Store
		for i := range stores {
			st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			stores[i] = st
		}
		return stores[0], stores[1]
	})
}

func TestConcurrentOpenMigrates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.db")
	errs := make(chan error, 4)
	stores := make(chan *sqlite.Store, 4)
	for i := 0; i < 4; i++ {
		go func() {
			st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
			errs <- err
			stores <- st
		}()
	}
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if st := <-stores; st != nil {
			defer st.Close()
		}
	}
}

func TestUnwritablePath(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	if err := writeFile(blocker); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(blocker, "sub", "norn.db")
	_, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open(%s) error = %v, want one naming the path", path, err)
	}
}

func TestBadOptions(t *testing.T) {
	_, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "n.db"), sqlite.Options{Synchronous: "OFF"})
	if err == nil {
		t.Fatal("synchronous=OFF accepted")
	}
}

func TestClosedStore(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "n.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	_, err = st.Apply(context.Background(), persistence.Step{Send: []persistence.NewMessage{{ID: "x", Channel: "c"}}})
	if err != persistence.ErrStoreClosed {
		t.Fatalf("Apply after Close = %v", err)
	}
}
