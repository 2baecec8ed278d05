package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nornlabs/norn/persistence"
)

// testLoad: a store that is a persistence.Loader reads the instance, the
// first events of its run and its mailbox as Instance, HistoryRange and
// Mailbox would, within the limits; an unknown ID fails with ErrNotFound.
func testLoad(t *testing.T, st persistence.Store) {
	l, ok := st.(persistence.Loader)
	if !ok {
		t.Skip("the store reads an activation's start one read at a time")
	}
	create(t, st, "a")
	create(t, st, "b")
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "x"), ev(2, "y"), ev(3, "z")}})
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "jobs", Mode: persistence.Competing}}})
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "m1", Target: "a"}, {ID: "m2", Target: "a"}, {ID: "j1", Channel: "jobs"},
		{ID: "other", Target: "b"}}})
	for _, c := range []struct{ hist, mail, wantHist, wantMail int }{{10, 10, 4, 3}, {2, 1, 2, 1}} {
		got, err := l.Load(ctx(), "a", c.hist, c.mail)
		if err != nil {
			t.Fatal(err)
		}
		inst, _ := st.Instance(ctx(), "a")
		hist, _ := st.HistoryRange(ctx(), "a", 0, c.hist)
		mail, _ := st.Mailbox(ctx(), "a", c.mail)
		if got.Instance.ID != "a" || got.Instance.HistoryLen != inst.HistoryLen || got.Instance.LeaseEpoch != inst.LeaseEpoch ||
			string(got.Instance.Input) != string(inst.Input) {
			t.Errorf("limits %d/%d: instance %+v, want %+v", c.hist, c.mail, got.Instance, inst)
		}
		if len(got.History) != c.wantHist || fmt.Sprint(got.History) != fmt.Sprint(hist) {
			t.Errorf("limits %d/%d: history %v, want %v (%d events)", c.hist, c.mail, got.History, hist, c.wantHist)
		}
		if len(got.Mailbox) != c.wantMail || fmt.Sprint(got.Mailbox) != fmt.Sprint(mail) {
			t.Errorf("limits %d/%d: mailbox %v, want %v (%d messages)", c.hist, c.mail, got.Mailbox, mail, c.wantMail)
		}
	}
	_, err := l.Load(ctx(), "nobody", 10, 10)
	wantErr(t, err, persistence.ErrNotFound)
	_, err = l.Load(ctx(), "a", 0, 10)
	wantErr(t, err, persistence.ErrInvalidRecord)
}

// testLoadsTogether: loads of many instances at once (a broadcast wakes
// them together; a driver may read them in one batch) each get their own
// instance, history and mailbox, and a load of a missing instance fails
// alone.
func testLoadsTogether(t *testing.T, st persistence.Store) {
	l, ok := st.(persistence.Loader)
	if !ok {
		t.Skip("the store reads an activation's start one read at a time")
	}
	const n = 40
	id := func(i int) string { return fmt.Sprintf("inst-%02d", i) }
	for i := range n {
		create(t, st, id(i))
		var hist []persistence.Event
		for k := range i % 5 {
			hist = append(hist, ev(int64(k+1), "x"))
		}
		apply(t, st, persistence.Step{Instance: id(i), Epoch: 1, History: hist})
		var mail []persistence.NewMessage
		for k := range i % 3 {
			mail = append(mail, persistence.NewMessage{ID: fmt.Sprintf("m-%d-%d", i, k), Target: id(i)})
		}
		if len(mail) > 0 {
			apply(t, st, persistence.Step{Send: mail})
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for round := range 2 {
		for i := range n + 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				limit := 2 + round*8 // the first round's pages cut some histories short
				got, err := l.Load(ctx(), id(i), limit, limit)
				if i >= n {
					if !errors.Is(err, persistence.ErrNotFound) {
						errs <- fmt.Errorf("load of missing %s: %v, want ErrNotFound", id(i), err)
					}
					return
				}
				if err != nil {
					errs <- fmt.Errorf("load %s: %w", id(i), err)
					return
				}
				wantHist, wantMail := min(limit, 1+i%5), min(limit, i%3)
				if got.Instance.ID != id(i) || len(got.History) != wantHist || len(got.Mailbox) != wantMail {
					errs <- fmt.Errorf("load %s (limit %d): instance %s, %d events, %d messages; want %d events, %d messages",
						id(i), limit, got.Instance.ID, len(got.History), len(got.Mailbox), wantHist, wantMail)
				}
				for _, m := range got.Mailbox {
					if m.Target != id(i) {
						errs <- fmt.Errorf("load %s: message %s of %s", id(i), m.ID, m.Target)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// testSnapshot: Snapshot reads the instance, its whole current run, its
// subscriptions and its mailbox depth (a competing channel's queue
// included) as the single reads do; an unknown ID fails with ErrNotFound,
// a malformed one as invalid.
func testSnapshot(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	create(t, st, "b")
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "x"), ev(2, "y")}})
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Subscribe: []persistence.Subscription{
		{Channel: "news", Mode: persistence.Broadcast}, {Channel: "jobs", Mode: persistence.Competing}}})
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "m1", Target: "a"}, {ID: "j1", Channel: "jobs"},
		{ID: "j2", Channel: "jobs"}, {ID: "other", Target: "b"}}})
	got, err := st.Snapshot(ctx(), "a")
	if err != nil {
		t.Fatal(err)
	}
	inst, _ := st.Instance(ctx(), "a")
	hist, _ := st.History(ctx(), "a", 0)
	subs, _ := st.Subscriptions(ctx(), "a")
	if got.Instance.ID != "a" || got.Instance.HistoryLen != inst.HistoryLen || got.Instance.Status != inst.Status {
		t.Errorf("instance %+v, want %+v", got.Instance, inst)
	}
	if len(got.History) != 3 || fmt.Sprint(got.History) != fmt.Sprint(hist) {
		t.Errorf("history %v, want %v", got.History, hist)
	}
	if fmt.Sprint(got.Subscriptions) != fmt.Sprint(subs) || len(subs) != 2 {
		t.Errorf("subscriptions %v, want %v", got.Subscriptions, subs)
	}
	if got.MailboxDepth != 3 {
		t.Errorf("mailbox depth %d, want 3 (one sent to it, two queued on its competing channel)", got.MailboxDepth)
	}
	_, err = st.Snapshot(ctx(), "nobody")
	wantErr(t, err, persistence.ErrNotFound)
	_, err = st.Snapshot(ctx(), "a\x00b")
	wantErr(t, err, persistence.ErrInvalidRecord)
}
