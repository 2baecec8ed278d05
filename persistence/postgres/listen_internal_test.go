package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	a := openAt(t, url)
	b := openAt(t, url)

	nils, heard := listenFor(t, b)
	if _, err := a.Apply(ctx, persistence.Step{Create: &persistence.Instance{ID: "x", Workflow: "wf", LeaseOwner: "n", LeaseEpoch: 1}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // several pings
	if _, err := a.Apply(ctx, persistence.Step{Send: []persistence.NewMessage{{ID: "m", Target: "x"}}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "a wake-up after idle pings", func() bool { return heard("x") })
	if n := nils(); n != 1 {
		t.Fatalf("fn(nil) called %d times, want 1 (no reconnect)", n)
	}
}

// openAt opens a store on url, closed when the test ends.
func openAt(t *testing.T, url string) *Store {
	t.Helper()
	st, err := Open(context.Background(), url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// createUnleased creates instance id with no lease: a wake-up for its
// owner, wherever that is.
func createUnleased(t *testing.T, st *Store, id string) {
	t.Helper()
	if _, err := st.Apply(context.Background(), persistence.Step{Create: &persistence.Instance{ID: id, Workflow: "wf", LeaseEpoch: 1},
		History: []persistence.Event{{Seq: 0, Kind: "started"}}}); err != nil {
		t.Fatal(err)
	}
}

// waitLocked waits until st's listener holds its presence lock.
func waitLocked(t *testing.T, st *Store) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "the listener to take its lock", func() bool {
		st.listenMu.Lock()
		defer st.listenMu.Unlock()
		return len(st.listenPIDs) == 1
	})
}

// startListen runs st.Listen until the test ends, counting rescans and
// the IDs heard.
func startListen(t *testing.T, st *Store) (nils func() int, heard func(id string) bool) {
	t.Helper()
	var mu sync.Mutex
	n, ids := 0, map[string]bool{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- st.Listen(ctx, func(got []string) {
			mu.Lock()
			defer mu.Unlock()
			if got == nil {
				n++
			}
			for _, id := range got {
				ids[id] = true
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	nils = func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
	heard = func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return ids[id]
	}
	return nils, heard
}

// listenFor is startListen, then waits for the first rescan (the listener
// is in place).
func listenFor(t *testing.T, st *Store) (nils func() int, heard func(id string) bool) {
	t.Helper()
	nils, heard = startListen(t, st)
	testutil.Eventually(t, 10*time.Second, "the listener to start", func() bool { return nils() >= 1 })
	return nils, heard
}

// A store sends wake-up notifications only when another store listens: its
// own listener does not count, nor does a connection that LISTENs without
// announcing itself.
func TestWakeOnlyWhenOthersListen(t *testing.T) {
	ctx := context.Background()
	url := testutil.PostgresURL(t)
	raw, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close(ctx)
	if _, err := raw.Exec(ctx, `LISTEN "norn_wake"`); err != nil {
		t.Fatal(err)
	}

	// Alone, with a listener of its own: x1's wake-up is not sent. Close
	// waits for the notifier (before it stops the listener), so x1 has
	// been dealt with when it returns.
	a1 := openAt(t, url)
	a1.presenceTTL.Store(0)
	ldone := make(chan error, 1)
	go func() { ldone <- a1.Listen(ctx, func([]string) {}) }()
	waitLocked(t, a1)
	createUnleased(t, a1, "x1")
	if err := a1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-ldone; !errors.Is(err, persistence.ErrStoreClosed) {
		t.Fatalf("Listen returned %v after Close", err)
	}

	// With another store listening, x2's is sent, and it is the first
	// notification on the channel (they arrive in commit order).
	b := openAt(t, url)
	_, heard := listenFor(t, b)
	a2 := openAt(t, url)
	createUnleased(t, a2, "x2")
	testutil.Eventually(t, 10*time.Second, "b to hear x2", func() bool { return heard("x2") })
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := raw.WaitForNotification(wctx)
	if err != nil {
		t.Fatal(err)
	}
	var msg wakeMsg
	if err := json.Unmarshal([]byte(n.Payload), &msg); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(msg.IDs, []string{"x2"}) {
		t.Fatalf("first notification names %v, want [x2] (x1 had no one to wake)", msg.IDs)
	}
}

// listenOwn starts st's own listener (ignoring what it hears) and waits
// until it holds its lock.
func listenOwn(t *testing.T, st *Store) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Listen(ctx, func([]string) {}) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	waitLocked(t, st)
}

// A store with a listener of its own trusts a look that found no one else
// for a while, so a listener that starts meanwhile may miss what it wakes.
// The new listener sees the other's lock, and rescans only once that while
// is over.
func TestListenerRescansAfterJoining(t *testing.T) {
	ctx := context.Background()
	url := testutil.PostgresURL(t)
	a := openAt(t, url)
	a.presenceTTL.Store(int64(time.Hour))
	listenOwn(t, a)
	// The notifier is idle (nothing woken yet): look now, as it would.
	if a.othersListening(ctx) {
		t.Fatal("a sees a listener where there is none")
	}

	b := openAt(t, url)
	b.presenceLag.Store(int64(time.Hour))
	nils, heard := startListen(t, b)
	waitLocked(t, b)
	// b is there, but a still trusts its look: x's wake-up is not sent.
	createUnleased(t, a, "x")
	if err := a.Close(); err != nil { // waits for the notifier
		t.Fatal(err)
	}
	// Nor has b rescanned: it found a's listener, so it waits its lag
	// (an hour here) before it does.
	if n := nils(); n != 0 || heard("x") {
		t.Fatalf("b rescanned %d times (heard x: %v) within its lag", n, heard("x"))
	}
}

// A listener that finds no other rescans at once; one that finds another
// rescans once, presenceLag after it connected.
func TestListenerRescanLag(t *testing.T) {
	url := testutil.PostgresURL(t)
	a := openAt(t, url)
	a.presenceLag.Store(int64(time.Hour))
	nils, _ := listenFor(t, a) // returns after its rescan: not an hour
	if n := nils(); n != 1 {
		t.Fatalf("a: %d rescans, want 1", n)
	}

	b := openAt(t, url)
	b.presenceLag.Store(int64(300 * time.Millisecond))
	start := time.Now()
	nils, _ = listenFor(t, b)
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("b rescanned after %v, within its lag", waited)
	}
	if n := nils(); n != 1 {
		t.Fatalf("b: %d rescans, want 1", n)
	}
}

// A store without a listener of its own looks at every send while it sees
// no one: a listener that starts hears its next wake-up.
func TestWakeFromStoreWithoutListener(t *testing.T) {
	ctx := context.Background()
	url := testutil.PostgresURL(t)
	a := openAt(t, url)
	a.presenceTTL.Store(int64(time.Hour)) // not for a look that found no one
	if a.othersListening(ctx) {
		t.Fatal("a sees a listener where there is none")
	}
	b := openAt(t, url)
	_, heard := listenFor(t, b)
	createUnleased(t, a, "x")
	testutil.Eventually(t, 10*time.Second, "b to hear x", func() bool { return heard("x") })
}
