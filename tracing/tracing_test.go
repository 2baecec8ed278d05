package tracing_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/supervisor"
	"github.com/nornlabs/norn/tracing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	for _, e := range s.Events() {
		if e.Name == name {
			return true
		}
	}
	return false
}

// TestSpansPerRunAndAttempt runs a workflow whose activity fails once and
// then calls an HTTP service with the trace context, and one whose
// activity fails for good; the in-memory recorder must hold a run span per
// instance and an activity span per attempt, children of the run span,
// with the attributes and errors, and the service must see the attempt's
// span as its parent.
func TestSpansPerRunAndAttempt(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	// The downstream service: records the parent span the request carried.
	var mu sync.Mutex
	var remoteParents []trace.SpanContext
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		mu.Lock()
		remoteParents = append(remoteParents, trace.SpanContextFromContext(ctx))
		mu.Unlock()
	}))
	defer svc.Close()

	var seen []trace.SpanContext // the span context each attempt's ctx carried
	charge := actor.Activity("charge", func(ctx context.Context, n int) (int, error) {
		mu.Lock()
		seen = append(seen, trace.SpanContextFromContext(ctx))
		first := len(seen) == 1
		mu.Unlock()
		if first {
			return 0, errors.New("gateway timeout")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, svc.URL, nil)
		if err != nil {
			return 0, err
		}
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return n, nil
	}, actor.WithRetry(supervisor.Exponential(time.Millisecond, 1, time.Millisecond, 3)))
	order := actor.Workflow("order", func(ctx *actor.Context, n int) (int, error) { return charge.Run(ctx, n) })
	refuse := actor.Activity("refuse", func(ctx context.Context, n int) (int, error) {
		return 0, supervisor.Terminal(errors.New("no such customer"))
	})
	broken := actor.Workflow("broken", func(ctx *actor.Context, n int) (int, error) { return refuse.Run(ctx, n) })

	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)),
		Workflows: actor.Register(order, broken), Hooks: actor.MultiHooks(tracing.New(tracing.Options{TracerProvider: tp}))})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, order, 5, actor.WithID("order-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Await(ctx, sys, order, pid); err != nil {
		t.Fatal(err)
	}
	bpid, err := actor.Spawn(ctx, sys, broken, 1, actor.WithID("broken-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Await(ctx, sys, broken, bpid); err == nil {
		t.Fatal("broken succeeded")
	}

	byName := func() map[string][]sdktrace.ReadOnlySpan {
		out := map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			out[s.Name()] = append(out[s.Name()], s)
		}
		return out
	}
	// Run spans end when the activations stop, just after the awaits.
	testutil.Eventually(t, 10*time.Second, "run spans ended", func() bool {
		spans := byName()
		return len(spans["workflow order"]) == 1 && len(spans["workflow broken"]) == 1
	})
	spans := byName()

	run := spans["workflow order"][0]
	if run.Parent().IsValid() {
		t.Errorf("run span has parent %v; want a root", run.Parent())
	}
	for k, want := range map[attribute.Key]string{tracing.AttrInstance: "order-1", tracing.AttrWorkflow: "order", tracing.AttrStatus: "completed"} {
		if v, _ := attr(run, k); v.AsString() != want {
			t.Errorf("run span %s = %q, want %q", k, v.AsString(), want)
		}
	}
	if !hasEvent(run, string(actor.HookActivityRetried)) {
		t.Errorf("run span events %v lack the retry", run.Events())
	}
	if run.Status().Code == codes.Error {
		t.Errorf("completed run has status %v", run.Status())
	}

	attempts := spans["activity charge"]
	if len(attempts) != 2 {
		t.Fatalf("%d spans of activity charge, want 2", len(attempts))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || len(remoteParents) != 1 {
		t.Fatalf("activity saw %d contexts, service %d requests", len(seen), len(remoteParents))
	}
	for _, s := range attempts {
		if s.Parent().SpanID() != run.SpanContext().SpanID() || s.SpanContext().TraceID() != run.SpanContext().TraceID() {
			t.Errorf("attempt span parent %v, want the run span %v", s.Parent(), run.SpanContext())
		}
		n, _ := attr(s, tracing.AttrAttempt)
		if n.AsInt64() != 1 && n.AsInt64() != 2 {
			t.Fatalf("attempt attribute %v", n)
		}
		i := n.AsInt64() - 1
		if !seen[i].Equal(s.SpanContext()) {
			t.Errorf("attempt %d ran with span %v in its context, want its own span %v", n.AsInt64(), seen[i], s.SpanContext())
		}
		for k, want := range map[attribute.Key]string{tracing.AttrInstance: "order-1", tracing.AttrWorkflow: "order",
			tracing.AttrActivity: "charge", tracing.AttrActivityID: "charge:1"} {
			if v, _ := attr(s, k); v.AsString() != want {
				t.Errorf("attempt %d span %s = %q, want %q", n.AsInt64(), k, v.AsString(), want)
			}
		}
		switch n.AsInt64() {
		case 1:
			if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "gateway timeout") || !hasEvent(s, "exception") {
				t.Errorf("failed attempt: status %v, events %v", s.Status(), s.Events())
			}
		case 2:
			if s.Status().Code == codes.Error {
				t.Errorf("successful attempt has status %v", s.Status())
			}
			if remoteParents[0].SpanID() != s.SpanContext().SpanID() || remoteParents[0].TraceID() != s.SpanContext().TraceID() {
				t.Errorf("service saw parent %v, want the attempt's span %v", remoteParents[0], s.SpanContext())
			}
		}
	}

	brun := spans["workflow broken"][0]
	if brun.Status().Code != codes.Error || !strings.Contains(brun.Status().Description, "no such customer") {
		t.Errorf("failed run span status %v", brun.Status())
	}
	if v, _ := attr(brun, tracing.AttrStatus); v.AsString() != "failed" {
		t.Errorf("failed run span status attribute %q", v.AsString())
	}
	if r := spans["activity refuse"]; len(r) != 1 || r[0].Parent().SpanID() != brun.SpanContext().SpanID() || r[0].Status().Code != codes.Error {
		t.Errorf("refuse spans %v", r)
	}
}

// TestActorDoesNotLinkOTel guards the reason this package exists apart:
// a program that uses actor (or metrics) without tracing does not link
// OpenTelemetry, and one without metrics does not link Prometheus.
func TestActorDoesNotLinkOTel(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	for pkg, banned := range map[string][]string{
		"github.com/nornlabs/norn/actor":   {"go.opentelemetry.io/", "github.com/prometheus/"},
		"github.com/nornlabs/norn/metrics": {"go.opentelemetry.io/"},
	} {
		cmd := exec.Command(goBin, "list", "-deps", pkg)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range banned {
				if strings.HasPrefix(dep, b) {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
	}
}

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkSpansPerWorkflow measures the spans of one three-activity
// workflow (a run span, three attempt spans) through the SDK to an
// exporter that drops them.
func BenchmarkSpansPerWorkflow(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(discard{}))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	h := tracing.New(tracing.Options{TracerProvider: tp})
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			id := "chain-" + string(rune('a'+i%26))
			i++
			ev := func(k actor.HookKind, name string) actor.HookEvent {
				return actor.HookEvent{Kind: k, Instance: id, Workflow: "chain", Name: name, Ref: name + ":1", Attempt: 1, At: time.Now()}
			}
			h.Observe(ctx, ev(actor.HookInstanceActivated, ""))
			for _, a := range []string{"a", "b", "c"} {
				actx := h.ActivityContext(ctx, ev(actor.HookActivityStarted, a))
				h.Observe(actx, ev(actor.HookActivityStarted, a))
				h.Observe(actx, ev(actor.HookActivityFinished, a))
			}
			h.Observe(ctx, ev(actor.HookInstanceCompleted, ""))
			h.Observe(ctx, ev(actor.HookInstanceStopped, ""))
		}
	})
}

// TestRestartIsANewRunSpan crashes a workflow once: the crashed run's span
// ends with the panic recorded, and the restart replays in a new run span.
func TestRestartIsANewRunSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	var crashed atomic.Bool
	wf := actor.Workflow("crashy", func(ctx *actor.Context, n int) (int, error) {
		if crashed.CompareAndSwap(false, true) {
			panic("boom")
		}
		return n, nil
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf),
		Hooks: tracing.New(tracing.Options{TracerProvider: tp})})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, 3, actor.WithID("crashy-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Await(ctx, sys, wf, pid); err != nil {
		t.Fatal(err)
	}
	var runs []sdktrace.ReadOnlySpan
	testutil.Eventually(t, 10*time.Second, "two run spans ended", func() bool {
		runs = runs[:0]
		for _, s := range rec.Ended() {
			if s.Name() == "workflow crashy" {
				runs = append(runs, s)
			}
		}
		return len(runs) == 2
	})
	first, second := runs[0], runs[1]
	if first.Status().Code != codes.Error || !strings.Contains(first.Status().Description, "boom") || !hasEvent(first, "exception") {
		t.Errorf("crashed run: status %v, events %v", first.Status(), first.Events())
	}
	if v, _ := attr(second, tracing.AttrStatus); v.AsString() != "completed" || second.Status().Code == codes.Error {
		t.Errorf("restarted run: status attribute %q, status %v", v.AsString(), second.Status())
	}
	if first.SpanContext().SpanID() == second.SpanContext().SpanID() || second.StartTime().Before(first.EndTime()) {
		t.Errorf("the restart's span %v does not follow the crashed one %v", second.SpanContext(), first.SpanContext())
	}
}
