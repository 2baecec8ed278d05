package tracing_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence/sqlite"
	"github.com/nornlabs/norn/tracing"
)

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "norn-tracing-example-")
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "norn.db"), sqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer st.Close()

	// In a program: an OTLP exporter behind sdktrace.WithBatcher.
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))

	greet := actor.Activity("greet", func(ctx context.Context, name string) (string, error) {
		// The attempt's span: pass ctx on to traced clients.
		fmt.Println("activity traced:", trace.SpanContextFromContext(ctx).IsValid())
		return "hello " + name, nil
	})
	hello := actor.Workflow("hello", func(ctx *actor.Context, name string) (string, error) { return greet.Run(ctx, name) })
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(hello),
		Hooks: tracing.New(tracing.Options{TracerProvider: tp})})
	if err != nil {
		panic(err)
	}
	pid, _ := actor.Spawn(ctx, sys, hello, "ann")
	if _, err := actor.Await(ctx, sys, hello, pid); err != nil {
		panic(err)
	}
	_ = sys.Stop(ctx) // ends the activation, and with it the run span
	defer func() { _ = tp.Shutdown(ctx) }()

	for _, s := range exp.GetSpans() {
		fmt.Println(s.Name, "child of a run:", s.Parent.IsValid())
	}
	// Output:
	// activity traced: true
	// activity greet child of a run: true
	// workflow hello child of a run: false
}
