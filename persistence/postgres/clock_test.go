package postgres_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
)

// serverNow reads the server's clock.
func serverNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var ns int64
	if err := pool.QueryRow(bg, `SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint`).Scan(&ns); err != nil {
		t.Fatal(err)
	}
	return time.Unix(0, ns)
}

// leaseWithin checks that a lease expires ttl after some server time in
// [lo, hi].
func leaseWithin(t *testing.T, what string, got time.Time, lo, hi time.Time, ttl time.Duration) {
	t.Helper()
	if got.Before(lo.Add(ttl)) || got.After(hi.Add(ttl)) {
		t.Fatalf("%s: lease expires %v, want server time + %v within [%v, %v] (%v off the start)",
			what, got, ttl, lo.Add(ttl), hi.Add(ttl), got.Sub(lo.Add(ttl)))
	}
}

// A store on a host whose clock is an hour off, either way, creates, takes
// and renews leases that expire ttl after the server's now, and judges
// other leases by the server's clock too: it can neither take a live lease
// early nor keep one late.
func TestLeasesUseServerClock(t *testing.T) {
	st := openURL(t, testutil.PostgresURL(t), postgres.Options{})
	pool := st.Pool()
	const ttl = time.Minute
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		postgres.SetClockOffset(st, skew)
		id := "skew" + skew.String()

		lo := serverNow(t, pool)
		res, err := st.Apply(bg, persistence.Step{Create: &persistence.Instance{ID: id, Workflow: "wf", LeaseOwner: "n", LeaseEpoch: 1},
			LeaseTTL: ttl, History: []persistence.Event{{Seq: 0, Kind: "started"}}})
		hi := serverNow(t, pool)
		if err != nil || res.Existing != nil {
			t.Fatalf("skew %v: create = %+v, %v", skew, res, err)
		}
		in, err := st.Instance(bg, id)
		if err != nil {
			t.Fatal(err)
		}
		leaseWithin(t, "skew "+skew.String()+": created", in.LeaseExpires, lo, hi, ttl)

		lo = serverNow(t, pool)
		in, err = st.AcquireLease(bg, id, "n", 2*ttl)
		hi = serverNow(t, pool)
		if err != nil {
			t.Fatal(err)
		}
		leaseWithin(t, "skew "+skew.String()+": acquired", in.LeaseExpires, lo, hi, 2*ttl)

		lo = serverNow(t, pool)
		if _, err := st.RenewLeases(bg, "n", 3*ttl); err != nil {
			t.Fatal(err)
		}
		hi = serverNow(t, pool)
		in, _ = st.Instance(bg, id)
		leaseWithin(t, "skew "+skew.String()+": renewed", in.LeaseExpires, lo, hi, 3*ttl)

		// By this host's clock, an hour ahead, the lease would have
		// expired; by the server's it has not.
		_, err = st.AcquireLease(bg, id, "other", ttl)
		if !errors.Is(err, persistence.ErrLeaseHeld) {
			t.Fatalf("skew %v: another owner acquires a live lease: %v", skew, err)
		}
		ids, err := st.Runnable(bg, nil, 0)
		if err != nil || slices.Contains(ids, id) {
			t.Fatalf("skew %v: runnable under a live lease = %v, %v", skew, ids, err)
		}
		ids, err = st.Runnable(bg, []int{persistence.BucketOf(id)}, 0)
		if err != nil || len(ids) != 0 {
			t.Fatalf("skew %v: runnable in its bucket under a live lease = %v, %v", skew, ids, err)
		}
	}
}

// waitForLockWaiter returns once some backend of the test database waits
// for a lock.
func waitForLockWaiter(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	for {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		if err != nil {
			t.Fatalf("waiting for a lock waiter: %v", err)
		}
		if n > 0 {
			return
		}
	}
}

// A lease taken or renewed while the call waits for the instance's row lock
// runs from when the lock was granted, not from when the call began.
func TestLeaseRunsFromLockGrant(t *testing.T) {
	st := openURL(t, testutil.PostgresURL(t), postgres.Options{})
	pool := st.Pool()
	create(t, st, "a")
	const ttl = time.Minute
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"acquire", func() error { _, err := st.AcquireLease(bg, "a", "n", ttl); return err }},
		{"renew", func() error { _, err := st.RenewLeases(bg, "n", ttl); return err }},
	} {
		// Another transaction locks the row without changing it, so that
		// nothing makes the server evaluate the waiting statement again.
		tx, err := pool.BeginTx(bg, pgx.TxOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(bg, `SELECT 1 FROM instances WHERE id = 'a' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- tc.call() }()
		waitForLockWaiter(t, pool)
		granted := serverNow(t, pool)
		if err := tx.Commit(bg); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		in, err := st.Instance(bg, "a")
		if err != nil {
			t.Fatal(err)
		}
		if min := granted.Add(ttl); in.LeaseExpires.Before(min) {
			t.Fatalf("%s: lease expires %v, before %v: it ran from before the lock was granted", tc.name, in.LeaseExpires, min)
		}
	}
}
