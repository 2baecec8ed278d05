package main

import (
	"context"
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/events"
)

// Order is what the order workflow handles.
type Order struct {
	ID    string `json:"id"`
	Item  string `json:"item"`
	Cents int    `json:"cents"`
}

// charge stands for the payment call (an activity: run once, recorded).
var charge = actor.Activity("charge", func(ctx context.Context, o Order) (string, error) {
	return "receipt-" + o.ID, nil
})

// orderFlow announces the order, charges it and announces the payment.
// Each events.Emit is recorded with the step it belongs to: had the
// workflow failed before that step committed, no event would go out; once
// it has committed, the event goes out even if this process dies first.
var orderFlow = actor.Workflow("order", func(ctx *actor.Context, o Order) (string, error) {
	if _, err := events.Emit(ctx, newEvent("com.example.order.placed", o.ID, o)); err != nil {
		return "", err
	}
	receipt, err := charge.Run(ctx, o)
	if err != nil {
		return "", err
	}
	paid := map[string]any{"order": o.ID, "receipt": receipt, "cents": o.Cents}
	if _, err := events.Emit(ctx, newEvent("com.example.order.paid", o.ID, paid)); err != nil {
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
