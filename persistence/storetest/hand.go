package storetest

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nornlabs/norn/persistence"
)

// testHandTo: a message published with HandTo goes straight into that
// consumer's mailbox, claimed, when the consumer may take one by
// ClaimQueue's rules (competing subscriber, not ended, leased by
// HandOwner); otherwise it is queued as usual. A handed message is
// consumed like a claimed one, and goes back to the queue when its
// consumer unsubscribes or ends first.
func testHandTo(t *testing.T, st persistence.Store) {
	jobsConsumers(t, st)
	create(t, st, "listener")
	apply(t, st, persistence.Step{Instance: "listener", Epoch: 1,
		Subscribe: []persistence.Subscription{{Channel: "news", Mode: persistence.Broadcast}}})

	hand := func(id, channel, to, by string) persistence.StepResult {
		t.Helper()
		return apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: id, Channel: channel, Type: "job",
			Payload: []byte(`"` + id + `"`), Metadata: map[string]string{"k": "v"}, HandTo: to, HandOwner: by}}})
	}
	ids := func(id string) string {
		var out []string
		for _, m := range mailboxSeqs(t, st, id) {
			out = append(out, m.ID)
		}
		return strings.Join(out, " ")
	}

	res := hand("h1", "jobs", "a", owner)
	if len(res.Handed) != 1 || len(res.Queued) != 0 || !slices.Equal(res.Woken, []string{"a"}) {
		t.Fatalf("hand to a: result %+v, want h1 handed, a woken, nothing queued", res)
	}
	h := res.Handed[0]
	if h.ID != "h1" || h.Target != "a" || h.Channel != "jobs" || h.Type != "job" || string(h.Payload) != `"h1"` ||
		h.Seq == 0 || h.Metadata["k"] != "v" || h.PublishedAt.IsZero() {
		t.Fatalf("handed message = %+v", h)
	}
	box := mailboxSeqs(t, st, "a")
	if len(box) != 1 || box[0].Seq != h.Seq || box[0].Target != "a" || !box[0].PublishedAt.Equal(h.PublishedAt) {
		t.Fatalf("a's mailbox = %+v, want h1 as handed", box)
	}
	if g := ids("b"); g != "" {
		t.Fatalf("b's mailbox = %q: a handed message is not queued", g)
	}

	// Consumers that may not take it: the message is queued.
	for _, tc := range []struct{ to, by string }{
		{"elsewhere", owner}, // leased by another owner
		{"a", "node-b"},      // not leased by the owner named
		{"done", owner},      // ended
		{"not-sub", owner},   // not subscribed
		{"ghost", owner},     // no such instance
	} {
		id := "q-" + tc.to + "-" + tc.by
		res := hand(id, "jobs", tc.to, tc.by)
		if len(res.Handed) != 0 || len(res.Queued) != 1 || !slices.Contains(res.Queued[0].Subscribers, "b") {
			t.Fatalf("hand to %s for %s: result %+v, want it queued", tc.to, tc.by, res)
		}
	}
	if g := ids("b"); g != "q-elsewhere-node-a q-a-node-b q-done-node-a q-not-sub-node-a q-ghost-node-a" {
		t.Fatalf("b's mailbox = %q, want the five queued", g)
	}
	// A broadcast channel copies as usual.
	res = hand("n1", "news", "listener", owner)
	if len(res.Handed) != 0 || !slices.Equal(res.Woken, []string{"listener"}) {
		t.Fatalf("hand on a broadcast channel: result %+v, want a copy", res)
	}

	// a takes h1 once.
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Consume: []int64{h.Seq}})
	_, err := st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 1, Consume: []int64{h.Seq}})
	wantErr(t, err, persistence.ErrMessageGone)

	// Handed, then the consumer unsubscribes or ends: back to the queue.
	h2 := hand("h2", "jobs", "a", owner).Handed
	h3 := hand("h3", "jobs", "b", owner).Handed
	if len(h2) != 1 || len(h3) != 1 {
		t.Fatalf("handed %v and %v, want one each", h2, h3)
	}
	res = apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Unsubscribe: []string{"jobs"}})
	if len(res.Queued) != 1 || res.Queued[0].Channel != "jobs" {
		t.Fatalf("unsubscribe result = %+v, want h2 queued again", res)
	}
	res = apply(t, st, persistence.Step{Instance: "b", Epoch: 1, Status: persistence.StatusCompleted})
	if len(res.Queued) != 1 || res.Queued[0].Channel != "jobs" {
		t.Fatalf("end result = %+v, want h3 queued again", res)
	}
	if g := ids("c"); !strings.HasSuffix(g, " h2 h3") {
		t.Fatalf("c's mailbox = %q, want h2 and h3 queued again", g)
	}

	var inv *persistence.InvalidError
	for _, bad := range []persistence.NewMessage{
		{ID: "x", Channel: "jobs", HandTo: "c"},                                // no owner
		{ID: "x", Channel: "jobs", Target: "c", HandTo: "c", HandOwner: owner}, // a send
		{ID: "x", HandTo: "c", HandOwner: owner},                               // no channel
	} {
		if _, err := st.Apply(ctx(), persistence.Step{Send: []persistence.NewMessage{bad}}); !errors.As(err, &inv) {
			t.Fatalf("Send %+v: error = %v, want an *InvalidError", bad, err)
		}
	}
}
