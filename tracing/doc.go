// Package tracing turns a Norn node's hook events into OpenTelemetry
// spans. It is a package of its own so that programs that do not trace do
// not link OpenTelemetry.
//
// Each activation of an instance is one span ("workflow NAME"), from the
// moment an activation takes the instance until it stops (the instance
// ended, passivated, was handed over or lost, or the node stopped); a
// crash ends it with the error and the restart opens the next one. Each
// activity attempt is a child span ("activity NAME") with the instance ID,
// workflow, activity name, activity ID and attempt number as attributes;
// a failed attempt records its error. The attempt's context.Context
// carries its span, so an activity that calls other traced services (with
// OpenTelemetry's HTTP or gRPC instrumentation, say) continues the trace.
// Messages, timers, retries and passivation are events on the run span.
//
// Replays of history are not traced: hooks see live work only.
//
//	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter))
//	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: wfs,
//		Hooks: actor.MultiHooks(tracing.New(tracing.Options{TracerProvider: tp}), m.Hooks())})
//
//	var charge = actor.Activity("charge", func(ctx context.Context, o Order) (Receipt, error) {
//		req, _ := http.NewRequestWithContext(ctx, "POST", url, body) // the span travels with ctx
//		...
//	})
package tracing
