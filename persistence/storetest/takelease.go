package storetest

import (
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// testTakeLease: a step with TakeLease takes the lease of an instance read
// without one as it applies. Of writers that read the same epoch one wins;
// the others are fenced, or find the lease held, and write nothing.
func testTakeLease(t *testing.T, st persistence.Store) {
	check := func(what string, id string, status persistence.Status, leaseOwner string, epoch, hlen int64) persistence.Instance {
		t.Helper()
		in, err := st.Instance(ctx(), id)
		if err != nil {
			t.Fatal(err)
		}
		if in.Status != status || in.LeaseOwner != leaseOwner || in.LeaseEpoch != epoch || in.HistoryLen != hlen {
			t.Fatalf("%s: %s is %s, leased to %q at epoch %d, %d events; want %s, %q, %d, %d",
				what, id, in.Status, in.LeaseOwner, in.LeaseEpoch, in.HistoryLen, status, leaseOwner, epoch, hlen)
		}
		return in
	}
	create(t, st, "a")
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Status: persistence.StatusWaiting, ReleaseLease: true})
	check("passivated", "a", persistence.StatusWaiting, "", 1, 1)

	_, err := st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 1, TakeLease: "node-b"})
	wantErr(t, err, persistence.ErrInvalidRecord) // no LeaseTTL
	_, err = st.Apply(ctx(), persistence.Step{TakeLease: "node-b", LeaseTTL: time.Minute,
		Send: []persistence.NewMessage{{ID: "m", Channel: "c"}}})
	wantErr(t, err, persistence.ErrInvalidRecord) // no instance

	// node-b takes it with the step that records what it received.
	before := time.Now()
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, TakeLease: "node-b", LeaseTTL: time.Minute,
		History: []persistence.Event{ev(1, "received")}})
	in := check("taken", "a", persistence.StatusRunning, "node-b", 2, 2)
	if in.LeaseExpires.Before(before.Add(30 * time.Second)) {
		t.Fatalf("lease taken until %v, want about a minute from %v", in.LeaseExpires, before)
	}
	// node-c read it at the same epoch: fenced, nothing written.
	_, err = st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 1, TakeLease: "node-c", LeaseTTL: time.Minute,
		History: []persistence.Event{ev(1, "received")}})
	wantErr(t, err, persistence.ErrFenced)
	// At the current epoch it finds node-b's live lease.
	_, err = st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 2, TakeLease: "node-c", LeaseTTL: time.Minute,
		History: []persistence.Event{ev(2, "x")}})
	wantErr(t, err, persistence.ErrLeaseHeld)
	check("after the losers", "a", persistence.StatusRunning, "node-b", 2, 2)
	// The holder writes at the new epoch; renewing names the instance.
	apply(t, st, persistence.Step{Instance: "a", Epoch: 2, History: []persistence.Event{ev(2, "x")}})
	if ids, err := st.RenewLeases(ctx(), "node-b", time.Minute); err != nil || len(ids) != 1 || ids[0] != "a" {
		t.Fatalf("RenewLeases(node-b) = %v, %v", ids, err)
	}

	// Passivated again and taken by the step that ends it: from waiting
	// straight to completed, the lease given back.
	apply(t, st, persistence.Step{Instance: "a", Epoch: 2, Status: persistence.StatusWaiting, ReleaseLease: true})
	apply(t, st, persistence.Step{Instance: "a", Epoch: 2, TakeLease: "node-c", LeaseTTL: time.Minute,
		History: []persistence.Event{ev(3, "completed")}, Status: persistence.StatusCompleted, Output: []byte("1")})
	check("ended by the taking step", "a", persistence.StatusCompleted, "", 3, 4)
	_, err = st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 3, TakeLease: "node-b", LeaseTTL: time.Minute,
		History: []persistence.Event{ev(4, "x")}})
	wantErr(t, err, persistence.ErrInstanceDone)

	// An expired lease is taken; its holder is fenced.
	create(t, st, "b")
	if _, err := st.AcquireLease(ctx(), "b", owner, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	err = afterExpiry(func() error {
		_, err := st.Apply(ctx(), persistence.Step{Instance: "b", Epoch: 2, TakeLease: "node-c", LeaseTTL: time.Minute,
			History: []persistence.Event{ev(1, "x")}})
		return err
	})
	if err != nil {
		t.Fatalf("take expired lease: %v", err)
	}
	check("expired lease taken", "b", persistence.StatusRunning, "node-c", 3, 2)
	_, err = st.Apply(ctx(), persistence.Step{Instance: "b", Epoch: 2, History: []persistence.Event{ev(2, "y")}})
	wantErr(t, err, persistence.ErrFenced)
}
