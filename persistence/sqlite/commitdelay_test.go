package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
)

func openDelayed(t *testing.T, delay time.Duration, log *sqlite.CommitLog) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "norn.db"),
		sqlite.Options{CommitDelay: delay, Commits: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func create(ctx context.Context, st *sqlite.Store, id string) error {
	_, err := st.Apply(ctx, persistence.Step{Create: &persistence.Instance{ID: id, Workflow: "wf"}})
	return err
}

// A caller alone never waits for company: with a commit delay of an hour,
// its steps still commit one after another.
func TestCommitDelayLoneCallerDoesNotWait(t *testing.T) {
	log := &sqlite.CommitLog{}
	st := openDelayed(t, time.Hour, log)
	done := make(chan error, 1)
	go func() {
		for i := range 50 {
			if err := create(context.Background(), st, fmt.Sprintf("lone-%d", i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a lone caller's steps waited for others")
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for i, n := range log.Sizes() {
		if n != 1 {
			t.Fatalf("commit %d carried %d steps, want 1", i, n)
		}
	}
}

// Callers that come back after each commit share the next one: with a
// commit delay far longer than a caller takes to come back, three callers
// that each commit one step after another share four commits in five or
// more. (Without the
// delay the writer starts each commit with the first caller back, and most
// commits carry one step.)
func TestCommitDelayGathersReturningCallers(t *testing.T) {
	log := &sqlite.CommitLog{}
	st := openDelayed(t, 2*time.Second, log)
	const callers, rounds = 3, 100
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				if err := create(context.Background(), st, fmt.Sprintf("c%d-%d", c, i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The observer hears of a commit after its callers: Close waits for it.
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	sizes := log.Sizes()
	total, shared := 0, 0
	for _, n := range sizes {
		total += n
		if n > 1 {
			shared++
		}
	}
	if total != callers*rounds {
		t.Fatalf("%d steps committed, want %d", total, callers*rounds)
	}
	if shared*5 < len(sizes)*4 {
		t.Fatalf("%d of %d commits shared: %v", shared, len(sizes), sizes)
	}
}
