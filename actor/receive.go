package actor

import (
	"encoding/json"
	"errors"
	"time"

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
const mailboxPage = competingSpread

// mailboxScanMax caps one scan.
const mailboxScanMax = 1 << 20

// competingSpread is how many waiting competing messages a consumer chooses
// among, so that parallel consumers do not all race for the first one.
const competingSpread = 8

// receiveCall is the live state of one receive.
type receiveCall struct {
	id      string
	spec    mailbox.Spec
	typ     string // message type T matches ("" matches any)
	timeout time.Duration
	waiting bool // a receive_wait is recorded: the timeout runs
	due     time.Time
	stored  bool
}

func (r *receiveCall) advance(a *activation, e persistence.Event) {
	var rec timerRecord
	if err := json.Unmarshal(e.Payload, &rec); err != nil {
		a.nondet(e, "receive wait (unreadable record)")
	}
	r.waiting, r.due, r.stored = true, rec.Due, rec.Stored
}

// matches applies the receive's type and filters to a stored message.
func (r *receiveCall) matches(m mailbox.Message) bool {
	if r.typ != "" && m.Type != "" && m.Type != r.typ {
		return false
	}
	return r.spec.Matches(m)
}

// Receive consumes the first message in the mailbox (arrival order) whose
// type is T and that matches every filter, waiting for one if there is none.
// Messages of other types, and those the filters reject, stay in the
// mailbox in order. With mailbox.Timeout it returns ErrTimeout when the time
// passes first; the timeout is a durable timer.
//
// T = []byte (or an interface type) matches a message of any type: the
// router's receive, with the raw payload and Message.Type. A message stored
// without a type (raw bytes) matches every T. A payload of the right type
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
	r := &receiveCall{id: id, spec: spec, typ: typeNameFor[T](), timeout: spec.Timeout}
	c := &command{key: "r:" + id, recv: r}
	c.resolve = func(e persistence.Event) (any, error) {
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
		v, err := decodeWith[T](a.sys.codec, m.Payload)
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
	for limit := mailboxPage; ; limit *= 8 {
		msgs, err := a.sys.store.Mailbox(a.sys.ctx, a.id, limit)
		if err != nil {
			a.fail(err)
		}
		a.checkLinks(recv, msgs)
		for _, c := range recv {
			if c.done {
				continue
			}
			m, more, ok := a.pick(c.recv, msgs)
			if !ok {
				continue
			}
			if a.consume(c, m) {
				if more {
					// More waiting than this consumer takes: wake the next.
					a.sys.chainQueued(a, m.Channel)
				}
				return true
			}
			// A competing message another consumer took first: look again.
			return a.scanMail(recv)
		}
		if len(msgs) < limit || limit >= mailboxScanMax {
			return false
		}
	}
}

// consume records the receive of m by c. A competing message is ours only
// once the claim commits; it reports false if another consumer won.
func (a *activation) consume(c *command, m persistence.Message) bool {
	mk := a.mark()
	msg := mailbox.FromStored(m)
	b, _ := json.Marshal(msg)
	a.record(persistence.Event{Kind: EventReceived, Name: c.recv.id, Ref: m.ID, Payload: b})
	a.pending.Consume = append(a.pending.Consume, m.Seq)
	a.consumed[m.Seq] = true
	if c.recv.waiting && c.recv.stored {
		a.pending.CancelTimers = append(a.pending.CancelTimers, c.recv.id)
	}
	if m.Target == "" {
		if err := a.commit(); err != nil {
			if errors.Is(err, persistence.ErrMessageGone) {
				a.restore(mk)
				return false
			}
			a.fail(err)
		}
		// The commit emptied pending: resolve from the event as recorded.
		a.apply(c, persistence.Event{Kind: EventReceived, Name: c.recv.id, Ref: m.ID, Payload: b})
	} else {
		a.apply(c, a.pending.History[len(a.pending.History)-1])
	}
	a.hook(HookEvent{Kind: HookMessageConsumed, Name: msg.Channel, Ref: msg.ID})
	return true
}

// receiveTimeouts starts the timeout of waited-for receives that found
// nothing, and ends those whose time has passed. It reports whether one ended.
func (a *activation) receiveTimeouts(recv []*command) bool {
	now := time.Now()
	for _, c := range recv {
		r := c.recv
		if c.done || r.timeout <= 0 {
			continue
		}
		if !r.waiting {
			rec := timerRecord{Due: now.Add(r.timeout), Stored: true}
			b, _ := json.Marshal(rec)
			a.record(persistence.Event{Kind: EventReceiveWait, Name: r.id, Payload: b})
			a.pending.AddTimers = append(a.pending.AddTimers, persistence.Timer{ID: r.id, Due: rec.Due})
			r.advance(a, a.pending.History[len(a.pending.History)-1])
		}
		if !now.Before(r.due) {
			a.record(persistence.Event{Kind: EventReceiveTimeout, Name: r.id})
			if r.stored && !a.dropPendingTimer(r.id) {
				a.pending.FireTimers = append(a.pending.FireTimers, r.id)
			}
			a.apply(c, a.pending.History[len(a.pending.History)-1])
			return true
		}
	}
	return false
}

// pick chooses the message to consume: the first match in arrival order,
// except that among waiting competing messages it takes one of the first few
// so that parallel consumers spread out instead of racing for one row. more
// says that other competing messages it would take wait as well.
func (a *activation) pick(r *receiveCall, msgs []persistence.Message) (m persistence.Message, more, ok bool) {
	var cands []persistence.Message
	for _, m := range msgs {
		if a.consumed[m.Seq] || !r.matches(mailbox.FromStored(m)) {
			continue
		}
		if m.Target != "" && len(cands) == 0 {
			return m, false, true
		}
		if m.Target != "" {
			break
		}
		cands = append(cands, m)
		if len(cands) == competingSpread {
			break
		}
	}
	if len(cands) == 0 {
		return persistence.Message{}, false, false
	}
	a.spread++
	return cands[(int(hashString(a.id))+a.spread)%len(cands)], len(cands) > 1, true
}

func hashString(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h >> 1
}
