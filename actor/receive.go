package actor

import (
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/nornlabs/norn/actor/internal/journal"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// Received is a consumed message with its payload decoded.
type Received[T any] struct {
	mailbox.Message
	Value T
}

// mailboxPage is the first read of a mailbox scan; a scan that finds no
// match in a full page reads a larger one, so that the common case (the
// first message matches) reads a few rows, not the whole queue. It is as
// many as a competing consumer chooses among.
const mailboxPage = mailbox.CompetingSpread

// flushConsumedAt is how many messages a pending step may consume before
// a mailbox read commits it first (see readMail): half a first page.
const flushConsumedAt = mailboxPage / 2

// mailboxScanMax caps one scan.
const mailboxScanMax = 1 << 20

// receiveCall is the live state of one receive.
type receiveCall struct {
	id   string
	spec mailbox.Spec
	typ  string // message type T matches ("" matches any)
	// aliases are T's other names (Config.Messages).
	aliases []string
	// untyped decides whether a message stored without a type decodes
	// strictly into T (see strictDecoder); nil takes any.
	untyped func([]byte) bool
	timeout time.Duration
	waiting bool // a receive_wait is recorded: the timeout runs
	due     time.Time
	stored  bool
}

func (r *receiveCall) advance(e persistence.Event) error {
	var rec timerRecord
	if err := json.Unmarshal(e.Payload, &rec); err != nil {
		return journal.Diverged(e, "receive wait (unreadable record)")
	}
	r.waiting, r.due, r.stored = true, rec.Due, rec.Stored
	return nil
}

// accept is what the receive accepts, as the mailbox's selection sees it.
func (r *receiveCall) accept() mailbox.Receive {
	return mailbox.Receive{Type: r.typ, Aliases: r.aliases, Spec: r.spec, Untyped: r.untyped}
}

// matches applies the receive's type and filters to a message recorded as
// taken. It leaves out the strict check of untyped messages, so that a
// history written before that check replays as it ran.
func (r *receiveCall) matches(m mailbox.Message) bool {
	return mailbox.Receive{Type: r.typ, Aliases: r.aliases, Spec: r.spec}.Accepts(m)
}

// Receive consumes the first message in the mailbox (arrival order) whose
// type is T and that matches every filter, waiting for one if there is none.
// Messages of other types, and those the filters reject, stay in the
// mailbox in order. With mailbox.Timeout it returns ErrTimeout when the time
// passes first; the timeout is a durable timer.
//
// T = []byte (or an interface type) matches a message of any type: the
// router's receive, with the raw payload and Message.Type. A message stored
// without a type (raw bytes: from the norn command, HTTP clients, other
// languages) matches T only if it decodes into T strictly: with the JSON
// codec, every field it has is one of T's and of the right type; otherwise
// it stays in the mailbox for another receive. A payload of the right type
// that still does not decode as T is consumed and recorded (so nothing is
// lost and replay agrees): Receive returns a *DecodeError holding it.
func Receive[T any](ctx *Context, filters ...mailbox.Filter) (Received[T], error) {
	return ReceiveAsync[T](ctx, filters...).Get(ctx)
}

// ReceiveAsync is Receive as a Future, for Select against activities,
// timers or other receives. It takes a message only while it is being
// waited for (Get, Select, WaitAll), never behind the workflow's back.
func ReceiveAsync[T any](ctx *Context, filters ...mailbox.Filter) *Future[Received[T]] {
	a := ctx.a
	id := a.nextID("receive")
	if a.observeCancel() {
		return failedFuture[Received[T]](a, ErrCancelled)
	}
	spec := mailbox.NewSpec(filters...)
	typ, aliases := receiveTypes[T](a.env)
	r := &receiveCall{id: id, spec: spec, typ: typ, aliases: aliases, timeout: spec.Timeout, untyped: strictDecoder[T](a.env.codec)}
	c := newCommand(journal.ReceiveKey(id))
	c.recv = r
	c.Advance = r.advance
	c.Resolve = func(e persistence.Event) (any, error) {
		if e.Kind == EventReceiveTimeout {
			return Received[T]{}, ErrTimeout
		}
		var m mailbox.Message
		if err := json.Unmarshal(e.Payload, &m); err != nil {
			a.nondet(e, "received (unreadable message: "+err.Error()+")")
		}
		if !r.matches(m) {
			a.nondet(e, "a receive whose type or filters reject message "+m.ID)
		}
		v, err := decodeWith[T](a.env.codec, m.Payload)
		if err != nil {
			return Received[T]{Message: m}, &DecodeError{MessageID: m.ID, Type: typeName[T](), Message: m.Payload, Err: err}
		}
		return Received[T]{Message: m, Value: v}, nil
	}
	a.add(c)
	return &Future[Received[T]]{a: a, c: c}
}

// scanMail reads the mailbox for the receives being waited for (in the
// order they were issued) and for linked children's failures. It records
// what it consumes and reports whether anything was resolved.
func (a *activation) scanMail(recv []*command) bool {
	// Only the activation's first scan may use the mailbox read at its
	// load: it has consumed and claimed nothing since (a fetch needs a
	// mailbox read first), and anything that arrived since wakes it.
	pre := a.preMail
	a.preMail = nil
	for {
		if a.takeHanded(recv) || a.takePrefetched(recv) {
			return true
		}
		took, read, done := a.fetchQueued(recv)
		if took || !read {
			return took
		}
		took, again := a.readMail(recv, done, pre)
		pre = nil
		if !again {
			return took
		}
	}
}

// readMail is scanMail's mailbox read. It reports again when a competing
// message it picked went to another consumer first: the scan starts over.
// done, if set, is called once it is over (see activation.fetchQueued),
// saying whether it saw more queued than it took (or lost a race for it).
// pre, if set, is the mailbox read at the activation's load: the first
// read uses it.
func (a *activation) readMail(recv []*command, done func(backlog bool), pre *preMail) (took, again bool) {
	backlog := false
	if done != nil {
		defer func() { done(backlog || again) }()
	}
	for limit := a.mailboxPage(); ; limit *= 8 {
		var all []persistence.Message
		if pre != nil && pre.limit == limit {
			all = pre.msgs
		} else {
			if len(a.consumed) >= flushConsumedAt {
				// The messages the pending step consumed are still in the
				// store: a read returns them first and skips them, so an
				// activation draining a backlog without a commit would read
				// more rows each time (quadratic in the backlog). Commit
				// them, and keep each read to a few rows.
				a.flush()
			}
			var err error
			if all, err = a.sys.store.Mailbox(a.env.ctx, a.id, limit); err != nil {
				a.fail(err)
			}
		}
		pre = nil
		a.noteMailRead(all, limit)
		a.checkLinks(recv, all)
		for i := len(all) - 1; i >= 0; i-- {
			if all[i].Target == a.id { // not a competing queue's: others may take those
				a.mailSeen = max(a.mailSeen, all[i].Seq)
				break
			}
		}
		msgs := a.sys.claims.Unclaimed(a, all)
		if !a.hand.empty() {
			// Handed to this activation: taken from its slot alone.
			msgs = slices.DeleteFunc(slices.Clone(msgs), a.hand.handing)
		}
		for _, c := range recv {
			if c.Done() {
				continue
			}
			sel := a.selection()
			m, cands, ok := sel.Pick(c.recv.accept(), msgs)
			if !ok {
				continue
			}
			if m.Target == "" && a.prefetch[m.Channel] <= 1 {
				a.spread++ // the next pick among competing messages takes another
			}
			claim := sel.Claimable(m, cands)
			if m.Target == "" {
				var held bool
				if held, claim = a.sys.claims.Hold(a, m, claim); !held {
					return false, true // another consumer here took it first
				}
			}
			if a.consumeHeld(c, m, claim) {
				if len(cands) > 1+len(claim) || len(claim) > 0 && len(all) >= limit {
					// More waiting than this consumer takes: wake the next.
					backlog = true
					a.sys.chainQueued(a, m.Channel)
				}
				return true, false
			}
			// A competing message another consumer took first: look again.
			return false, true
		}
		if len(all) < limit || limit >= mailboxScanMax {
			return false, false
		}
	}
}

// consumeHeld is consume of a message held in the node's claim set, which
// it releases however consume ends. A failed step unwinds with a panic
// (restart, stop): other consumers here may have skipped the messages
// while they were held, so one of them is woken to look again.
func (a *activation) consumeHeld(c *command, m persistence.Message, claim []persistence.Message) (ok bool) {
	if m.Target != "" {
		return a.consume(c, m, claim)
	}
	unwinding := true
	defer func() {
		a.sys.claims.Release(a, m, claim, ok)
		if unwinding {
			a.sys.chainQueued(a, m.Channel)
		}
	}()
	ok = a.consume(c, m, claim)
	unwinding = false
	return ok
}

// preMail is a mailbox read of limit messages (see activation.preMail).
type preMail struct {
	msgs  []persistence.Message
	limit int
}

// mailboxPage is the first read of a scan: enough for the largest prefetch.
func (a *activation) mailboxPage() int {
	n := mailboxPage
	for _, p := range a.prefetch {
		n = max(n, p)
	}
	return n
}

// takePrefetched serves the first receive, in issue order, that names the
// channel of a prefetched message, without reading the store: the
// instance's messages on a competing channel are exactly those it claimed
// (nobody can send to it there), so the first prefetched match is the
// first match in its mailbox but for messages still queued, among which a
// competing consumer has no order to keep. An instance watching linked
// children reads the store instead, where a failed child's Down waits: a
// wait must see it before taking anything else.
func (a *activation) takePrefetched(recv []*command) bool {
	if len(a.prefetched) == 0 || a.watchLinks() {
		return false
	}
	for _, c := range recv {
		if c.Done() || !c.recv.spec.HasChannel || a.prefetch[c.recv.spec.Channel] == 0 {
			continue
		}
		for _, m := range a.prefetched {
			if m.Channel == c.recv.spec.Channel && c.recv.matches(mailbox.FromStored(m)) {
				a.consume(c, m, nil) // which takes it off the list
				return true
			}
		}
	}
	return false
}

// dropPrefetched forgets the prefetched messages of channel: an
// unsubscribe puts them back in its queue.
func (a *activation) dropPrefetched(channel string) {
	a.prefetched = slices.DeleteFunc(a.prefetched, func(m persistence.Message) bool { return m.Channel == channel })
	a.hand.drop(channel)
}

// consume records the receive of m by c, claiming claim ahead with it. A
// competing message is ours only once the claim commits; it reports false
// if another consumer won.
func (a *activation) consume(c *command, m persistence.Message, claim []persistence.Message) bool {
	mk := a.mark()
	msg := mailbox.FromStored(m)
	b, _ := json.Marshal(msg)
	e := a.record(persistence.Event{Kind: EventReceived, Name: c.recv.id, Ref: m.ID, Payload: b})
	a.pending.Consume = append(a.pending.Consume, m.Seq)
	a.consumed[m.Seq] = true
	if len(a.prefetched) > 0 {
		// Served from the list, or taken from a store read (a receive
		// without the channel filter): not to be served again.
		a.prefetched = slices.DeleteFunc(a.prefetched, func(p persistence.Message) bool { return p.Seq == m.Seq })
	}
	if c.recv.waiting && c.recv.stored {
		a.pending.CancelTimers = append(a.pending.CancelTimers, c.recv.id)
	}
	if m.Target == "" {
		for _, cm := range claim {
			a.pending.Claim = append(a.pending.Claim, cm.Seq)
		}
		res, err := a.commitResult()
		if err != nil {
			if errors.Is(err, persistence.ErrMessageGone) {
				a.restore(mk)
				return false
			}
			a.fail(err)
		}
		a.keepClaimed(claim, res.Claimed)
	}
	a.apply(c, e)
	// Reported once the consume commits (a competing one has).
	a.hookOnCommit(HookEvent{Kind: HookMessageConsumed, Name: msg.Channel, Ref: msg.ID})
	return true
}

// keepClaimed adds the messages of claim that the store moved (claimed, by
// seq) to the prefetched ones, now addressed to this instance.
func (a *activation) keepClaimed(claim []persistence.Message, claimed []int64) {
	if len(claimed) == 0 {
		return
	}
	got := make(map[int64]bool, len(claimed))
	for _, seq := range claimed {
		got[seq] = true
	}
	for _, m := range claim {
		if got[m.Seq] {
			m.Target = a.id
			a.prefetched = append(a.prefetched, m)
		}
	}
}

// receiveTimeouts starts the timeout of waited-for receives that found
// nothing, and ends those whose time has passed. It reports whether one ended.
func (a *activation) receiveTimeouts(recv []*command) bool {
	now := a.env.now()
	for _, c := range recv {
		r := c.recv
		if c.Done() || r.timeout <= 0 {
			continue
		}
		if !r.waiting {
			rec := timerRecord{Due: now.Add(r.timeout), Stored: true}
			b, _ := json.Marshal(rec)
			e := a.record(persistence.Event{Kind: EventReceiveWait, Name: r.id, Payload: b})
			a.pending.AddTimers = append(a.pending.AddTimers, persistence.Timer{ID: r.id, Due: rec.Due})
			a.apply(c, e)
		}
		if !now.Before(r.due) {
			e := a.record(persistence.Event{Kind: EventReceiveTimeout, Name: r.id})
			if r.stored && !a.dropPendingTimer(r.id) {
				a.pending.FireTimers = append(a.pending.FireTimers, r.id)
			}
			a.apply(c, e)
			return true
		}
	}
	return false
}

// selection is how this consumer picks among the messages of a mailbox
// read: it skips what its pending step consumed, takes its prefetch, and
// rotates among competing candidates by its ID and its picks so far.
func (a *activation) selection() mailbox.Selection {
	return mailbox.Selection{
		Skip:     func(seq int64) bool { return a.consumed[seq] },
		Prefetch: func(ch string) int { return a.prefetch[ch] },
		Turn:     hashString(a.id) + uint32(a.spread) + 1,
	}
}

func hashString(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h >> 1
}
