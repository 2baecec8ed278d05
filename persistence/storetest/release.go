package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// Every survivor of a dead node releases its leases, at about the same
// time, while the nodes that now own the instances take them: each lease
// is released once (its epoch moves by one), both releases succeed, and a
// lease taken after the first release is not released by the second.
func testConcurrentRelease(t *testing.T, st persistence.Store) { concurrentRelease(t, st, st) }

// concurrentRelease releases from a and b at once, and takes from b.
func concurrentRelease(t *testing.T, a, b persistence.Store) {
	st := b
	const n = 60
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("dead-%02d", i)
		apply(t, st, persistence.Step{Create: &persistence.Instance{ID: ids[i], Workflow: "wf", LeaseOwner: "node-dead", LeaseEpoch: 1},
			LeaseTTL: time.Hour, History: []persistence.Event{ev(0, "started")}})
	}
	create(t, st, "alive")
	// The taker spins on ErrLeaseHeld until the first release commits; the
	// deadline only bounds a hang.
	tctx, cancel := context.WithTimeout(ctx(), time.Minute)
	defer cancel()
	start := make(chan struct{})
	errs := make(chan error, 3)
	var wg sync.WaitGroup
	for _, releaser := range []persistence.Store{a, b} {
		wg.Go(func() {
			<-start
			errs <- releaser.ReleaseLeases(tctx, "node-dead")
		})
	}
	taken := make([]persistence.Instance, n)
	wg.Go(func() {
		<-start
		for i, id := range ids {
			for {
				in, err := st.AcquireLease(tctx, id, "node-b", time.Hour)
				if err == nil {
					taken[i] = in
					break
				}
				if !errors.Is(err, persistence.ErrLeaseHeld) || tctx.Err() != nil {
					errs <- fmt.Errorf("take %s: %w", id, err)
					return
				}
			}
		}
		errs <- nil
	})
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids {
		in, err := st.Instance(ctx(), id)
		if err != nil {
			t.Fatal(err)
		}
		// Created with epoch 1, released once (2), taken (3).
		if taken[i].LeaseEpoch != 3 || in.LeaseOwner != "node-b" || in.LeaseEpoch != 3 {
			t.Fatalf("%s: taken with epoch %d, now %+v; want node-b's lease with epoch 3", id, taken[i].LeaseEpoch, in)
		}
	}
	if in, _ := st.Instance(ctx(), "alive"); in.LeaseOwner != owner || in.LeaseEpoch != 1 {
		t.Fatalf("another owner's instance = %+v", in)
	}
}
