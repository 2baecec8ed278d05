package actor

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/norntype"
	"github.com/nornlabs/norn/persistence"
)

// parkedOn is what an instance waits for as it parks. It is written in the
// instance's row (Step.Waits) for tools that do not have the workflow's
// code, but only on writes that happen anyway: the commit a park makes
// (the status turning waiting, a receive's timeout), and passivation. A
// park right after a commit of its own (a send, say) writes nothing more,
// so the row may be older than the instance: Hist tells, and a reader shows
// it only while the history has not grown since. The live activation keeps
// the latest one in memory for Inspect on its node.
type parkedOn struct {
	Waits []norntype.Wait
	// Seen is the last message (by Seq) of the mailbox scan before the
	// park: the messages addressed to the instance up to it were refused by
	// every receive it waits in.
	Seen int64
	// Hist is the history length the park happened at.
	Hist int64
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

// noteWaits records what the activation waits for as it parks in recv:
// in memory, and in the pending step if that commits anyway and the row
// says something else.
func (a *activation) noteWaits(recv []*command) {
	if a.inflight > 0 || a.memoryBackoff() {
		a.parked.Store(nil) // running, not waiting
		return
	}
	p := a.describeWaits(recv)
	p.Hist = a.j.Len()
	a.parked.Store(&p)
	if a.pendingEmpty() {
		return
	}
	a.stageWaits(&p)
}

// stageWaits puts p in the pending step unless the row says so already.
func (a *activation) stageWaits(p *parkedOn) {
	var old parkedOn
	if len(a.waits) > 0 {
		_ = json.Unmarshal(a.waits, &old)
	}
	if p.Seen == old.Seen && p.Hist == old.Hist && waitsEqual(old.Waits, p.Waits) {
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

// readWaits decodes an instance row's Waits; nil unless the instance is
// waiting and has recorded nothing since (see parkedOn).
func readWaits(in persistence.Instance) *parkedOn {
	if in.Status != persistence.StatusWaiting || len(in.Waits) == 0 {
		return nil
	}
	var p parkedOn
	if json.Unmarshal(in.Waits, &p) != nil || p.Hist != in.HistoryLen {
		return nil
	}
	return &p
}

// parkedOnOf is what instance in waits for: from its activation on this
// node if it is parked here, else from its row.
func (s *System) parkedOnOf(in persistence.Instance) *parkedOn {
	if in.Status != persistence.StatusWaiting {
		return nil
	}
	s.mu.Lock()
	a := s.acts[in.ID]
	s.mu.Unlock()
	if a != nil {
		if p := a.parked.Load(); p != nil && p.Hist == in.HistoryLen {
			return p
		}
	}
	return readWaits(in)
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

// The stored form of parkedOn is compact: every parked instance's row
// holds one, so its size is part of the instance's footprint.
type (
	wireParked struct {
		W []wireWait `json:"w"`
		S int64      `json:"s,omitempty"`
		H int64      `json:"h"`
	}
	wireWait struct {
		K string   `json:"k"` // kind: its first letter
		N string   `json:"n,omitempty"`
		T []string `json:"t,omitempty"`
		C *string  `json:"c,omitempty"` // channel filter, when there is one
		F string   `json:"f,omitempty"`
		M bool     `json:"m,omitempty"` // Match filter
		X bool     `json:"x,omitempty"` // strict untyped matching
		D int64    `json:"d,omitempty"` // due, Unix nanoseconds
		A int      `json:"a,omitempty"`
	}
)

var waitKinds = map[string]norntype.WaitKind{"r": norntype.WaitReceive, "t": norntype.WaitTimer, "c": norntype.WaitChild, "a": norntype.WaitActivity}

// MarshalJSON writes the compact stored form.
func (p parkedOn) MarshalJSON() ([]byte, error) {
	w := wireParked{W: make([]wireWait, len(p.Waits)), S: p.Seen, H: p.Hist}
	for i, x := range p.Waits {
		ww := wireWait{K: string(x.Kind)[:1], N: x.Name, T: x.Types, F: string(x.From), M: x.Filtered, X: x.Strict, A: x.Attempt}
		if x.OnChannel {
			ww.C = &x.Channel
		}
		if !x.Due.IsZero() {
			ww.D = x.Due.UnixNano()
		}
		w.W[i] = ww
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the compact stored form.
func (p *parkedOn) UnmarshalJSON(b []byte) error {
	var w wireParked
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*p = parkedOn{Seen: w.S, Hist: w.H, Waits: make([]norntype.Wait, len(w.W))}
	for i, ww := range w.W {
		x := norntype.Wait{Kind: waitKinds[ww.K], Name: ww.N, Types: ww.T, From: norntype.PID(ww.F), Filtered: ww.M, Strict: ww.X, Attempt: ww.A}
		if ww.C != nil {
			x.Channel, x.OnChannel = *ww.C, true
		}
		if ww.D != 0 {
			x.Due = time.Unix(0, ww.D)
		}
		p.Waits[i] = x
	}
	return nil
}
