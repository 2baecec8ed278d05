package actor

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/norntype"
	"github.com/nornlabs/norn/persistence"
)

// parkedOn is what a park writes in the instance's row (Step.Waits), for
// tools that do not have the workflow's code: what it waits for, and how
// far into its mailbox it looked.
type parkedOn struct {
	Waits []norntype.Wait `json:"waits"`
	// Seen is the last message (by Seq) of the mailbox scan before the
	// park: the messages addressed to the instance up to it were refused by
	// every receive it waits in.
	Seen int64 `json:"seen,omitempty"`
}

// describeWaits is what the activation waits for as it parks in recv.
func (a *activation) describeWaits(recv []*command) parkedOn {
	var p parkedOn
	for _, c := range recv {
		if c.Done() {
			continue
		}
		p.Waits = append(p.Waits, describeReceive(c.recv))
	}
	for _, jc := range a.j.Calls() {
		c := commandOf(jc)
		switch {
		case c.Done():
		case c.timer:
			p.Waits = append(p.Waits, norntype.Wait{Kind: norntype.WaitTimer, Name: strings.TrimPrefix(c.Key, "t:"), Due: c.due})
		case c.act != nil && c.act.started:
			w := norntype.Wait{Kind: norntype.WaitActivity, Name: c.act.id, Attempt: c.act.attempt}
			if !c.act.running {
				w.Due = c.act.nextAt
			}
			p.Waits = append(p.Waits, w)
		}
	}
	p.Seen = a.mailSeen
	return p
}

// describeReceive is a waited-for receive as a Wait: a child's Down
// (Await of a child) reads as waiting for the child.
func describeReceive(r *receiveCall) norntype.Wait {
	s := r.spec
	if s.HasChannel && s.Channel == mailbox.DownChannel && s.HasFrom && r.typ == downType {
		return norntype.Wait{Kind: norntype.WaitChild, Name: string(s.From), Types: []string{downType},
			Channel: s.Channel, OnChannel: true, From: s.From}
	}
	w := norntype.Wait{Kind: norntype.WaitReceive, Name: r.id, Channel: s.Channel, OnChannel: s.HasChannel, From: s.From,
		Filtered: len(s.Preds) > 0, Strict: r.typ != "" && r.untyped != nil}
	if r.typ != "" {
		w.Types = append([]string{r.typ}, r.aliases...)
	}
	if r.waiting {
		w.Due = r.due
	}
	return w
}

// noteWaits puts what the activation now waits for in the pending step,
// if it differs from what the instance's row says. Mail addressed to the
// instance that no receive took moves Seen on, and so costs a write of its
// own: what stays in a mailbox is then known to be unwanted. Competing
// queues' messages do not count (another consumer may take them).
func (a *activation) noteWaits(recv []*command) {
	p := a.describeWaits(recv)
	var old parkedOn
	if len(a.waits) > 0 {
		_ = json.Unmarshal(a.waits, &old)
	}
	if p.Seen == old.Seen && waitsEqual(old.Waits, p.Waits) {
		return
	}
	b, _ := json.Marshal(p)
	a.pending.Waits, a.pending.SetWaits = b, true
}

func waitsEqual(x, y []norntype.Wait) bool {
	if len(x) != len(y) {
		return false
	}
	bx, _ := json.Marshal(x)
	by, _ := json.Marshal(y)
	return bytes.Equal(bx, by)
}

// readWaits decodes an instance row's Waits; nil for an instance that is
// not waiting (what it last waited for no longer holds).
func readWaits(in persistence.Instance) *parkedOn {
	if in.Status != persistence.StatusWaiting || len(in.Waits) == 0 {
		return nil
	}
	var p parkedOn
	if json.Unmarshal(in.Waits, &p) != nil {
		return nil
	}
	return &p
}

// unmatched reports whether no receive the instance is parked in can take
// m: m was in the mailbox when it last looked and took nothing, or its type
// or channel or sender is refused by every receive.
func (p *parkedOn) unmatched(m persistence.Message, self string) bool {
	if p == nil {
		return false
	}
	if m.Target == self && m.Seq <= p.Seen {
		return true
	}
	for _, w := range p.Waits {
		if w.MayTake(m.Type, m.Channel, norntype.PID(m.Sender)) {
			return false
		}
	}
	return true
}
