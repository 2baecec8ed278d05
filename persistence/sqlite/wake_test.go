package sqlite_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence/sqlite"
)

// Wake requests recorded through one store reach the Listen of another
// store on the same file (as between two processes), including requests
// made just before Listen started, and each request is delivered once.
func TestWakeRequestsReachOtherStore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "norn.db")
	var stores [2]*sqlite.Store
	for i := range stores {
		st, err := sqlite.Open(ctx, path, sqlite.Options{WakePoll: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores[i] = st
	}
	client, node := stores[0], stores[1]

	// Made while the node is still starting: Listen must not skip it.
	if err := client.RequestWake(ctx, []string{"early"}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var got []string
	arrived := make(chan struct{}, 16)
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- node.Listen(lctx, func(ids []string) {
			mu.Lock()
			got = append(got, ids...)
			mu.Unlock()
			arrived <- struct{}{}
		})
	}()
	want := []string{"early"}
	wait := func() {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			mu.Lock()
			ok := len(got) >= len(want)
			mu.Unlock()
			if ok {
				return
			}
			select {
			case <-arrived:
			case <-deadline:
				t.Fatalf("listener got %v; want %v", got, want)
			}
		}
	}
	wait()
	if err := client.RequestWake(ctx, []string{"a", "b", "a"}); err != nil {
		t.Fatal(err)
	}
	want = append(want, "a", "b") // one batch: a repeated ID once
	wait()
	if err := client.RequestWake(ctx, []string{"c"}); err != nil {
		t.Fatal(err)
	}
	want = append(want, "c")
	wait()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Listen returned %v after its context ended; want nil", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %v; want %v, each once", got, want)
	}
}
