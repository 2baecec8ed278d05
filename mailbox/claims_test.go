package mailbox_test

import (
	"testing"
	"time"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

func TestClaimsKeepLocalConsumersApart(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cs := &mailbox.Claims[string]{Now: func() time.Time { return now }}
	q := queued(4, "jobs")
	direct := persistence.Message{Seq: 9, Target: "b"}

	ok, ahead := cs.Hold("a", q[0], q[1:3])
	if !ok || len(ahead) != 2 {
		t.Fatalf("a's hold = %v, %d ahead", ok, len(ahead))
	}
	if ok, _ := cs.Hold("b", q[1], nil); ok {
		t.Fatal("b took a message a holds")
	}
	// b sees only what a does not hold; a sees all; mail addressed to b is
	// never held back.
	if got := cs.Unclaimed("b", append(q, direct)); len(got) != 2 || got[0].Seq != 4 || got[1].Seq != 9 {
		t.Fatalf("b sees %v", got)
	}
	if got := cs.Unclaimed("a", q); len(got) != 4 {
		t.Fatalf("a sees %d of its own", len(got))
	}
	// A claim that failed to commit frees its messages at once.
	cs.Release("a", q[0], q[1:2], false)
	if got := cs.Unclaimed("b", q); len(got) != 3 {
		t.Fatalf("after a failed claim b sees %d, want 3 (one ahead still held)", len(got))
	}
	// A committed one holds them for ClaimGrace, for reads that began before.
	cs.Release("a", q[2], nil, true)
	if got := cs.Unclaimed("b", q[2:3]); len(got) != 0 {
		t.Fatal("a committed claim is not held for its grace")
	}
	now = now.Add(mailbox.ClaimGrace + time.Millisecond)
	if got := cs.Unclaimed("b", q[2:3]); len(got) != 1 {
		t.Fatal("a committed claim still held after its grace")
	}
	// Forget gives back everything a holds (it unsubscribed or ended).
	cs.Hold("a", q[3], nil)
	cs.Forget("a")
	if ok, _ := cs.Hold("b", q[3], nil); !ok {
		t.Fatal("b cannot take what a gave back")
	}
}
