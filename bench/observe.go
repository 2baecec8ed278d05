package main

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/metrics"
	"github.com/nornlabs/norn/tracing"
)

// observeHooks adds the hooks -observe names to h, so that a workload can
// be measured with metrics and traces on: "metrics", "tracing" (spans
// through an SDK provider to an exporter that drops them; a synchronous
// one, so that no goroutine outlives the run), "both", or "" for none.
func observeHooks(what string, h actor.Hooks) (actor.Hooks, error) {
	hs := []actor.Hooks{h}
	if what == "metrics" || what == "both" {
		m, err := metrics.New(metrics.Options{})
		if err != nil {
			return nil, err
		}
		hs = append(hs, m.Hooks())
	}
	if what == "tracing" || what == "both" {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(discard{}))
		hs = append(hs, tracing.New(tracing.Options{TracerProvider: tp}))
	}
	switch what {
	case "", "metrics", "tracing", "both":
	default:
		return nil, fmt.Errorf("unknown -observe %q (want metrics, tracing or both)", what)
	}
	return actor.MultiHooks(hs...), nil
}

// discard is a span exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }
