package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// end ends a running instance made by create (epoch 1) in status, with
// one more event.
func end(t *testing.T, st persistence.Store, id string, status persistence.Status) {
	t.Helper()
	apply(t, st, persistence.Step{Instance: id, Epoch: 1, History: []persistence.Event{ev(1, string(status))},
		Status: status, Output: []byte(`"done"`)})
}

// gone fails the test unless the instance and its history read as gone.
func gone(t *testing.T, st persistence.Store, id string) {
	t.Helper()
	if _, err := st.Instance(ctx(), id); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("purged %s: Instance error = %v, want ErrNotFound", id, err)
	}
	if h, err := st.HistoryRange(ctx(), id, 0, 0); err != nil || len(h) != 0 {
		t.Fatalf("purged %s: history = %d events, %v; want none", id, len(h), err)
	}
}

// kept fails the test unless the instance is there in status with its
// history of n events intact.
func kept(t *testing.T, st persistence.Store, id string, status persistence.Status, n int) {
	t.Helper()
	in, err := st.Instance(ctx(), id)
	if err != nil || in.Status != status {
		t.Fatalf("%s = %+v, %v; want it kept, %s", id, in, err, status)
	}
	if h, err := st.HistoryRange(ctx(), id, 0, 0); err != nil || len(h) != n {
		t.Fatalf("%s: history = %d events, %v; want %d", id, len(h), err, n)
	}
}

func purge(t *testing.T, st persistence.Store, f persistence.PurgeFilter) int {
	t.Helper()
	n, err := st.PurgeInstances(ctx(), f)
	if err != nil {
		t.Fatalf("purge %+v: %v", f, err)
	}
	return n
}

func countPurgeable(t *testing.T, st persistence.Store, f persistence.PurgeFilter) int {
	t.Helper()
	n, err := st.CountPurgeable(ctx(), f)
	if err != nil {
		t.Fatalf("count purgeable %+v: %v", f, err)
	}
	return n
}

// testPurge: PurgeInstances deletes exactly the ended instances its filter
// selects, with their history and delivered outgoing events, in batches of
// at most Limit; live instances stay however old, and so do instances
// that ended after the cut-off and pending outgoing events.
func testPurge(t *testing.T, st persistence.Store) {
	for _, id := range []string{"done", "failed", "cancelled", "running", "waiting", "late"} {
		create(t, st, id)
	}
	apply(t, st, persistence.Step{Create: &persistence.Instance{ID: "other-wf", Workflow: "wf2", LeaseOwner: owner, LeaseEpoch: 1,
		LeaseExpires: time.Now().Add(time.Minute)}, History: []persistence.Event{ev(0, "started")}})
	// done emitted two events: one delivered, one still pending.
	apply(t, st, persistence.Step{Instance: "done", Epoch: 1, Emit: []persistence.OutboxEvent{
		{ID: "done-sent", Instance: "done", Type: "t", At: at(1)}, {ID: "done-pending", Instance: "done", Type: "t", At: at(2)},
		{ID: "running-sent", Instance: "running", Type: "t", At: at(3)}}})
	ob := st
	for _, r := range claim(t, ob, "r", at(100), time.Hour, 0) {
		if r.ID != "done-pending" {
			finish(t, ob, r.ID, "r", persistence.OutboxSent, at(200), "")
		} else {
			finish(t, ob, r.ID, "r", persistence.OutboxPending, at(300), "retry")
		}
	}
	end(t, st, "done", persistence.StatusCompleted)
	end(t, st, "failed", persistence.StatusFailed)
	end(t, st, "cancelled", persistence.StatusCancelled)
	end(t, st, "other-wf", persistence.StatusCompleted)
	apply(t, st, persistence.Step{Instance: "waiting", Epoch: 1, Status: persistence.StatusWaiting, ReleaseLease: true})
	cut := time.Now()
	waitClockPast(cut)
	end(t, st, "late", persistence.StatusCompleted)

	all := persistence.PurgeFilter{Before: cut}
	if n := countPurgeable(t, st, all); n != 4 {
		t.Fatalf("purgeable before the cut-off = %d, want 4 (done, failed, cancelled, other-wf)", n)
	}
	if n := countPurgeable(t, st, persistence.PurgeFilter{Before: time.Now().Add(time.Hour)}); n != 5 {
		t.Fatalf("purgeable before an hour from now = %d, want 5 (the ended ones, live ones never)", n)
	}
	if n := countPurgeable(t, st, persistence.PurgeFilter{Before: cut, Statuses: []persistence.Status{persistence.StatusFailed, persistence.StatusCancelled}}); n != 2 {
		t.Fatalf("purgeable failed or cancelled = %d, want 2", n)
	}
	// A dry run changed nothing; a non-matching workflow selects nothing.
	if n := purge(t, st, persistence.PurgeFilter{Before: cut, Workflow: "nope"}); n != 0 {
		t.Fatalf("purge of an unknown workflow = %d", n)
	}
	if n := purge(t, st, persistence.PurgeFilter{Before: cut, Buckets: []int{}}); n != 0 {
		t.Fatalf("purge of no bucket = %d", n)
	}
	if n := countPurgeable(t, st, persistence.PurgeFilter{Before: cut, Workflow: "wf2"}); n != 1 {
		t.Fatalf("purgeable of wf2 = %d, want 1", n)
	}

	// By status: failed only.
	if n := purge(t, st, persistence.PurgeFilter{Before: cut, Statuses: []persistence.Status{persistence.StatusFailed}}); n != 1 {
		t.Fatalf("purge of failed = %d, want 1", n)
	}
	gone(t, st, "failed")
	kept(t, st, "cancelled", persistence.StatusCancelled, 2)
	// By bucket: cancelled's bucket only.
	if n := purge(t, st, persistence.PurgeFilter{Before: cut, Buckets: []int{persistence.BucketOf("cancelled")}}); n != 1 {
		t.Fatalf("purge of cancelled's bucket = %d, want 1", n)
	}
	gone(t, st, "cancelled")
	// By workflow: wf2's instance is the only one.
	if n := purge(t, st, persistence.PurgeFilter{Before: cut, Workflow: "wf2"}); n != 1 {
		t.Fatalf("purge of wf2 = %d, want 1", n)
	}
	gone(t, st, "other-wf")
	kept(t, st, "late", persistence.StatusCompleted, 2)
	// other-wf again (a purged ID is free), ended after late; then a new
	// cut-off, and after it "last".
	create(t, st, "other-wf")
	end(t, st, "other-wf", persistence.StatusCompleted)
	create(t, st, "last")
	cut = time.Now()
	waitClockPast(cut)
	end(t, st, "last", persistence.StatusCompleted)
	// The rest, one at a time.
	var order []string
	for {
		n := purge(t, st, persistence.PurgeFilter{Before: cut, Limit: 1})
		if n == 0 {
			break
		}
		if n != 1 {
			t.Fatalf("purge with Limit 1 deleted %d", n)
		}
		for _, id := range []string{"done", "late", "other-wf"} {
			if _, err := st.Instance(ctx(), id); errors.Is(err, persistence.ErrNotFound) && !slices.Contains(order, id) {
				order = append(order, id)
			}
		}
		if len(order) > 3 {
			t.Fatalf("more purges than instances: %v", order)
		}
	}
	if slices.Sort(order); fmt.Sprint(order) != "[done late other-wf]" {
		t.Fatalf("purged one at a time: %v, want [done late other-wf]", order)
	}
	gone(t, st, "done")
	gone(t, st, "late")
	gone(t, st, "other-wf")
	kept(t, st, "running", persistence.StatusRunning, 1)
	kept(t, st, "waiting", persistence.StatusWaiting, 1)
	kept(t, st, "last", persistence.StatusCompleted, 2)
	// done's delivered event went with it; its pending one is still owed,
	// and a live instance's delivered one stays.
	if got := recordIDs(listOutbox(t, ob, "")); got != "[done-pending running-sent]" {
		t.Fatalf("outbox after the purge = %s, want [done-pending running-sent]", got)
	}
	if n := countPurgeable(t, st, all); n != 0 {
		t.Fatalf("purgeable after purging = %d", n)
	}
}

// testPurgeRows: the rows tied to a purged instance go with it, whatever
// is left of them, and nobody else's: history, mail addressed to it.
func testPurgeRows(t *testing.T, st persistence.Store) {
	for _, id := range []string{"a", "b"} {
		create(t, st, id)
		apply(t, st, persistence.Step{Instance: id, Epoch: 1, History: []persistence.Event{ev(1, "x"), ev(2, "y")}})
	}
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "to-b", Target: "b"}}})
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(3, "done")}, Status: persistence.StatusCompleted})
	cut := time.Now()
	waitClockPast(cut)
	if n := purge(t, st, persistence.PurgeFilter{Before: cut}); n != 1 {
		t.Fatalf("purge = %d, want 1", n)
	}
	gone(t, st, "a")
	if ms, err := st.Mailbox(ctx(), "a", 0); err != nil || len(ms) != 0 {
		t.Fatalf("a's mailbox = %+v, %v", ms, err)
	}
	kept(t, st, "b", persistence.StatusRunning, 3)
	if got := msgIDs(t, st, "b"); got != "[to-b]" {
		t.Fatalf("b's mailbox = %s", got)
	}
}

// testPurgeParent: purging a parent while its child runs leaves the child
// working: it writes steps, a send by PID to the parent fails with
// ErrNotFound, and its end (with the Down to the parent) commits; the
// child is purged later on its own account.
func testPurgeParent(t *testing.T, st persistence.Store) {
	create(t, st, "parent")
	apply(t, st, persistence.Step{Create: &persistence.Instance{ID: "child", Workflow: "wf", Parent: "parent", LeaseOwner: owner, LeaseEpoch: 1,
		LeaseExpires: time.Now().Add(time.Minute)}, History: []persistence.Event{ev(0, "started")}})
	end(t, st, "parent", persistence.StatusCompleted)
	cut := time.Now()
	waitClockPast(cut)
	if n := purge(t, st, persistence.PurgeFilter{Before: cut}); n != 1 {
		t.Fatalf("purge = %d, want 1 (the parent)", n)
	}
	gone(t, st, "parent")
	if in := instance(t, st, "child"); in.Status != persistence.StatusRunning || in.Parent != "parent" {
		t.Fatalf("child after its parent's purge = %+v", in)
	}
	apply(t, st, persistence.Step{Instance: "child", Epoch: 1, History: []persistence.Event{ev(1, "worked")}})
	_, err := st.Apply(ctx(), persistence.Step{Instance: "child", Epoch: 1, History: []persistence.Event{ev(2, "sent")},
		Send: []persistence.NewMessage{{ID: "hi", Target: "parent", MustDeliver: true}}})
	wantErr(t, err, persistence.ErrNotFound)
	apply(t, st, persistence.Step{Instance: "child", Epoch: 1, History: []persistence.Event{ev(2, "completed")},
		Status: persistence.StatusCompleted, Output: []byte(`1`),
		Send: []persistence.NewMessage{{ID: "down", Channel: persistence.SystemChannelPrefix + "down", Target: "parent", Sender: "child"}}})
	kept(t, st, "child", persistence.StatusCompleted, 3)
	if ms, err := st.Mailbox(ctx(), "parent", 0); err != nil || len(ms) != 0 {
		t.Fatalf("the purged parent got mail: %+v, %v", ms, err)
	}
	later := time.Now()
	waitClockPast(later)
	if n := purge(t, st, persistence.PurgeFilter{Before: later}); n != 1 {
		t.Fatalf("second purge = %d, want 1 (the child)", n)
	}
	gone(t, st, "child")
}

// testPurgeValidation: a filter without a cut-off, with a live status or
// a bucket out of range is refused with an *InvalidError, and nothing is
// purged.
func testPurgeValidation(t *testing.T, st persistence.Store) {
	create(t, st, "r")
	create(t, st, "d")
	end(t, st, "d", persistence.StatusCompleted)
	cut := time.Now()
	waitClockPast(cut)
	for _, f := range []persistence.PurgeFilter{
		{},
		{Before: cut, Statuses: []persistence.Status{persistence.StatusRunning}},
		{Before: cut, Statuses: []persistence.Status{persistence.StatusCompleted, persistence.StatusWaiting}},
		{Before: cut, Statuses: []persistence.Status{"bogus"}},
		{Before: cut, Buckets: []int{persistence.NumBuckets}},
		{Before: cut, Workflow: "bad\x00name"},
	} {
		var inv *persistence.InvalidError
		if _, err := st.PurgeInstances(ctx(), f); !errors.As(err, &inv) || !errors.Is(err, persistence.ErrInvalidRecord) {
			t.Fatalf("purge %+v: error = %v, want an *InvalidError", f, err)
		}
		if _, err := st.CountPurgeable(ctx(), f); !errors.As(err, &inv) {
			t.Fatalf("count %+v: error = %v, want an *InvalidError", f, err)
		}
	}
	kept(t, st, "r", persistence.StatusRunning, 1)
	kept(t, st, "d", persistence.StatusCompleted, 2)
}

// purgeRace: stores purging the same ended instances at once delete each
// once: their counts add up to the number of instances, and none is left.
func purgeRace(t *testing.T, stores []persistence.Store, n int) {
	for i := range n {
		id := fmt.Sprintf("race-%03d", i)
		create(t, stores[0], id)
		end(t, stores[0], id, persistence.StatusCompleted)
	}
	cut := time.Now()
	waitClockPast(cut)
	counts := make([]int, 2*len(stores))
	errs := make([]error, len(counts))
	var wg sync.WaitGroup
	for i := range counts {
		st := stores[i%len(stores)]
		wg.Go(func() {
			for {
				got, err := st.PurgeInstances(ctx(), persistence.PurgeFilter{Before: cut, Limit: 7})
				counts[i] += got
				if err != nil || got == 0 {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for i, c := range counts {
		if errs[i] != nil {
			t.Fatalf("purger %d: %v", i, errs[i])
		}
		total += c
	}
	if total != n {
		t.Fatalf("purgers deleted %v, %d in all; want %d", counts, total, n)
	}
	if left := countPurgeable(t, stores[0], persistence.PurgeFilter{Before: cut}); left != 0 {
		t.Fatalf("%d left after the race", left)
	}
}

func testPurgeRace(t *testing.T, st persistence.Store) { purgeRace(t, []persistence.Store{st}, 60) }
