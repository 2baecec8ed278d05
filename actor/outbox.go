package actor

import (
	"errors"
	"fmt"

	"github.com/nornlabs/norn/persistence"
)

// EventEmitted is the history kind of an outgoing event recorded in the
// outbox (Context.EmitEvent).
const EventEmitted = "emitted"

// EmitEvent records an outgoing event in the outbox, in the transaction of
// the step it belongs to: a step that fails emits nothing, a committed one
// is always relayed. It is the low-level call that package events builds
// CloudEvents on. id must be unique store-wide and is what sinks
// deduplicate on; empty means a deterministic ID derived from the instance
// ("<instance>/emit:N", "<instance>/run:R/emit:N" after continue-as-new). typ names the event for listings; data is the
// encoded event. It returns the ID used.
func (c *Context) EmitEvent(id, typ string, data []byte) (string, error) {
	a := c.a
	call := a.nextID("emit")
	if id == "" {
		// The run number keeps IDs apart across continue-as-new, where
		// the call counters start over.
		id = a.id + "/" + call
		if a.inst.Run > 0 {
			id = fmt.Sprintf("%s/run:%d/%s", a.id, a.inst.Run, call)
		}
	}
	if err := validID("event ID", id); err != nil {
		return "", err
	}
	if err := a.env.checkPayload("event", data); err != nil {
		return "", err
	}
	e := a.immediate(EventEmitted, typ, digest(data), func() persistence.Event {
		a.pending.Emit = append(a.pending.Emit, persistence.OutboxEvent{ID: id, Instance: a.id, Type: typ, Data: data})
		return a.recordNow(persistence.Event{Kind: EventEmitted, Name: typ, Ref: id, Digest: digest(data)})
	})
	if e.Ref != id {
		a.nondet(e, fmt.Sprintf("emit of event %s", id))
	}
	return id, nil
}

// WatchOutbox returns a channel that is signalled (without blocking, so
// signals may merge) after each commit on this node that added outgoing
// events: relayers wait on it instead of polling. When the store is shared
// between processes and supports persistence.OutboxNotifier (PostgreSQL
// does), it is also signalled when another process commits outgoing
// events, so that a relayer on a node that emits nothing still relays at
// once; the first call starts listening. It is closed by Stop.
func (s *System) WatchOutbox() <-chan struct{} {
	ch := make(chan struct{}, 1)
	s.outboxMu.Lock()
	defer s.outboxMu.Unlock()
	if s.ctx.Err() != nil {
		close(ch)
		return ch
	}
	s.outboxCh = append(s.outboxCh, ch)
	if !s.outboxListening {
		// Under outboxMu and before Stop's cancel: Stop takes outboxMu
		// after cancelling, then waits for the background loops.
		s.outboxListening = true
		s.goBG(s.forwardOutbox)
	}
	return ch
}

// forwardOutbox passes the store's notifications of other processes'
// outgoing events on to the WatchOutbox channels, until Stop.
func (s *System) forwardOutbox() {
	ch, err := s.store.ListenOutbox(s.ctx)
	if err != nil {
		if !errors.Is(err, persistence.ErrUnsupported) && s.ctx.Err() == nil {
			s.log.Warn("cannot listen for other processes' outgoing events; relayers fall back to polling", "err", err)
		}
		return
	}
	for range ch {
		s.outboxSignal()
	}
}

func (s *System) outboxSignal() {
	s.outboxMu.Lock()
	for _, ch := range s.outboxCh {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	s.outboxMu.Unlock()
}

// closeOutboxWatchers ends WatchOutbox channels (at Stop).
func (s *System) closeOutboxWatchers() {
	s.outboxMu.Lock()
	for _, ch := range s.outboxCh {
		close(ch)
	}
	s.outboxCh = nil
	s.outboxMu.Unlock()
}

// Local returns a value the workflow code stored with SetLocal in this
// activation (nil if none). Locals are not durable: they are rebuilt by
// replay, so set them only from values that came out of durable calls
// (e.g. the trace context of a received event).
func (c *Context) Local(key any) any { return c.a.locals[key] }

// SetLocal stores an activation-local value (see Local).
func (c *Context) SetLocal(key, v any) {
	if c.a.locals == nil {
		c.a.locals = map[any]any{}
	}
	c.a.locals[key] = v
}
