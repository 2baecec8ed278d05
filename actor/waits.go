package actor

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
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
	if b := p.encode(); !bytes.Equal(b, a.waits) {
		a.pending.Waits, a.pending.SetWaits = b, true
	}
}

// readWaits decodes an instance row's Waits; nil unless the instance is
// waiting and has recorded nothing since (see parkedOn).
func readWaits(in persistence.Instance) *parkedOn {
	if in.Status != persistence.StatusWaiting || len(in.Waits) == 0 {
		return nil
	}
	p, err := decodeParked(in.Waits)
	if err != nil || p.Hist != in.HistoryLen {
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

// The stored form of parkedOn is binary and compact: every parked
// instance's row holds one (twice right after a passivation, counting the
// version its park left until a vacuum), so its size is part of the
// instance's footprint: a receive on a channel takes about 40 bytes, 80
// as JSON. It starts with a version byte; rows written before it hold
// the JSON form (starting with '{'), which is still read.
//
//	version (1) | hist, seen (varint) | count (uvarint) | per wait:
//	kind (its first letter) | flags | name | types (count, each) |
//	channel (if on one) | from | due (Unix ns, 0: none) | attempt
//
// Strings are a uvarint length and the bytes.
const parkedBinary = 1

const (
	waitOnChannel byte = 1 << iota
	waitFiltered
	waitStrict
)

var waitKinds = map[byte]norntype.WaitKind{'r': norntype.WaitReceive, 't': norntype.WaitTimer, 'c': norntype.WaitChild, 'a': norntype.WaitActivity}

// encode writes the stored form.
func (p parkedOn) encode() []byte {
	b := make([]byte, 0, 48)
	b = append(b, parkedBinary)
	b = binary.AppendVarint(b, p.Hist)
	b = binary.AppendVarint(b, p.Seen)
	b = binary.AppendUvarint(b, uint64(len(p.Waits)))
	str := func(s string) { b = append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	for _, w := range p.Waits {
		var flags byte
		if w.OnChannel {
			flags |= waitOnChannel
		}
		if w.Filtered {
			flags |= waitFiltered
		}
		if w.Strict {
			flags |= waitStrict
		}
		b = append(b, string(w.Kind)[0], flags)
		str(w.Name)
		b = binary.AppendUvarint(b, uint64(len(w.Types)))
		for _, t := range w.Types {
			str(t)
		}
		if w.OnChannel {
			str(w.Channel)
		}
		str(string(w.From))
		var due int64
		if !w.Due.IsZero() {
			due = w.Due.UnixNano()
		}
		b = binary.AppendVarint(b, due)
		b = binary.AppendVarint(b, int64(w.Attempt))
	}
	return b
}

// errWaitsForm is a stored form that does not decode.
var errWaitsForm = errors.New("actor: malformed stored waits")

// decodeParked reads a stored form, binary or the JSON of older rows.
func decodeParked(b []byte) (parkedOn, error) {
	if len(b) > 0 && b[0] == '{' {
		return decodeParkedJSON(b)
	}
	if len(b) == 0 || b[0] != parkedBinary {
		return parkedOn{}, errWaitsForm
	}
	r := waitsReader{b: b[1:]}
	p := parkedOn{Hist: r.varint(), Seen: r.varint()}
	n := r.uvarint()
	if n > uint64(len(r.b)) { // each wait takes bytes: a bad count fails here, not in make
		return parkedOn{}, errWaitsForm
	}
	p.Waits = make([]norntype.Wait, n)
	for i := range p.Waits {
		kind, flags := r.byte(), r.byte()
		w := norntype.Wait{Kind: waitKinds[kind], Name: r.str(), OnChannel: flags&waitOnChannel != 0,
			Filtered: flags&waitFiltered != 0, Strict: flags&waitStrict != 0}
		if nt := r.uvarint(); nt > 0 && nt <= uint64(len(r.b)) {
			w.Types = make([]string, nt)
			for j := range w.Types {
				w.Types[j] = r.str()
			}
		} else if nt > 0 {
			r.bad = true
		}
		if w.OnChannel {
			w.Channel = r.str()
		}
		w.From = norntype.PID(r.str())
		if due := r.varint(); due != 0 {
			w.Due = time.Unix(0, due)
		}
		w.Attempt = int(r.varint())
		if w.Kind == "" {
			r.bad = true
		}
		p.Waits[i] = w
	}
	if r.bad || len(r.b) > 0 {
		return parkedOn{}, errWaitsForm
	}
	return p, nil
}

// waitsReader reads the binary form; a read past the end or a bad
// varint sets bad, and reads go on returning zero values.
type waitsReader struct {
	b   []byte
	bad bool
}

func (r *waitsReader) byte() byte {
	if len(r.b) == 0 {
		r.bad = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *waitsReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

// varint reads what binary.AppendVarint wrote: a uvarint holding the
// value zig-zag encoded.
func (r *waitsReader) varint() int64 {
	u := r.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (r *waitsReader) str() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.bad = true
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// The JSON form rows held before the binary one.
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

// decodeParkedJSON reads the JSON form.
func decodeParkedJSON(b []byte) (parkedOn, error) {
	var w wireParked
	if err := json.Unmarshal(b, &w); err != nil {
		return parkedOn{}, err
	}
	p := parkedOn{Seen: w.S, Hist: w.H, Waits: make([]norntype.Wait, len(w.W))}
	for i, ww := range w.W {
		var kind norntype.WaitKind
		if ww.K != "" {
			kind = waitKinds[ww.K[0]]
		}
		x := norntype.Wait{Kind: kind, Name: ww.N, Types: ww.T, From: norntype.PID(ww.F), Filtered: ww.M, Strict: ww.X, Attempt: ww.A}
		if ww.C != nil {
			x.Channel, x.OnChannel = *ww.C, true
		}
		if ww.D != 0 {
			x.Due = time.Unix(0, ww.D)
		}
		p.Waits[i] = x
	}
	return p, nil
}
