package storetest

import (
	"fmt"
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
