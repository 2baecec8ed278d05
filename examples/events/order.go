package main

import (
	"context"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/events"
)

// Order is the data of an order.placed event.
type Order struct {
	ID    string `json:"id"`
	Item  string `json:"item"`
	Cents int    `json:"cents"`
}

// Payment is the data of the payment.received event that follows it.
type Payment struct {
	Order string `json:"order"`
	Cents int    `json:"cents"`
}

// charge stands for the booking of the payment (an activity: run once, recorded).
var charge = actor.Activity("charge", func(ctx context.Context, p Payment) (string, error) {
	return "receipt-" + p.Order, nil
})

// checkout is started by every order.placed event that reaches the ingress
// (events.Handle), with the whole event as its input. It announces the
// order, waits for the payment event addressed to it, books it and
// announces the payment. Each events.Emit is recorded with the step it
// belongs to: had the workflow failed before that step committed, no event
// would go out; once it has committed, the event goes out even if this
// process dies first.
var checkout = actor.Workflow("checkout", func(ctx *actor.Context, placed events.Event[Order]) (string, error) {
	events.Adopt(ctx, placed) // its trace context goes out on what we emit
	o := placed.Data
	if _, err := events.Emit(ctx, newEvent("com.example.order.accepted", o.ID, o)); err != nil {
		return "", err
	}
	paid, err := events.Wait[Payment](ctx, "com.example.payment.received", events.Timeout(time.Minute))
	if err != nil {
		return "", err
	}
	receipt, err := charge.Run(ctx, paid.Data)
	if err != nil {
		return "", err
	}
	done := map[string]any{"order": o.ID, "receipt": receipt, "cents": paid.Data.Cents}
	if _, err := events.Emit(ctx, newEvent("com.example.order.paid", o.ID, done)); err != nil {
		return "", err
	}
	return receipt, nil
})

// newEvent is a CloudEvent with a JSON payload. ID, source and time are
// left to Emit: a deterministic ID, norn://<instance> and the recorded
// time of the call.
func newEvent(typ, subject string, data any) event.Event {
	e := event.New()
	e.SetType(typ)
	e.SetSubject(subject)
	if err := e.SetData(event.ApplicationJSON, data); err != nil {
		panic(fmt.Sprintf("encode %s: %v", typ, err)) // plain structs always encode
	}
	return e
}
