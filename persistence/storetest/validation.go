package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// wantInvalid checks that err is an *InvalidError for field, matching
// ErrInvalidRecord, with a message that quotes no more than an excerpt.
func wantInvalid(t *testing.T, what string, err error, field string) {
	t.Helper()
	if !errors.Is(err, persistence.ErrInvalidRecord) {
		t.Fatalf("%s: error = %v, want ErrInvalidRecord", what, err)
	}
	var ie *persistence.InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("%s: error = %#v, want an *InvalidError", what, err)
	}
	if ie.Field != field {
		t.Fatalf("%s: Field = %q, want %q (%v)", what, ie.Field, field, err)
	}
	if msg := err.Error(); len(msg) > 300 || !strings.Contains(msg, field) {
		t.Fatalf("%s: message of %d bytes: %.400s", what, len(msg), msg)
	}
}

// leaseTTL is s with its LeaseTTL set to d.
func leaseTTL(s persistence.Step, d time.Duration) persistence.Step {
	s.LeaseTTL = d
	return s
}

func testValidation(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	var (
		nul      = "a\x00b"
		badUTF8  = "a\xff\xfeb"
		longID   = strings.Repeat("i", persistence.MaxIDLen+1)
		longName = strings.Repeat("n", persistence.MaxNameLen+1)
		longVal  = strings.Repeat("v", persistence.MaxMetadataValueLen+1)
		huge     = strings.Repeat("h", 1<<20)
	)
	// step is a valid step of "a" that would write something of every kind;
	// each case breaks one field of it.
	step := func(edit func(s *persistence.Step)) persistence.Step {
		s := persistence.Step{Instance: "a", Epoch: 1,
			History:   []persistence.Event{ev(1, "x"), ev(2, "y")},
			Send:      []persistence.NewMessage{{ID: "m1", Target: "a", Metadata: map[string]string{"k": "v"}}, {ID: "m2", Channel: "c"}},
			Subscribe: []persistence.Subscription{{Channel: "s", Mode: persistence.Broadcast}},
			AddTimers: []persistence.Timer{{ID: "t", Due: time.Now().Add(time.Hour)}},
			Emit:      []persistence.OutboxEvent{{ID: "e1", Instance: "a", Type: "t", Data: []byte("{}")}, {ID: "e2", Instance: "a"}},
		}
		edit(&s)
		return s
	}
	spawn := func(edit func(c *persistence.Instance)) persistence.Step {
		c := &persistence.Instance{ID: "new", Workflow: "wf", LeaseOwner: owner, LeaseEpoch: 1}
		edit(c)
		return persistence.Step{Create: c, History: []persistence.Event{ev(0, "started")}}
	}
	cases := []struct {
		name  string
		step  persistence.Step
		field string
	}{
		{"instance NUL", step(func(s *persistence.Step) { s.Instance = nul }), "Instance"},
		{"instance too long", step(func(s *persistence.Step) { s.Instance = longID }), "Instance"},
		{"create ID empty", spawn(func(c *persistence.Instance) { c.ID = "" }), "Create.ID"},
		{"create ID invalid UTF-8", spawn(func(c *persistence.Instance) { c.ID = badUTF8 }), "Create.ID"},
		{"create ID too long", spawn(func(c *persistence.Instance) { c.ID = longID }), "Create.ID"},
		{"workflow empty", spawn(func(c *persistence.Instance) { c.Workflow = "" }), "Create.Workflow"},
		{"workflow NUL", spawn(func(c *persistence.Instance) { c.Workflow = nul }), "Create.Workflow"},
		{"parent too long", spawn(func(c *persistence.Instance) { c.Parent = longID }), "Create.Parent"},
		{"lease owner NUL", spawn(func(c *persistence.Instance) { c.LeaseOwner = nul }), "Create.LeaseOwner"},
		{"create status unknown", spawn(func(c *persistence.Instance) { c.Status = "paused" }), "Create.Status"},
		{"lease TTL negative", leaseTTL(spawn(func(*persistence.Instance) {}), -time.Second), "LeaseTTL"},
		{"lease TTL without a create", step(func(s *persistence.Step) { s.LeaseTTL = time.Minute }), "LeaseTTL"},
		{"lease TTL without an owner", leaseTTL(spawn(func(c *persistence.Instance) { c.LeaseOwner = "" }), time.Minute), "LeaseTTL"},
		{"lease TTL and expiry", leaseTTL(spawn(func(c *persistence.Instance) { c.LeaseExpires = time.Now() }), time.Minute), "LeaseTTL"},
		{"event kind NUL", step(func(s *persistence.Step) { s.History[0].Kind = nul }), "History[0].Kind"},
		{"event name too long", step(func(s *persistence.Step) { s.History[0].Name = longName }), "History[0].Name"},
		{"event ref NUL", step(func(s *persistence.Step) { s.History[1].Ref = nul }), "History[1].Ref"},
		{"event ref too long", step(func(s *persistence.Step) { s.History[1].Ref = huge }), "History[1].Ref"},
		{"event error invalid UTF-8", step(func(s *persistence.Step) { s.History[1].Error = badUTF8 }), "History[1].Error"},
		{"event digest too long", step(func(s *persistence.Step) { s.History[0].Digest = longID }), "History[0].Digest"},
		{"status unknown", step(func(s *persistence.Step) { s.Status = "paused" }), "Status"},
		{"error NUL", step(func(s *persistence.Step) {
			s.Status, s.Error = persistence.StatusFailed, nul
		}), "Error"},
		{"message ID empty", step(func(s *persistence.Step) { s.Send[1].ID = "" }), "Send[1].ID"},
		{"message ID NUL", step(func(s *persistence.Step) { s.Send[0].ID = nul }), "Send[0].ID"},
		{"message ID too long", step(func(s *persistence.Step) { s.Send[0].ID = longID }), "Send[0].ID"},
		{"channel invalid UTF-8", step(func(s *persistence.Step) { s.Send[1].Channel = badUTF8 }), "Send[1].Channel"},
		{"channel too long", step(func(s *persistence.Step) { s.Send[1].Channel = longID }), "Send[1].Channel"},
		{"target NUL", step(func(s *persistence.Step) { s.Send[0].Target = nul }), "Send[0].Target"},
		{"target huge", step(func(s *persistence.Step) { s.Send[0].Target = huge }), "Send[0].Target"},
		{"sender invalid UTF-8", step(func(s *persistence.Step) { s.Send[0].Sender = badUTF8 }), "Send[0].Sender"},
		{"type too long", step(func(s *persistence.Step) { s.Send[0].Type = longName }), "Send[0].Type"},
		{"metadata key NUL", step(func(s *persistence.Step) { s.Send[0].Metadata = map[string]string{nul: "v"} }), "Send[0].Metadata"},
		{"metadata key too long", step(func(s *persistence.Step) {
			s.Send[0].Metadata = map[string]string{strings.Repeat("k", persistence.MaxMetadataKeyLen+1): "v"}
		}), "Send[0].Metadata"},
		{"metadata value too long", step(func(s *persistence.Step) { s.Send[0].Metadata["k"] = longVal }), `Send[0].Metadata["k"]`},
		{"metadata value invalid UTF-8", step(func(s *persistence.Step) { s.Send[0].Metadata["k"] = badUTF8 }), `Send[0].Metadata["k"]`},
		{"subscription channel NUL", step(func(s *persistence.Step) { s.Subscribe[0].Channel = nul }), "Subscribe[0].Channel"},
		{"subscription mode unknown", step(func(s *persistence.Step) { s.Subscribe[0].Mode = "bogus" }), "Subscribe[0].Mode"},
		{"unsubscribe too long", step(func(s *persistence.Step) { s.Unsubscribe = []string{"ok", longID} }), "Unsubscribe[1]"},
		{"timer ID NUL", step(func(s *persistence.Step) { s.AddTimers[0].ID = nul }), "AddTimers[0].ID"},
		{"cancelled timer invalid UTF-8", step(func(s *persistence.Step) { s.CancelTimers = []string{badUTF8} }), "CancelTimers[0]"},
		{"fired timer too long", step(func(s *persistence.Step) { s.FireTimers = []string{longID} }), "FireTimers[0]"},
		{"event ID empty", step(func(s *persistence.Step) { s.Emit[1].ID = "" }), "Emit[1].ID"},
		{"event ID too long", step(func(s *persistence.Step) { s.Emit[0].ID = longID }), "Emit[0].ID"},
		{"event ID NUL", step(func(s *persistence.Step) { s.Emit[0].ID = nul }), "Emit[0].ID"},
		{"event instance invalid UTF-8", step(func(s *persistence.Step) { s.Emit[0].Instance = badUTF8 }), "Emit[0].Instance"},
		{"event type too long", step(func(s *persistence.Step) { s.Emit[1].Type = longName }), "Emit[1].Type"},
		{"event type NUL", step(func(s *persistence.Step) { s.Emit[1].Type = nul }), "Emit[1].Type"},
	}
	for _, tc := range cases {
		_, err := st.Apply(ctx(), tc.step)
		wantInvalid(t, tc.name, err, tc.field)
	}
	wantInvalid(t, "cancel: id", st.RequestCancel(ctx(), nul, "why"), "id")
	wantInvalid(t, "cancel: reason NUL", st.RequestCancel(ctx(), "a", nul), "reason")
	wantInvalid(t, "cancel: reason too long", st.RequestCancel(ctx(), "a", strings.Repeat("r", persistence.MaxReasonLen+1)), "reason")
	_, err := st.AcquireLease(ctx(), badUTF8, owner, time.Minute)
	wantInvalid(t, "acquire: id", err, "id")
	_, err = st.AcquireLease(ctx(), "a", nul, time.Minute)
	wantInvalid(t, "acquire: owner", err, "owner")
	_, err = st.RenewLeases(ctx(), longID, time.Minute)
	wantInvalid(t, "renew: owner", err, "owner")
	wantInvalid(t, "release: owner", st.ReleaseLeases(ctx(), nul), "owner")
	_, err = st.Runnable(ctx(), []int{0, persistence.NumBuckets}, 0)
	wantInvalid(t, "runnable: bucket too large", err, "buckets[1]")
	_, err = st.DueTimers(ctx(), time.Now(), []int{-1}, 0)
	wantInvalid(t, "due timers: bucket negative", err, "buckets[0]")
	_, err = st.Instance(ctx(), nul)
	wantInvalid(t, "read instance", err, "id")
	_, err = st.History(ctx(), badUTF8, 0)
	wantInvalid(t, "read history", err, "id")
	_, err = st.Mailbox(ctx(), nul, 0)
	wantInvalid(t, "read mailbox", err, "id")
	_, err = st.Subscriptions(ctx(), nul)
	wantInvalid(t, "read subscriptions", err, "id")
	_, err = st.List(ctx(), persistence.ListFilter{Workflow: nul})
	wantInvalid(t, "list", err, "Workflow")
	_, err = st.List(ctx(), persistence.ListFilter{Status: []persistence.Status{persistence.StatusRunning, persistence.Status(nul)}})
	wantInvalid(t, "list", err, "Status[1]")

	// Nothing of any of it was written.
	in, err := st.Instance(ctx(), "a")
	if err != nil || in.HistoryLen != 1 || in.CancelReason != "" || in.LeaseEpoch != 1 || in.Status != persistence.StatusRunning {
		t.Fatalf("instance after invalid steps = %+v, %v", in, err)
	}
	if all, _ := st.List(ctx(), persistence.ListFilter{}); len(all) != 1 {
		t.Fatalf("instances after invalid creates = %+v", all)
	}
	if ms := mailboxSeqs(t, st, "a"); len(ms) != 0 {
		t.Fatalf("mailbox after invalid steps = %+v", ms)
	}
	if subs, _ := st.Subscriptions(ctx(), "a"); len(subs) != 0 {
		t.Fatalf("subscriptions after invalid steps = %+v", subs)
	}
	if stats, _ := st.ChannelStats(ctx()); len(stats) != 0 {
		t.Fatalf("channels after invalid steps = %+v", stats)
	}
	if ts, _ := st.DueTimers(ctx(), time.Now().Add(2*time.Hour), nil, 0); len(ts) != 0 {
		t.Fatalf("timers after invalid steps = %+v", ts)
	}
	ob := outboxOf(t, st)
	if recs := listOutbox(t, ob, ""); len(recs) != 0 {
		t.Fatalf("outbox after invalid steps = %+v", recs)
	}

	// Values at the limits, in multi-byte UTF-8, are stored and read back.
	id := strings.Repeat("é", persistence.MaxIDLen/2) // 254 bytes
	name := strings.Repeat("ü", persistence.MaxNameLen/2)
	val := strings.Repeat("v", persistence.MaxMetadataValueLen)
	apply(t, st, persistence.Step{Create: &persistence.Instance{ID: id, Workflow: id, Parent: id, LeaseOwner: id, LeaseEpoch: 1},
		History: []persistence.Event{{Seq: 0, Kind: id, Name: name, Ref: name, Digest: id, Error: "ошибка"}}})
	apply(t, st, persistence.Step{Instance: id, Epoch: 1, Send: []persistence.NewMessage{{ID: id, Target: id, Channel: id, Sender: id,
		Type: name, Metadata: map[string]string{id: val}, Dedupe: true}}, Emit: []persistence.OutboxEvent{{ID: id, Instance: id, Type: name}}})
	if err := st.RequestCancel(ctx(), id, strings.Repeat("r", persistence.MaxReasonLen)); err != nil {
		t.Fatal(err)
	}
	h, err := st.History(ctx(), id, 0)
	if err != nil || len(h) != 1 || h[0].Name != name || h[0].Digest != id || h[0].Error != "ошибка" {
		t.Fatalf("history of the instance with long names = %+v, %v", h, err)
	}
	ms := mailboxSeqs(t, st, id)
	if len(ms) != 1 || ms[0].ID != id || ms[0].Type != name || ms[0].Metadata[id] != val {
		t.Fatalf("mailbox of the instance with long names = %+v", ms)
	}
	claimer := strings.Repeat("ø", persistence.MaxIDLen/2)
	recs, err := ob.ClaimOutbox(ctx(), claimer, time.Now(), time.Minute, 0)
	if err != nil || len(recs) != 1 || recs[0].ID != id || recs[0].Instance != id || recs[0].Type != name || recs[0].Claimer != claimer {
		t.Fatalf("outbox event with long names = %+v, %v", recs, err)
	}
	errText := strings.Repeat("ошибка ", 1000)
	if err := ob.FinishOutbox(ctx(), id, claimer, persistence.OutboxPending, time.Now(), errText); err != nil {
		t.Fatal(err)
	}
	if recs, err := ob.ListOutbox(ctx(), persistence.OutboxPending, "", 0); err != nil || len(recs) != 1 || recs[0].Error != errText {
		t.Fatalf("outbox event after a long error = %+v, %v", recs, err)
	}
}
