package postgres

import (
	"fmt"
	"testing"

	"github.com/nornlabs/norn/persistence"
)

// locksOf compiles steps as one batch and returns the advisory locks the
// batch takes: key → exclusive.
func locksOf(s *Store, steps ...persistence.Step) map[lockKey]bool {
	batch := make([]*writeReq, len(steps))
	for i, st := range steps {
		r := &writeReq{step: st}
		r.ops = s.compile(r)
		batch[i] = r
	}
	l, ok := batchLocks(s, batch)
	out := map[lockKey]bool{}
	if !ok {
		return out
	}
	args := l.args
	spaces, keys, excl := args[0].([]int32), args[1].([]int32), args[2].([]bool)
	for i := range keys {
		out[lockKey{spaces[i], keys[i]}] = excl[i]
	}
	return out
}

// conflict reports whether two batches holding a and b would wait for one
// another: a lock both hold, exclusively in one of them.
func conflict(a, b map[lockKey]bool) bool {
	for k, x := range a {
		if y, ok := b[k]; ok && (x || y) {
			return true
		}
	}
	return false
}

func endStep(id string) persistence.Step {
	return persistence.Step{Instance: id, Epoch: 1, Status: persistence.StatusCompleted}
}

func sendStep(targets ...string) persistence.Step {
	st := persistence.Step{}
	for i, t := range targets {
		st.Send = append(st.Send, persistence.NewMessage{ID: fmt.Sprint("m", i), Target: t})
	}
	return st
}

// Ending instances never waits for the ends of others, however many end in
// a batch; a send to an instance waits for its end, whether the batch
// locks its targets one by one or (many of them) by bucket.
func TestInstanceLocks(t *testing.T) {
	s := &Store{chanLocks: 1, instLocks: 2, instBucketLocks: 3}
	var ends1, ends2 []persistence.Step
	for i := range 64 {
		ends1 = append(ends1, endStep(fmt.Sprint("a-", i)))
		ends2 = append(ends2, endStep(fmt.Sprint("b-", i)))
	}
	if conflict(locksOf(s, ends1...), locksOf(s, ends2...)) {
		t.Error("two batches ending different instances wait for one another")
	}
	few := locksOf(s, sendStep("a-7", "x", "y"))
	if !conflict(locksOf(s, ends1...), few) {
		t.Error("a send to a-7 does not wait for a batch that ends a-7")
	}
	if conflict(locksOf(s, ends2...), few) {
		t.Error("a send to a-7 waits for a batch that ends other instances")
	}
	var targets []string
	for i := range 3 * instLockExactMax {
		targets = append(targets, fmt.Sprint("t-", i))
	}
	many := locksOf(s, sendStep(append(targets, "a-7")...))
	if len(many) > instBuckets {
		t.Errorf("a send to %d instances takes %d locks, want at most %d", len(targets)+1, len(many), instBuckets)
	}
	if !conflict(locksOf(s, ends1...), many) {
		t.Error("a send to many instances, a-7 among them, does not wait for a batch that ends a-7")
	}
	if !conflict(locksOf(s, endStep("a-7")), many) {
		t.Error("a send to many instances does not wait for the end of one of them")
	}
	// The end and the sends in one batch: no lock is lost in the merge.
	both := locksOf(s, append([]persistence.Step{sendStep(targets...)}, ends1...)...)
	if !conflict(both, few) {
		t.Error("a batch ending a-7 and sending to many others does not block a send to a-7")
	}
}
