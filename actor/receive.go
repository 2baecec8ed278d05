package actor

import (
	"encoding/json"
	"errors"
	"fmt"
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
// first message matches) reads a few rows, not the whole queue.
const mailboxPage = 32

// mailboxScanMax caps one scan.
const mailboxScanMax = 1 << 20

// competingSpread is how many waiting competing messages a consumer chooses
// among, so that parallel consumers do not all race for the first one.
const competingSpread = 8

// Receive consumes the first message in the mailbox (arrival order) that
// matches every filter, waiting for one if there is none. Non-matching
// messages stay, in order. With mailbox.Timeout it returns ErrTimeout when
// the time passes first; the timeout is a durable timer.
//
// A payload that does not decode as T is still consumed and recorded (so
// nothing is lost and replay agrees): Receive returns a *DecodeError holding
// the raw message.
func Receive[T any](ctx *Context, filters ...mailbox.Filter) (Received[T], error) {
	a := ctx.a
	spec := mailbox.NewSpec(filters...)
	id := a.nextID("receive")
	var rec timerRecord
	waiting := false
	if e, ok := a.peek(); ok && e.Kind == evReceiveWait && e.Name == id {
		a.pos++
		if err := json.Unmarshal(e.Payload, &rec); err != nil {
			panic(infraPanic{err: fmt.Errorf("recorded receive timeout: %w", err)})
		}
		waiting = true
	}
	if e, ok := a.peek(); ok {
		switch {
		case e.Kind == evReceived && e.Name == id:
			a.pos++
			var m mailbox.Message
			if err := json.Unmarshal(e.Payload, &m); err != nil {
				panic(infraPanic{err: fmt.Errorf("recorded message: %w", err)})
			}
			if !spec.Matches(m) {
				panic(&NonDeterminismError{Seq: e.Seq, Expected: "received " + m.ID, Got: "a receive whose filters reject it"})
			}
			return decodeMessage[T](m)
		case e.Kind == evReceiveTimeout && e.Name == id:
			a.pos++
			return Received[T]{}, ErrTimeout
		case e.Kind == evLinkedExit && e.Name == id:
			a.pos++
			var d mailbox.Down
			_ = json.Unmarshal(e.Payload, &d)
			panic(&linkedExit{child: string(d.PID), reason: d.Error})
		default:
			panic(&NonDeterminismError{Seq: e.Seq, Expected: e.Kind + " " + e.Name, Got: "receive " + id})
		}
	}
	if a.isCancelled() {
		return Received[T]{}, ErrCancelled
	}
	for {
		m, ok := a.scan(id, spec)
		if ok {
			mark := a.mark()
			msg := mailbox.FromStored(m)
			b, _ := json.Marshal(msg)
			a.record(persistence.Event{Kind: evReceived, Name: id, Ref: m.ID, Payload: b})
			a.pending.Consume = append(a.pending.Consume, m.Seq)
			a.consumed[m.Seq] = true
			if waiting && rec.Stored {
				a.pending.CancelTimers = append(a.pending.CancelTimers, id)
			}
			if m.Target == "" {
				// A competing message is ours only once the claim commits.
				if err := a.commit(); err != nil {
					if errorsIsGone(err) {
						a.restore(mark)
						continue
					}
					a.fail(err)
				}
			}
			a.hook(HookEvent{Kind: HookMessageConsumed, Name: msg.Channel, Ref: msg.ID})
			return decodeMessage[T](msg)
		}
		if spec.Timeout > 0 {
			now := time.Now()
			if !waiting {
				rec = timerRecord{Due: now.Add(spec.Timeout), Stored: true}
				b, _ := json.Marshal(rec)
				a.record(persistence.Event{Kind: evReceiveWait, Name: id, Payload: b})
				a.pending.AddTimers = append(a.pending.AddTimers, persistence.Timer{ID: id, Due: rec.Due})
				waiting = true
			}
			if !now.Before(rec.Due) {
				a.record(persistence.Event{Kind: evReceiveTimeout, Name: id})
				if rec.Stored {
					a.pending.FireTimers = append(a.pending.FireTimers, id)
				}
				return Received[T]{}, ErrTimeout
			}
		}
		if err := a.park(); err != nil {
			return Received[T]{}, err
		}
	}
}

// scan reads the mailbox page by growing page until a message matches or
// the whole mailbox has been seen.
func (a *activation) scan(recvID string, spec mailbox.Spec) (persistence.Message, bool) {
	for limit := mailboxPage; ; limit *= 8 {
		msgs, err := a.sys.store.Mailbox(a.sys.ctx, a.id, limit)
		if err != nil {
			a.fail(err)
		}
		a.checkLinks(recvID, spec, msgs)
		if m, ok := a.pick(spec, msgs); ok {
			return m, true
		}
		if len(msgs) < limit || limit >= mailboxScanMax {
			return persistence.Message{}, false
		}
	}
}

// pick chooses the message to consume: the first match in arrival order,
// except that among waiting competing messages it takes one of the first few
// so that parallel consumers spread out instead of racing for one row.
func (a *activation) pick(spec mailbox.Spec, msgs []persistence.Message) (persistence.Message, bool) {
	var cands []persistence.Message
	for _, m := range msgs {
		if a.consumed[m.Seq] || !spec.Matches(mailbox.FromStored(m)) {
			continue
		}
		if m.Target != "" && len(cands) == 0 {
			return m, true
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
		return persistence.Message{}, false
	}
	a.spread++
	return cands[(int(hashString(a.id))+a.spread)%len(cands)], true
}

func hashString(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h >> 1
}

func decodeMessage[T any](m mailbox.Message) (Received[T], error) {
	v, err := decode[T](m.Payload)
	if err != nil {
		return Received[T]{Message: m}, &DecodeError{MessageID: m.ID, Type: typeName[T](), Message: m.Payload, Err: err}
	}
	return Received[T]{Message: m, Value: v}, nil
}

func errorsIsGone(err error) bool { return errors.Is(err, persistence.ErrMessageGone) }
