package events

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/nornlabs/norn/actor"
)

// TraceParentKey is the activation-local key (actor.Context.SetLocal)
// under which the code that hands an incoming event to a workflow stores
// its W3C trace context, as the string value of a "traceparent" header.
// Emit copies it into every event the workflow emits that has no
// traceparent extension of its own, so that a trace follows an event
// through the workflow into the events it causes. Locals are rebuilt by
// replay, so set it only from a value that came out of a durable call (the
// received event).
type TraceParentKey struct{}

// traceParentExt is the CloudEvents distributed-tracing extension.
const traceParentExt = "traceparent"

// EmitOption configures one Emit.
type EmitOption func(*emitConfig)

type emitConfig struct {
	id string
}

// WithEventID sets the emitted event's ID, replacing the event's own. The
// ID is what sinks deduplicate on, and it must be unique in the whole
// store, not only per source: an ID that was emitted before is not emitted
// again. Derive it from the instance ID and something deterministic (an
// order number), never from a random value or the clock: the call is
// checked against history on replay. Without an ID (neither this option
// nor event.SetID), Emit uses a deterministic one made from the instance ID
// and the call's position in the workflow.
func WithEventID(id string) EmitOption {
	return func(c *emitConfig) { c.id = id }
}

// Emit sends a CloudEvent from inside a workflow, through the outbox: the
// event is recorded with the call in the workflow's history, in the
// transaction of the workflow's current step, so that it is relayed (by a
// Relayer) if and only if that step commits, and then at least once,
// however often the process or the sink fails. It returns the event's ID.
//
// A step commits at the workflow's next durable wait (Receive, Sleep, an
// activity …) and at its end, whatever the end: an event emitted before
// the workflow returns an error is sent, committed with the failure (or,
// in a saga, with the step that starts the compensations), just as one
// emitted before it completes or is cancelled. Only a panic, a crash or a
// failed commit drops the steps since the last commit and their events: the
// workflow runs again from history and emits them again, under the same
// IDs, or, past its restart budget, ends failed without them.
//
// A returned error keeps its events because they are part of the failed
// run's recorded history: Retry resumes from that history without emitting
// again, so an event dropped at the failure would be lost for good when
// the retried run succeeds; and the failure path is where a workflow
// announces its failure (emit "order.failed", then return the error). So
// emit an event that announces success only once the work it announces
// has succeeded, and take back one already sent with an event of its own
// in the failure path or in a compensation.
//
// Emit completes the event before recording it: specversion becomes 1.0;
// an empty source becomes "norn://<instance ID>"; an empty time becomes
// ctx.Now(); without a traceparent extension, the activation's trace
// context (see TraceParentKey) is added if it has one; an empty ID is
// filled in as WithEventID describes (the recorded event, OutboxRecord.Data,
// then has an empty id: the record's ID is the event's, and the Relayer
// puts it in before sending). The event's type is required. An
// event that is still not a valid CloudEvent is refused with an error
// matching actor.ErrInvalidInput, and nothing is recorded.
//
// The completed event is part of the workflow's history, so its content
// must be the same on every replay: build it only from the workflow's
// input and the results of durable calls. The relayer sends exactly the
// recorded event, so retries carry the same ID, time and data.
func Emit(ctx *actor.Context, e event.Event, opts ...EmitOption) (string, error) {
	tp, _ := ctx.Local(TraceParentKey{}).(string)
	ev, err := outgoing(e, opts, ctx.InstanceID(), tp)
	if err != nil {
		return "", err
	}
	// Validated before the Now call, so that a refused event leaves no
	// trace in history (a fixed event is then not a changed call).
	if ev.Time().IsZero() {
		ev.SetTime(ctx.Now())
	}
	// Without an ID the event is stored with an empty one and the outbox
	// record's ID (EmitEvent's deterministic default) is the event's ID:
	// the relayer puts it in before sending. Emit cannot know that default
	// in advance, and a guessed one would not survive a restart.
	data, err := json.Marshal(ev)
	if err != nil {
		return "", fmt.Errorf("%w: events: emit %q: encode: %v", actor.ErrInvalidInput, ev.Type(), err)
	}
	return ctx.EmitEvent(ev.ID(), ev.Type(), data)
}

// outgoing is e as the outbox records it, for Emit and EmitTx: a CloudEvent
// 1.0 with the options' ID, a source naming the instance unless e has one,
// and traceparent (when not empty) unless e carries one; refused with
// ErrInvalidInput if it is still not a valid event (but for its ID, which
// the outbox assigns, and its time, which the caller sets).
func outgoing(e event.Event, opts []EmitOption, instance, traceparent string) (event.Event, error) {
	var cfg emitConfig
	for _, o := range opts {
		o(&cfg)
	}
	var ev event.Event
	if e.Context == nil {
		// A zero Event, as from event.Event{}: give it a context first.
		ev = event.Event{DataEncoded: append([]byte(nil), e.DataEncoded...), DataBase64: e.DataBase64}
		ev.SetSpecVersion(event.CloudEventsVersionV1)
	} else {
		ev = e.Clone()
		if ev.SpecVersion() != event.CloudEventsVersionV1 {
			ev.SetSpecVersion(event.CloudEventsVersionV1)
		}
	}
	if len(ev.FieldErrors) > 0 {
		// A setter refused a value (say, a source that is no URI): the
		// defaults below must not paper over it.
		return ev, fmt.Errorf("%w: events: emit %q: %s", actor.ErrInvalidInput, ev.Type(), validationText(event.ValidationError(ev.FieldErrors)))
	}
	if cfg.id != "" {
		ev.SetID(cfg.id)
	}
	if ev.Source() == "" {
		ev.SetSource(defaultSource(instance))
	}
	if _, ok := ev.Extensions()[traceParentExt]; !ok && traceparent != "" {
		ev.SetExtension(traceParentExt, traceparent)
	}
	check := ev.Clone()
	if check.ID() == "" {
		check.SetID("placeholder") // the outbox assigns it
	}
	if err := check.Validate(); err != nil {
		return ev, fmt.Errorf("%w: events: emit %q: %s", actor.ErrInvalidInput, ev.Type(), validationText(err))
	}
	return ev, nil
}

// defaultSource is "norn://<id>" when that is a URI reference naming the
// instance as written, and "norn:///<escaped id>" otherwise (IDs with
// spaces, colons or other characters a URI host cannot hold).
func defaultSource(id string) string {
	s := "norn://" + id
	if u, err := url.Parse(s); err == nil && u.Host+u.Path == id && u.RawQuery == "" && u.Fragment == "" && u.User == nil {
		return s
	}
	return "norn:///" + url.PathEscape(id)
}

// validationText renders a CloudEvents validation error on one line, with
// its fields in a stable order (the SDK's own text follows map order).
func validationText(err error) string {
	verr, ok := err.(event.ValidationError)
	if !ok {
		return err.Error()
	}
	parts := make([]string, 0, len(verr))
	for field, e := range verr {
		parts = append(parts, field+": "+e.Error())
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
