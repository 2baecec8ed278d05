package tracing

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/nornlabs/norn/actor"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/nornlabs/norn/tracing"

// Span attribute keys.
const (
	AttrInstance   = attribute.Key("norn.instance.id")
	AttrWorkflow   = attribute.Key("norn.workflow")
	AttrStatus     = attribute.Key("norn.status") // how the instance ended: completed, failed, cancelled
	AttrActivity   = attribute.Key("norn.activity")
	AttrActivityID = attribute.Key("norn.activity.id")
	AttrAttempt    = attribute.Key("norn.activity.attempt")
)

// Options configure Hooks. The zero value is usable.
type Options struct {
	// TracerProvider creates the tracer. Default: otel.GetTracerProvider()
	// at the time New is called.
	TracerProvider trace.TracerProvider
}

// Hooks turns a node's hook events into spans. Create it with New and give
// it to actor.Config.Hooks (with actor.MultiHooks to keep other hooks).
type Hooks struct {
	tracer trace.Tracer

	mu   sync.Mutex
	runs map[string]trace.Span // instance → span of its current activation
}

var (
	_ actor.Hooks             = (*Hooks)(nil)
	_ actor.ActivityContexter = (*Hooks)(nil)
)

// New creates the hooks.
func New(o Options) *Hooks {
	tp := o.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Hooks{tracer: tp.Tracer(ScopeName), runs: map[string]trace.Span{}}
}

// spanKey holds this adapter's activity span in the attempt's context, so
// that the attempt's end finds it even if another hook put a span of its
// own into the context after it.
type spanKey struct{}

// ActivityContext starts the span of an activity attempt, a child of its
// instance's run span, and returns the attempt's context carrying it:
// whatever the activity calls with that context continues the trace.
func (h *Hooks) ActivityContext(ctx context.Context, e actor.HookEvent) context.Context {
	parent := ctx
	if run := h.run(e.Instance); run != nil {
		parent = trace.ContextWithSpan(ctx, run)
	}
	ctx, span := h.tracer.Start(parent, "activity "+e.Name, trace.WithTimestamp(e.At),
		trace.WithAttributes(AttrInstance.String(e.Instance), AttrWorkflow.String(e.Workflow),
			AttrActivity.String(e.Name), AttrActivityID.String(e.Ref), AttrAttempt.Int(e.Attempt)))
	return context.WithValue(ctx, spanKey{}, span)
}

// Observe implements actor.Hooks.
func (h *Hooks) Observe(ctx context.Context, e actor.HookEvent) {
	switch e.Kind {
	case actor.HookInstanceActivated:
		// A new trace for each activation: it is not the continuation of
		// whatever the node's own context carries.
		_, span := h.tracer.Start(context.Background(), "workflow "+e.Workflow, trace.WithNewRoot(),
			trace.WithTimestamp(e.At), trace.WithAttributes(AttrInstance.String(e.Instance), AttrWorkflow.String(e.Workflow)))
		h.mu.Lock()
		prev := h.runs[e.Instance]
		h.runs[e.Instance] = span
		h.mu.Unlock()
		if prev != nil {
			prev.End(trace.WithTimestamp(e.At))
		}
	case actor.HookInstanceStopped:
		h.end(e, nil)
	case actor.HookInstanceRestarted:
		// The activation crashed; the restart is a new run span.
		h.end(e, func(s trace.Span) {
			s.RecordError(e.Err, trace.WithTimestamp(e.At))
			s.SetStatus(codes.Error, "restarted: "+errText(e.Err))
		})
	case actor.HookInstanceCompleted:
		h.annotate(e.Instance, func(s trace.Span) { s.SetAttributes(AttrStatus.String("completed")) })
	case actor.HookInstanceFailed:
		h.annotate(e.Instance, func(s trace.Span) {
			s.SetAttributes(AttrStatus.String("failed"))
			s.RecordError(e.Err, trace.WithTimestamp(e.At))
			s.SetStatus(codes.Error, errText(e.Err))
		})
	case actor.HookInstanceCancelled:
		h.annotate(e.Instance, func(s trace.Span) { s.SetAttributes(AttrStatus.String("cancelled")) })
	case actor.HookInstancePassivated, actor.HookInstanceLost:
		h.annotate(e.Instance, func(s trace.Span) { s.AddEvent(string(e.Kind), trace.WithTimestamp(e.At)) })
	case actor.HookActivityRetried:
		h.annotate(e.Instance, func(s trace.Span) {
			s.AddEvent(string(e.Kind), trace.WithTimestamp(e.At), trace.WithAttributes(AttrActivity.String(e.Name),
				AttrActivityID.String(e.Ref), AttrAttempt.Int(e.Attempt), attribute.String("norn.backoff", e.Duration.String())))
		})
	case actor.HookActivityFailed, actor.HookCompensationFailed:
		h.annotate(e.Instance, func(s trace.Span) {
			s.AddEvent(string(e.Kind), trace.WithTimestamp(e.At), trace.WithAttributes(AttrActivity.String(e.Name),
				AttrActivityID.String(e.Ref), attribute.String("error", errText(e.Err))))
		})
	case actor.HookMessageSent, actor.HookMessageConsumed, actor.HookTimerFired:
		h.annotate(e.Instance, func(s trace.Span) {
			s.AddEvent(string(e.Kind), trace.WithTimestamp(e.At), trace.WithAttributes(attribute.String("norn.name", e.Name),
				attribute.String("norn.ref", e.Ref)))
		})
	case actor.HookActivityAbandoned:
		if s, ok := ctx.Value(spanKey{}).(trace.Span); ok {
			s.AddEvent(string(e.Kind), trace.WithTimestamp(e.At))
		}
	case actor.HookActivityFinished:
		s, ok := ctx.Value(spanKey{}).(trace.Span)
		if !ok {
			return
		}
		if e.Err != nil {
			s.RecordError(e.Err, trace.WithTimestamp(e.At))
			s.SetStatus(codes.Error, errText(e.Err))
		}
		s.End(trace.WithTimestamp(e.At))
	}
}

func (h *Hooks) run(instance string) trace.Span {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[instance]
}

// annotate applies fn to the instance's run span, if it has one here.
func (h *Hooks) annotate(instance string, fn func(trace.Span)) {
	if s := h.run(instance); s != nil {
		fn(s)
	}
}

// end ends the instance's run span, after fn if not nil.
func (h *Hooks) end(e actor.HookEvent, fn func(trace.Span)) {
	h.mu.Lock()
	s := h.runs[e.Instance]
	delete(h.runs, e.Instance)
	h.mu.Unlock()
	if s == nil {
		return
	}
	if fn != nil {
		fn(s)
	}
	s.End(trace.WithTimestamp(e.At))
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
