package storetest

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// t0 is the base of the explicit times the outbox tests claim at: claims
// and their expiry are decided by the caller's now, so the tests need no
// sleeping and no clock.
var t0 = time.Unix(1_700_000_000, 0)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func outboxOf(t *testing.T, st persistence.Store) persistence.Outbox {
	t.Helper()
	if _, err := st.ListOutbox(ctx(), "", "", 1); errors.Is(err, persistence.ErrUnsupported) {
		t.Skipf("%T has no outbox", st)
	}
	return st
}

// emit adds outgoing events in a step of their own, from outside any
// instance, each at its given time.
func emit(t *testing.T, st persistence.Store, events ...persistence.OutboxEvent) {
	t.Helper()
	apply(t, st, persistence.Step{Emit: events})
}

func listOutbox(t *testing.T, ob persistence.Outbox, status persistence.OutboxStatus) []persistence.OutboxRecord {
	t.Helper()
	recs, err := ob.ListOutbox(ctx(), status, "", 0)
	if err != nil {
		t.Fatalf("list outbox %q: %v", status, err)
	}
	return recs
}

func outboxRecord(t *testing.T, ob persistence.Outbox, id string) (persistence.OutboxRecord, bool) {
	t.Helper()
	for _, r := range listOutbox(t, ob, "") {
		if r.ID == id {
			return r, true
		}
	}
	return persistence.OutboxRecord{}, false
}

func recordIDs(recs []persistence.OutboxRecord) string {
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	return "[" + strings.Join(ids, " ") + "]"
}

func claim(t *testing.T, ob persistence.Outbox, owner string, now time.Time, ttl time.Duration, limit int) []persistence.OutboxRecord {
	t.Helper()
	recs, err := ob.ClaimOutbox(ctx(), owner, now, ttl, limit)
	if err != nil {
		t.Fatalf("claim by %s at %v: %v", owner, now.Sub(t0), err)
	}
	return recs
}

func finish(t *testing.T, ob persistence.Outbox, id, owner string, status persistence.OutboxStatus, next time.Time, errText string) {
	t.Helper()
	if err := ob.FinishOutbox(ctx(), id, owner, status, next, errText); err != nil {
		t.Fatalf("finish %s by %s as %s: %v", id, owner, status, err)
	}
}

// testOutboxEmit: Step.Emit adds pending events with their fields intact,
// atomically with the step; an ID that exists is a no-op.
func testOutboxEmit(t *testing.T, st persistence.Store) {
	ob := outboxOf(t, st)
	create(t, st, "a")
	before := time.Now()
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "emitted")},
		Emit: []persistence.OutboxEvent{
			{ID: "e1", Instance: "a", Type: "com.example.charged", Data: []byte(`{"amount":5}`), At: t0},
			{ID: "e2", Instance: "a", Type: "com.example.shipped"}, // no time: the commit's
		}})
	recs := listOutbox(t, ob, persistence.OutboxPending)
	if got := recordIDs(recs); got != "[e1 e2]" {
		t.Fatalf("pending = %s, want [e1 e2]", got)
	}
	e1, e2 := recs[0], recs[1]
	if e1.Instance != "a" || e1.Type != "com.example.charged" || string(e1.Data) != `{"amount":5}` || !e1.At.Equal(t0) ||
		e1.Status != persistence.OutboxPending || e1.Attempts != 0 || !e1.Next.Equal(t0) || e1.Error != "" ||
		e1.Claimer != "" || !e1.ClaimExpires.IsZero() {
		t.Fatalf("e1 = %+v", e1)
	}
	if e2.At.Before(before) || e2.At.After(time.Now()) || !e2.Next.Equal(e2.At) || len(e2.Data) != 0 || e2.Type != "com.example.shipped" {
		t.Fatalf("e2 = %+v, want At and Next at the commit", e2)
	}

	// Failing steps emit nothing: fenced (fails before writing), a message
	// gone (fails after writing its history), a create whose ID is taken
	// (applies nothing at all).
	_, err := st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 2, History: []persistence.Event{ev(2, "x")},
		Emit: []persistence.OutboxEvent{{ID: "fenced", Instance: "a"}}})
	wantErr(t, err, persistence.ErrFenced)
	_, err = st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(2, "x")},
		Consume: []int64{999999}, Emit: []persistence.OutboxEvent{{ID: "gone", Instance: "a"}}})
	wantErr(t, err, persistence.ErrMessageGone)
	res := apply(t, st, persistence.Step{Create: &persistence.Instance{ID: "a", Workflow: "wf", LeaseOwner: owner, LeaseEpoch: 1},
		History: []persistence.Event{ev(0, "started")}, Emit: []persistence.OutboxEvent{{ID: "exists", Instance: "a"}}})
	if res.Existing == nil {
		t.Fatal("second create of a: no Existing")
	}
	// Also when the failing steps share commits with steps that succeed.
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			epoch := int64(1 + i%2) // odd i is fenced
			_, err := st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: epoch,
				Emit: []persistence.OutboxEvent{{ID: fmt.Sprintf("c%02d", i), Instance: "a", At: at(i + 1)}}})
			if (err != nil) != (i%2 == 1) {
				t.Errorf("step %d (epoch %d): %v", i, epoch, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if got := recordIDs(listOutbox(t, ob, "")); got != "[e1 c00 c02 c04 c06 c08 c10 c12 c14 e2]" {
		t.Fatalf("outbox after failed steps = %s", got)
	}
	if in, _ := st.Instance(ctx(), "a"); in.HistoryLen != 2 {
		t.Fatalf("history length = %d, want 2", in.HistoryLen)
	}

	// Emitting an ID again is a no-op, in another step (which still
	// applies) or twice in one; from outside any instance too.
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(2, "again")},
		Emit: []persistence.OutboxEvent{{ID: "e1", Instance: "a", Type: "changed", Data: []byte("changed"), At: at(3600)}}})
	if in, _ := st.Instance(ctx(), "a"); in.HistoryLen != 3 {
		t.Fatalf("the step that emitted a known ID did not apply: %+v", in)
	}
	emit(t, st, persistence.OutboxEvent{ID: "twice", Type: "first", At: at(100)}, persistence.OutboxEvent{ID: "twice", Type: "second", At: at(200)})
	if r, _ := outboxRecord(t, ob, "e1"); r.Type != "com.example.charged" || string(r.Data) != `{"amount":5}` || !r.At.Equal(t0) {
		t.Fatalf("e1 after a duplicate = %+v", r)
	}
	if r, ok := outboxRecord(t, ob, "twice"); !ok || r.Type != "first" || !r.At.Equal(at(100)) || r.Instance != "" {
		t.Fatalf("event emitted twice in one step = %+v", r)
	}
	if n := len(listOutbox(t, ob, "")); n != 11 {
		t.Fatalf("%d events, want 11", n)
	}
}

// testOutboxClaim: claims, their expiry, and the outcomes of attempts.
func testOutboxClaim(t *testing.T, st persistence.Store) {
	ob := outboxOf(t, st)
	if recs := claim(t, ob, "r1", at(0), time.Minute, 10); len(recs) != 0 {
		t.Fatalf("claim of an empty outbox = %+v", recs)
	}
	emit(t, st,
		persistence.OutboxEvent{ID: "e3", Type: "t", At: at(2)},
		persistence.OutboxEvent{ID: "e1", Type: "t", At: at(0)},
		persistence.OutboxEvent{ID: "later", Type: "t", At: at(3600)},
		persistence.OutboxEvent{ID: "e2", Type: "t", At: at(1)})
	// Oldest first, up to the limit; the claim is for owner until now+ttl.
	recs := claim(t, ob, "r1", at(5), 30*time.Second, 2)
	if got := recordIDs(recs); got != "[e1 e2]" {
		t.Fatalf("r1 claimed %s, want [e1 e2]", got)
	}
	if r := recs[0]; r.Claimer != "r1" || !r.ClaimExpires.Equal(at(35)) || r.Status != persistence.OutboxPending || r.Attempts != 0 || !r.Next.Equal(at(0)) {
		t.Fatalf("claimed record = %+v", r)
	}
	// Claimed events are nobody else's until the claim expires; an event
	// not yet due is nobody's.
	if got := recordIDs(claim(t, ob, "r2", at(6), 30*time.Second, 10)); got != "[e3]" {
		t.Fatalf("r2 claimed %s, want [e3]", got)
	}
	for _, now := range []int{6, 20, 34} {
		if recs := claim(t, ob, "r3", at(now), time.Minute, 10); len(recs) != 0 {
			t.Fatalf("claim at %ds while all due events are claimed = %s", now, recordIDs(recs))
		}
	}
	if r, _ := outboxRecord(t, ob, "e1"); r.Claimer != "r1" || !r.ClaimExpires.Equal(at(35)) {
		t.Fatalf("listed claimed record = %+v", r)
	}
	// At its expiry the claim is gone: r1 is presumed dead.
	if got := recordIDs(claim(t, ob, "r2", at(35), time.Minute, 10)); got != "[e1 e2]" {
		t.Fatalf("r2 claimed %s after r1's claim expired, want [e1 e2]", got)
	}
	// r1 comes back: its attempt no longer counts.
	wantErr(t, ob.FinishOutbox(ctx(), "e1", "r1", persistence.OutboxSent, time.Time{}, ""), persistence.ErrLeaseHeld)
	wantErr(t, ob.FinishOutbox(ctx(), "nope", "r1", persistence.OutboxSent, time.Time{}, ""), persistence.ErrLeaseHeld)
	// r2 finishes: e1 sent, e2 to be tried again later.
	finish(t, ob, "e1", "r2", persistence.OutboxSent, time.Time{}, "")
	finish(t, ob, "e2", "r2", persistence.OutboxPending, at(100), "HTTP 503")
	// Its claim is released: finishing again fails.
	wantErr(t, ob.FinishOutbox(ctx(), "e1", "r2", persistence.OutboxSent, time.Time{}, ""), persistence.ErrLeaseHeld)
	if r, _ := outboxRecord(t, ob, "e1"); r.Status != persistence.OutboxSent || r.Attempts != 1 || r.Claimer != "" || !r.ClaimExpires.IsZero() || r.Error != "" {
		t.Fatalf("sent event = %+v", r)
	}
	if r, _ := outboxRecord(t, ob, "e2"); r.Status != persistence.OutboxPending || r.Attempts != 1 || r.Claimer != "" ||
		!r.ClaimExpires.IsZero() || r.Error != "HTTP 503" || !r.Next.Equal(at(100)) {
		t.Fatalf("retried event = %+v", r)
	}
	// Not before its next attempt is due (r2's claim of e3 expired at 36s).
	if got := recordIDs(claim(t, ob, "r3", at(99), time.Minute, 10)); got != "[e3]" {
		t.Fatalf("r3 claimed %s at 99s, want [e3]", got)
	}
	finish(t, ob, "e3", "r3", persistence.OutboxInvalid, time.Time{}, "HTTP 400")
	recs = claim(t, ob, "r3", at(100), time.Minute, 10)
	if got := recordIDs(recs); got != "[e2]" || recs[0].Attempts != 1 || recs[0].Error != "HTTP 503" {
		t.Fatalf("r3 claimed %+v at 100s, want e2 after one attempt", recs)
	}
	finish(t, ob, "e2", "r3", persistence.OutboxExpired, time.Time{}, "still failing")
	// Sent, invalid and expired events are never claimed again, however
	// late; a pending one whose claim expired is.
	recs = claim(t, ob, "r4", at(7200), time.Minute, 0)
	if got := recordIDs(recs); got != "[later]" {
		t.Fatalf("claim at 2h = %s, want [later]", got)
	}
	if recs := claim(t, ob, "r5", at(7200+60), time.Minute, 0); recordIDs(recs) != "[later]" || recs[0].Claimer != "r5" {
		t.Fatalf("claim after r4's expired = %+v", recs)
	}
	wantErr(t, ob.FinishOutbox(ctx(), "later", "r4", persistence.OutboxSent, time.Time{}, ""), persistence.ErrLeaseHeld)
	for id, want := range map[string]string{"e1": "sent 1 ", "e2": "expired 2 still failing", "e3": "invalid 1 HTTP 400", "later": "pending 0 "} {
		r, _ := outboxRecord(t, ob, id)
		if got := fmt.Sprintf("%s %d %s", r.Status, r.Attempts, r.Error); got != want {
			t.Fatalf("%s: %s, want %s", id, got, want)
		}
	}
	// Emitting a finished event's ID again changes nothing.
	emit(t, st, persistence.OutboxEvent{ID: "e1", Type: "t", At: at(9000)})
	if r, _ := outboxRecord(t, ob, "e1"); r.Status != persistence.OutboxSent || !r.At.Equal(at(0)) {
		t.Fatalf("e1 after being emitted again = %+v", r)
	}
	if recs := claim(t, ob, "r6", at(9999), time.Minute, 0); recordIDs(recs) != "[later]" {
		t.Fatalf("final claim = %s, want [later]", recordIDs(recs))
	}

	// The outbox calls check their arguments.
	_, err := ob.ClaimOutbox(ctx(), "r1", at(0), 0, 1)
	wantInvalid(t, "claim: ttl", err, "ttl")
	_, err = ob.ClaimOutbox(ctx(), "", at(0), time.Second, 1)
	wantInvalid(t, "claim: owner", err, "owner")
	wantInvalid(t, "finish: status", ob.FinishOutbox(ctx(), "later", "r6", "lost", time.Time{}, ""), "status")
	wantInvalid(t, "finish: error", ob.FinishOutbox(ctx(), "later", "r6", persistence.OutboxSent, time.Time{}, "a\x00"), "errText")
	_, err = ob.ListOutbox(ctx(), "lost", "", 0)
	wantInvalid(t, "list: status", err, "status")
	if r, _ := outboxRecord(t, ob, "later"); r.Claimer != "r6" || r.Attempts != 0 {
		t.Fatalf("invalid finish changed the event: %+v", r)
	}
}

// testOutboxList: listing by status or all, oldest first (time, then ID),
// in pages.
func testOutboxList(t *testing.T, st persistence.Store) {
	ob := outboxOf(t, st)
	if recs := listOutbox(t, ob, ""); len(recs) != 0 {
		t.Fatalf("empty outbox lists %+v", recs)
	}
	// Emitted out of order over several steps; pairs share a time.
	var want []string
	for i := range 11 {
		want = append(want, fmt.Sprintf("l%02d", i))
	}
	for _, i := range []int{7, 3, 10, 0, 5, 1, 9, 2, 8, 6, 4} {
		emit(t, st, persistence.OutboxEvent{ID: want[i], Type: "t", At: at(i / 2)})
	}
	// l00–l03 sent, l04 invalid, l05 expired, the rest pending.
	recs := claim(t, ob, "r", at(60), time.Minute, 6)
	if got := recordIDs(recs); got != "[l00 l01 l02 l03 l04 l05]" {
		t.Fatalf("claimed %s", got)
	}
	for i, r := range recs {
		status := persistence.OutboxSent
		switch i {
		case 4:
			status = persistence.OutboxInvalid
		case 5:
			status = persistence.OutboxExpired
		}
		finish(t, ob, r.ID, "r", status, time.Time{}, "")
	}
	pages := func(status persistence.OutboxStatus, size int) string {
		t.Helper()
		var out []string
		after := ""
		for n := 0; ; n++ {
			recs, err := ob.ListOutbox(ctx(), status, after, size)
			if err != nil {
				t.Fatalf("list %q after %q: %v", status, after, err)
			}
			if len(recs) > size || n > 20 {
				t.Fatalf("list %q after %q returned %d, limit %d", status, after, len(recs), size)
			}
			if len(recs) == 0 {
				return strings.Join(out, " ")
			}
			out = append(out, recordIDs(recs))
			after = recs[len(recs)-1].ID
		}
	}
	for _, tc := range []struct {
		status persistence.OutboxStatus
		size   int
		want   string
	}{
		{"", 4, "[l00 l01 l02 l03] [l04 l05 l06 l07] [l08 l09 l10]"},
		{"", 11, "[l00 l01 l02 l03 l04 l05 l06 l07 l08 l09 l10]"},
		{"", 1000, "[l00 l01 l02 l03 l04 l05 l06 l07 l08 l09 l10]"},
		{persistence.OutboxPending, 2, "[l06 l07] [l08 l09] [l10]"},
		{persistence.OutboxSent, 3, "[l00 l01 l02] [l03]"},
		{persistence.OutboxInvalid, 3, "[l04]"},
		{persistence.OutboxExpired, 1, "[l05]"},
	} {
		if got := pages(tc.status, tc.size); got != tc.want {
			t.Errorf("pages of %q by %d = %s, want %s", tc.status, tc.size, got, tc.want)
		}
	}
	// A page may start after an event of another status.
	recs, err := ob.ListOutbox(ctx(), persistence.OutboxPending, "l01", 2)
	if err != nil || recordIDs(recs) != "[l06 l07]" {
		t.Fatalf("pending after l01 = %s, %v", recordIDs(recs), err)
	}
	recs, err = ob.ListOutbox(ctx(), persistence.OutboxSent, "l08", 2)
	if err != nil || len(recs) != 0 {
		t.Fatalf("sent after l08 = %s, %v", recordIDs(recs), err)
	}
	// No limit: the default (more than there are here).
	if recs := listOutbox(t, ob, persistence.OutboxSent); recordIDs(recs) != "[l00 l01 l02 l03]" ||
		recs[0].Status != persistence.OutboxSent || recs[0].Attempts != 1 || !recs[0].At.Equal(at(0)) {
		t.Fatalf("sent = %+v", recs)
	}
}

// outboxRace claims events from many goroutines at once, over the given
// stores in turn, and checks that each event was claimed exactly once.
func outboxRace(t *testing.T, stores []persistence.Store, events, claimers int) {
	st := stores[0]
	batch := make([]persistence.OutboxEvent, 0, 50)
	for i := range events {
		batch = append(batch, persistence.OutboxEvent{ID: fmt.Sprintf("race-%04d", i), Type: "t", At: at(i % 7)})
		if len(batch) == cap(batch) || i == events-1 {
			emit(t, st, batch...)
			batch = batch[:0]
		}
	}
	var mu sync.Mutex
	claimedBy := map[string][]string{}
	claims := 0
	var wg sync.WaitGroup
	for g := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ob := outboxOf(t, stores[g%len(stores)])
			me := fmt.Sprint("relay-", g)
			for {
				// All at one now, with a claim that outlives the test: no
				// claim expires, so no event may be claimed twice.
				recs, err := ob.ClaimOutbox(ctx(), me, at(100), time.Hour, 1+g%5)
				if err != nil {
					t.Error(err)
					return
				}
				if len(recs) == 0 {
					return
				}
				mu.Lock()
				for _, r := range recs {
					claimedBy[r.ID] = append(claimedBy[r.ID], me)
				}
				claims += len(recs)
				// Events claimed twice could be claimed forever: stop, and
				// let the check below report them.
				over := claims > events
				mu.Unlock()
				if over {
					return
				}
				// Finish some, so that claims race with finishes too.
				for _, r := range recs[:len(recs)/2] {
					if err := ob.FinishOutbox(ctx(), r.ID, me, persistence.OutboxSent, time.Time{}, ""); err != nil {
						t.Errorf("%s finishing %s: %v", me, r.ID, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if len(claimedBy) != events {
		t.Fatalf("%d of %d events claimed", len(claimedBy), events)
	}
	for id, by := range claimedBy {
		if len(by) != 1 {
			t.Fatalf("%s claimed by %v", id, by)
		}
	}
	// Every event is sent or still held by the claimer that got it.
	for _, r := range listOutbox(t, outboxOf(t, st), "") {
		want := claimedBy[r.ID][0]
		switch {
		case r.Status == persistence.OutboxSent && r.Claimer == "" && r.Attempts == 1:
		case r.Status == persistence.OutboxPending && r.Claimer == want && r.Attempts == 0:
		default:
			t.Fatalf("%s (claimed by %s) = %+v", r.ID, want, r)
		}
	}
}

func testOutboxRace(t *testing.T, st persistence.Store) {
	outboxRace(t, []persistence.Store{st}, 200, 8)
}

// testOutboxRelease: a released claim is given back without counting an
// attempt, and the event is claimable at once by anyone; only the
// claimer's own pending claims are released.
func testOutboxRelease(t *testing.T, st persistence.Store) {
	ob := outboxOf(t, st)
	emit(t, st,
		persistence.OutboxEvent{ID: "a", Type: "t", At: at(0)},
		persistence.OutboxEvent{ID: "b", Type: "t", At: at(1)},
		persistence.OutboxEvent{ID: "c", Type: "t", At: at(2)},
		persistence.OutboxEvent{ID: "d", Type: "t", At: at(3)})
	if got := recordIDs(claim(t, ob, "r1", at(10), time.Hour, 3)); got != "[a b c]" {
		t.Fatalf("r1 claimed %s", got)
	}
	// b failed once before: its attempt count, error and next attempt stay.
	finish(t, ob, "b", "r1", persistence.OutboxPending, at(10), "HTTP 503")
	if got := recordIDs(claim(t, ob, "r2", at(5), time.Hour, 0)); got != "[d]" {
		t.Fatalf("r2 claimed %s", got)
	}
	if got := recordIDs(claim(t, ob, "r1", at(10), time.Hour, 1)); got != "[b]" {
		t.Fatalf("r1 claimed %s again", got)
	}
	// r1 releases its own (a, b), not r2's d, nor c (sent), nor unknown IDs.
	finish(t, ob, "c", "r1", persistence.OutboxSent, time.Time{}, "")
	n, err := ob.ReleaseOutbox(ctx(), "r1", []string{"a", "b", "c", "d", "nope"})
	if err != nil || n != 2 {
		t.Fatalf("release = %d, %v; want 2", n, err)
	}
	for id, want := range map[string]string{"a": "pending 0  ", "b": "pending 1 HTTP 503 ", "c": "sent 1  ", "d": "pending 0  r2"} {
		r, _ := outboxRecord(t, ob, id)
		if got := fmt.Sprintf("%s %d %s %s", r.Status, r.Attempts, r.Error, r.Claimer); got != want {
			t.Errorf("%s after the release: %q, want %q", id, got, want)
		}
		if r.Claimer == "" && !r.ClaimExpires.IsZero() {
			t.Errorf("%s after the release: claim expires %v", id, r.ClaimExpires)
		}
	}
	if r, _ := outboxRecord(t, ob, "b"); !r.Next.Equal(at(10)) {
		t.Errorf("b's next attempt = %v, want unchanged", r.Next)
	}
	// Another relayer takes them at once, well before r1's claims expired.
	if got := recordIDs(claim(t, ob, "r3", at(11), time.Hour, 0)); got != "[a b]" {
		t.Fatalf("r3 claimed %s after the release, want [a b]", got)
	}
	// r1 no longer holds them; releasing again does nothing.
	wantErr(t, ob.FinishOutbox(ctx(), "a", "r1", persistence.OutboxSent, time.Time{}, ""), persistence.ErrLeaseHeld)
	if n, err := ob.ReleaseOutbox(ctx(), "r1", []string{"a", "b"}); err != nil || n != 0 {
		t.Fatalf("second release = %d, %v; want 0", n, err)
	}
	if n, err := ob.ReleaseOutbox(ctx(), "r3", nil); err != nil || n != 0 {
		t.Fatalf("release of nothing = %d, %v", n, err)
	}
	_, err = ob.ReleaseOutbox(ctx(), "", []string{"a"})
	wantInvalid(t, "release: owner", err, "owner")
	_, err = ob.ReleaseOutbox(ctx(), "r3", []string{"a", ""})
	wantInvalid(t, "release: ids", err, "ids[1]")
	if r, _ := outboxRecord(t, ob, "a"); r.Claimer != "r3" {
		t.Fatalf("an invalid release changed a: %+v", r)
	}
}

// testOutboxPrune: events whose delivery ended (sent, invalid, expired)
// before the cut-off go, oldest first and at most limit at a time; pending
// ones stay however old.
func testOutboxPrune(t *testing.T, st persistence.Store) {
	ob := outboxOf(t, st)
	if n, err := ob.PruneOutbox(ctx(), time.Now().Add(time.Hour), 0); err != nil || n != 0 {
		t.Fatalf("prune of an empty outbox = %d, %v", n, err)
	}
	var evs []persistence.OutboxEvent
	for i := range 8 {
		evs = append(evs, persistence.OutboxEvent{ID: fmt.Sprintf("p%d", i), Type: "t", At: at(i)})
	}
	emit(t, st, evs...)
	recs := claim(t, ob, "r", at(100), time.Hour, 0)
	if len(recs) != 8 {
		t.Fatalf("claimed %s", recordIDs(recs))
	}
	// p0–p2 sent, p3 invalid, p4 expired, p5 retried later, p6–p7 claimed.
	// Each outcome is recorded with a time of its own, read around it.
	var mid time.Time
	for i, status := range []persistence.OutboxStatus{persistence.OutboxSent, persistence.OutboxSent, persistence.OutboxSent,
		persistence.OutboxInvalid, persistence.OutboxExpired, persistence.OutboxPending} {
		if i == 3 {
			mid = time.Now()
			waitClockPast(mid)
		}
		finish(t, ob, recs[i].ID, "r", status, at(200), "")
	}
	after := time.Now()
	waitClockPast(after)
	for _, r := range listOutbox(t, ob, "") {
		ended := r.Status != persistence.OutboxPending
		if ended != !r.Finished.IsZero() {
			t.Fatalf("%s: status %s, finished %v", r.ID, r.Status, r.Finished)
		}
		if ended && r.Finished.After(after) {
			t.Fatalf("%s finished at %v, after the finish returned (%v)", r.ID, r.Finished, after)
		}
	}
	// Before mid: p0–p2 only, in two rounds of at most two.
	n, err := ob.PruneOutbox(ctx(), mid, 2)
	if err != nil || n != 2 {
		t.Fatalf("first prune = %d, %v; want 2", n, err)
	}
	n, err = ob.PruneOutbox(ctx(), mid, 2)
	if err != nil || n != 1 {
		t.Fatalf("second prune = %d, %v; want 1", n, err)
	}
	if got := recordIDs(listOutbox(t, ob, "")); got != "[p3 p4 p5 p6 p7]" {
		t.Fatalf("after pruning before mid: %s", got)
	}
	// Everything that ended: pending events stay, however old, claimed or not.
	n, err = ob.PruneOutbox(ctx(), time.Now().Add(24*time.Hour), 0)
	if err != nil || n != 2 {
		t.Fatalf("third prune = %d, %v; want 2", n, err)
	}
	if got := recordIDs(listOutbox(t, ob, "")); got != "[p5 p6 p7]" {
		t.Fatalf("after pruning all ended events: %s", got)
	}
	// A pruned ID is free again: emitting it adds a new event.
	emit(t, st, persistence.OutboxEvent{ID: "p0", Type: "again", At: at(1000)})
	if r, ok := outboxRecord(t, ob, "p0"); !ok || r.Type != "again" || r.Status != persistence.OutboxPending {
		t.Fatalf("p0 emitted after its prune = %+v, %v", r, ok)
	}
}

// waitClockPast returns once the clock reads later than t, so that times
// read before and after it differ on clocks of coarse resolution.
func waitClockPast(t time.Time) {
	for !time.Now().After(t) {
		runtime.Gosched()
	}
}
