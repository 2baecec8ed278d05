package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// An idle listener pings its connection and keeps it: notifications still
// arrive afterwards, with no reconnect (no second rescan).
func TestListenPingsIdleConnection(t *testing.T) {
	old := listenPing
	listenPing = 50 * time.Millisecond
	t.Cleanup(func() { listenPing = old })

	ctx := context.Background()
	url := testutil.PostgresURL(t)
	a, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	var mu sync.Mutex
	var nils int
	heard := make(chan string, 10)
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.Listen(lctx, func(ids []string) {
			mu.Lock()
			defer mu.Unlock()
			if ids == nil {
				nils++
			}
			for _, id := range ids {
				heard <- id
			}
		})
	}()
	defer func() {
		cancel()
		<-done
	}()
	if _, err := a.Apply(ctx, persistence.Step{Create: &persistence.Instance{ID: "x", Workflow: "wf", LeaseOwner: "n", LeaseEpoch: 1}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // several pings
	if _, err := a.Apply(ctx, persistence.Step{Send: []persistence.NewMessage{{ID: "m", Target: "x"}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-heard:
		if id != "x" {
			t.Fatalf("heard %q", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after idle pings")
	}
	mu.Lock()
	defer mu.Unlock()
	if nils != 1 {
		t.Fatalf("fn(nil) called %d times, want 1 (no reconnect)", nils)
	}
}
