package events

import (
	"fmt"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
)

// WaitOption narrows or bounds a Wait.
type WaitOption func(*waitConfig)

type waitConfig struct {
	filters []mailbox.Filter
}

// Timeout makes Wait give up after d with actor.ErrTimeout (a durable
// timer, as mailbox.Timeout).
func Timeout(d time.Duration) WaitOption {
	return func(c *waitConfig) { c.filters = append(c.filters, mailbox.Timeout(d)) }
}

// WithSubject takes only events with this subject (correlation: the order
// an event is about, …).
func WithSubject(subject string) WaitOption {
	return func(c *waitConfig) {
		c.filters = append(c.filters, mailbox.Match(func(m mailbox.Message) bool { return m.Metadata[MetaSubject] == subject }))
	}
}

// WithSource takes only events from this source.
func WithSource(source string) WaitOption {
	return func(c *waitConfig) {
		c.filters = append(c.filters, mailbox.Match(func(m mailbox.Message) bool { return m.Metadata[MetaSource] == source }))
	}
}

// Subscribe subscribes the instance to the events of eventType: the
// channel named by the type, in mode mailbox.Broadcast (every subscriber
// gets every event published after it subscribed) or mailbox.Competing
// (each event goes to one subscriber; events published while nobody was
// subscribed wait in the channel's queue, see actor.Config.QueueRetention).
// It is ctx.Subscribe(eventType, mode).
func Subscribe(ctx *actor.Context, eventType string, mode mailbox.Mode) error {
	return ctx.Subscribe(eventType, mode)
}

// Wait takes the next event of eventType from the instance's mailbox,
// waiting for one if there is none, and returns it with its data decoded
// as T (see Event). It is a durable receive: the event is consumed once,
// and replay returns the same event.
//
// Events reach the mailbox in two ways: published on the type's channel,
// which the instance must have subscribed to first (Subscribe, or
// ctx.Subscribe(eventType, …)), or addressed to the instance with the
// norninstance extension, which needs no subscription.
//
// With Timeout it returns actor.ErrTimeout when the time passes first.
// Data that does not decode as T gives the event (attributes set) and a
// *DataError; the event is consumed all the same. Wait keeps the event's
// traceparent for TraceParent.
func Wait[T any](ctx *actor.Context, eventType string, opts ...WaitOption) (Event[T], error) {
	var cfg waitConfig
	for _, o := range opts {
		o(&cfg)
	}
	filters := append([]mailbox.Filter{mailbox.Match(func(m mailbox.Message) bool {
		return m.Type == MessageType && m.Metadata[MetaType] == eventType && (m.Channel == eventType || m.Channel == "")
	})}, cfg.filters...)
	r, err := actor.Receive[[]byte](ctx, filters...)
	if err != nil {
		return Event[T]{}, err
	}
	ev, perr := parseEvent(r.Payload)
	if perr != nil {
		return Event[T]{}, fmt.Errorf("events: message %s is not a readable event: %w", r.ID, perr)
	}
	var out Event[T]
	err = out.setEvent(ev)
	if tp := out.TraceParent(); tp != "" {
		// An event without a trace context does not end the trace the
		// workflow is in.
		ctx.SetLocal(TraceParentKey{}, tp)
	}
	return out, err
}

// TraceParent is the W3C traceparent of the last event the workflow took
// (Wait, or Adopt) that carried one: the trace an outgoing event should
// continue. It is "" before any. The value is rebuilt by replay, so it is
// the same after a restart.
func TraceParent(ctx *actor.Context) string {
	s, _ := ctx.Local(TraceParentKey{}).(string)
	return s
}

// Adopt makes e the event the workflow continues from, for TraceParent: a
// workflow started by Handle with an Event[T] input calls it first.
func Adopt[T any](ctx *actor.Context, e Event[T]) {
	ctx.SetLocal(TraceParentKey{}, e.TraceParent())
}
