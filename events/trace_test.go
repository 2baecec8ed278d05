package events_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/events"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
)

const traceIn = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// traced waits for an event and emits one: the trace context of the event
// that came in goes out on the event it emits.
var traced = actor.Workflow("traced", func(ctx *actor.Context, _ int) (string, error) {
	if err := events.Subscribe(ctx, "com.example.trace.in", mailbox.Broadcast); err != nil {
		return "", err
	}
	if _, err := events.Wait[map[string]any](ctx, "com.example.trace.in"); err != nil {
		return "", err
	}
	out := event.New()
	out.SetType("com.example.trace.out")
	return events.Emit(ctx, out)
})

// The traceparent extension travels from the ingress into the instance and
// out on the events it emits.
func TestTraceParentTravels(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(traced), Logger: testutil.Logger()})
	h, err := events.NewHandler(sys, events.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ctx := testutil.Ctx(t, time.Minute)
	pid, err := actor.Spawn(ctx, sys, traced, 0)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "subscribed", func() bool {
		info, _ := sys.Inspect(ctx, pid)
		return len(info.Subscriptions) == 1
	})
	body := `{"specversion":"1.0","id":"t-1","source":"/test","type":"com.example.trace.in","traceparent":"` + traceIn + `"}`
	resp, err := srv.Client().Post(srv.URL, "application/cloudevents+json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post = %d", resp.StatusCode)
	}
	id, err := actor.Await(ctx, sys, traced, pid)
	if err != nil {
		t.Fatal(err)
	}
	s := newSink(t, func(string, int) int { return http.StatusOK })
	startRelayer(t, events.RelayerConfig{Store: st, Sink: s.httpSink(events.Binary), Wake: sys.WatchOutbox()})
	s.waitAccepted(t, 30*time.Second, id)
	if got := s.event(id).Extensions()["traceparent"]; got != traceIn {
		t.Fatalf("emitted event's traceparent = %v, want %s", got, traceIn)
	}
}
