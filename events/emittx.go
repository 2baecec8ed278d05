package events

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/nornlabs/norn/actor"
)

// EmitTx sends a CloudEvent from inside a transactional activity
// (actor.TxActivity), through the outbox, in the transaction that records
// the activity's result: it is relayed if and only if the activity's
// writes and result commit (the transactional outbox). A failed attempt's
// events are dropped with its writes. It returns the event's ID, or an
// error matching actor.ErrNotTransactional outside a transactional
// activity.
//
// It completes the event as Emit does, except that an empty time becomes
// the current time (activity code is not replayed: only the committed
// attempt's event is kept) and an empty ID becomes
// "<instance>/<activity ID>/emit:N" (see actor.EmitTx). WithEventID sets
// an explicit ID. The event's type is required; an invalid event is
// refused with an error matching actor.ErrInvalidInput.
func EmitTx(ctx context.Context, e event.Event, opts ...EmitOption) (string, error) {
	info, ok := actor.Info(ctx)
	if !ok {
		return "", actor.ErrNotTransactional
	}
	ev, err := outgoing(e, opts, info.InstanceID, "")
	if err != nil {
		return "", err
	}
	if ev.Time().IsZero() {
		ev.SetTime(time.Now())
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return "", fmt.Errorf("%w: events: emit %q: encode: %v", actor.ErrInvalidInput, ev.Type(), err)
	}
	return actor.EmitTx(ctx, ev.ID(), ev.Type(), data)
}
