package mailbox_test

import (
	"testing"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

func TestReceiveAccepts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		r    mailbox.Receive
		m    mailbox.Message
		want bool
	}{
		{"same type", mailbox.Receive{Type: "Paid"}, mailbox.Message{Type: "Paid"}, true},
		{"other type", mailbox.Receive{Type: "Paid"}, mailbox.Message{Type: "Refund"}, false},
		{"any type", mailbox.Receive{}, mailbox.Message{Type: "Refund"}, true},
		{"untyped message", mailbox.Receive{Type: "Paid"}, mailbox.Message{}, true},
		{"filter rejects", mailbox.Receive{Spec: mailbox.NewSpec(mailbox.From("a"))}, mailbox.Message{Sender: "b"}, false},
		{"system channel needs its name", mailbox.Receive{}, mailbox.Message{Channel: mailbox.DownChannel}, false},
		{"system channel named", mailbox.Receive{Spec: mailbox.NewSpec(mailbox.OnChannel(mailbox.DownChannel))},
			mailbox.Message{Channel: mailbox.DownChannel}, true},
	}
	for _, c := range cases {
		if got := c.r.Accepts(c.m); got != c.want {
			t.Errorf("%s: Accepts = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestReceiveMayAccept(t *testing.T) {
	t.Parallel()
	jobs := mailbox.NewSpec(mailbox.OnChannel("jobs"))
	cases := []struct {
		name     string
		r        mailbox.Receive
		ch, typ  string
		ok, sure bool
	}{
		{"channel and type", mailbox.Receive{Type: "Job", Spec: jobs}, "jobs", "Job", true, true},
		{"other channel", mailbox.Receive{Spec: jobs}, "mail", "", false, false},
		{"other type", mailbox.Receive{Type: "Job", Spec: jobs}, "jobs", "Other", false, false},
		{"any channel but the runtime's", mailbox.Receive{}, "$down", "", false, false},
		{"filtered: not sure", mailbox.Receive{Spec: mailbox.NewSpec(mailbox.OnChannel("jobs"), mailbox.From("p"))}, "jobs", "", true, false},
	}
	for _, c := range cases {
		ok, sure := c.r.MayAccept(c.ch, c.typ)
		if ok != c.ok || sure != c.sure {
			t.Errorf("%s: MayAccept = %v, %v; want %v, %v", c.name, ok, sure, c.ok, c.sure)
		}
	}
}

func queued(n int, ch string) []persistence.Message {
	out := make([]persistence.Message, n)
	for i := range out {
		out[i] = persistence.Message{Seq: int64(i + 1), ID: string(rune('a' + i)), Channel: ch}
	}
	return out
}

func TestPickDirectBeforeQueued(t *testing.T) {
	t.Parallel()
	msgs := []persistence.Message{{Seq: 1, Target: "me", ID: "direct"}, {Seq: 2, Channel: "jobs"}}
	m, cands, ok := mailbox.Selection{}.Pick(mailbox.Receive{}, msgs)
	if !ok || m.ID != "direct" || cands != nil {
		t.Fatalf("Pick = %+v, %v, %v", m, cands, ok)
	}
	// A direct message behind the competing candidates ends them.
	msgs = []persistence.Message{{Seq: 1, Channel: "jobs", ID: "q"}, {Seq: 2, Target: "me", ID: "direct"}, {Seq: 3, Channel: "jobs"}}
	if _, cands, _ := (mailbox.Selection{}).Pick(mailbox.Receive{}, msgs); len(cands) != 1 {
		t.Fatalf("candidates past a direct message: %d", len(cands))
	}
}

func TestPickSpreadsCompetingConsumers(t *testing.T) {
	t.Parallel()
	msgs := queued(20, "jobs")
	r := mailbox.Receive{Spec: mailbox.NewSpec(mailbox.OnChannel("jobs"))}
	seen := map[string]bool{}
	for turn := range uint32(mailbox.CompetingSpread) {
		m, cands, ok := mailbox.Selection{Turn: turn}.Pick(r, msgs)
		if !ok || len(cands) != mailbox.CompetingSpread {
			t.Fatalf("turn %d: ok %v, %d candidates", turn, ok, len(cands))
		}
		seen[m.ID] = true
	}
	if len(seen) != mailbox.CompetingSpread {
		t.Fatalf("%d turns picked %d distinct messages, want one each", mailbox.CompetingSpread, len(seen))
	}
}

func TestPickSkipsTakenAndRejected(t *testing.T) {
	t.Parallel()
	msgs := queued(3, "jobs")
	msgs[1].Type = "Other"
	sel := mailbox.Selection{Skip: func(seq int64) bool { return seq == 1 }}
	m, _, ok := sel.Pick(mailbox.Receive{Type: "Job"}, msgs)
	if !ok || m.Seq != 3 {
		t.Fatalf("Pick = %+v, %v; want seq 3", m, ok)
	}
	if _, _, ok := sel.Pick(mailbox.Receive{Type: "Job"}, msgs[:2]); ok {
		t.Fatal("picked a skipped or rejected message")
	}
}

func TestPickWithPrefetchClaimsAhead(t *testing.T) {
	t.Parallel()
	msgs := queued(20, "jobs")
	sel := mailbox.Selection{Prefetch: func(ch string) int { return 12 }, Turn: 5}
	m, cands, ok := sel.Pick(mailbox.Receive{}, msgs)
	if !ok || m.Seq != 1 || len(cands) != 12 {
		t.Fatalf("Pick = seq %d, %d candidates, %v; want the first of 12", m.Seq, len(cands), ok)
	}
	claim := sel.Claimable(m, cands)
	if len(claim) != 11 || claim[0].Seq != 2 {
		t.Fatalf("Claimable = %d messages from seq %d; want 11 from 2", len(claim), claim[0].Seq)
	}
	if got := (mailbox.Selection{}).Claimable(m, cands); got != nil {
		t.Fatalf("claims without prefetch: %d", len(got))
	}
}

func TestUntypedNeedsTheReceivesCheck(t *testing.T) {
	t.Parallel()
	fits := func(b []byte) bool { return string(b) == "ok" }
	r := mailbox.Receive{Type: "T", Untyped: fits}
	if !r.Accepts(mailbox.Message{Payload: []byte("ok")}) || r.Accepts(mailbox.Message{Payload: []byte("no")}) {
		t.Fatal("an untyped message must be taken only if the check says so")
	}
	if !r.Accepts(mailbox.Message{Type: "T", Payload: []byte("no")}) {
		t.Fatal("a typed message is not checked")
	}
	if ok, sure := r.MayAccept("", ""); !ok || sure {
		t.Fatalf("MayAccept of an untyped message = %v, %v; want possible, not sure", ok, sure)
	}
	if ok, sure := r.MayAccept("", "T"); !ok || !sure {
		t.Fatalf("MayAccept of a typed message = %v, %v; want sure", ok, sure)
	}
}
