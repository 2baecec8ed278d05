package events

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// minimal is a valid structured event of type t.test with the given id.
func minimal(id string, extra ...string) string {
	s := `{"specversion":"1.0","id":"` + id + `","source":"/test","type":"t.test"`
	for i := 0; i+1 < len(extra); i += 2 {
		s += `,"` + extra[i] + `":` + extra[i+1]
	}
	return s + "}"
}

func binaryHeaders(id, typ string, extra ...string) []string {
	return append([]string{"ce-specversion", "1.0", "ce-id", id, "ce-source", "/test", "ce-type", typ}, extra...)
}

// Requests that are no CloudEvent POST get 405 and 415, never 400 or 5xx.
func TestMethodAndMediaType(t *testing.T) {
	n := startNode(t, testConfig())
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		r := n.do(t, m, nil)
		if r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != http.MethodPost {
			t.Errorf("%s: %d, Allow %q", m, r.status, r.header.Get("Allow"))
		}
	}
	for _, ct := range []string{"", "text/plain", "application/json", "application/cloudevents+avro",
		"application/cloudevents+json; charset=latin1", "application/cloudevents-batch+json; charset=utf-16"} {
		var hs []string
		if ct != "" {
			hs = []string{"Content-Type", ct}
		}
		r := n.post(t, []byte(minimal("a")), hs...)
		if r.status != http.StatusUnsupportedMediaType || r.body.Error == "" || r.body.Index != nil {
			t.Errorf("Content-Type %q: %d %s; want 415", ct, r.status, r.raw)
		}
	}
	// Parameters and case do not matter.
	if r := n.post(t, []byte(minimal("b")), "Content-Type", "Application/CloudEvents+JSON; charset=UTF-8"); r.status != http.StatusAccepted {
		t.Errorf("media type with parameters: %d %s", r.status, r.raw)
	}
}

// A body over the limit gets 413; so does an event over Config.MaxPayload.
func TestSizeLimits(t *testing.T) {
	n := startNode(t, actor.Config{MaxPayload: 600}, WithMaxBodyBytes(1000))
	big := func(size int) string { return minimal("big", "data", `"`+strings.Repeat("x", size)+`"`) }
	if r := n.structured(t, big(2000)); r.status != http.StatusRequestEntityTooLarge || !strings.Contains(r.body.Error, "1000") {
		t.Errorf("body over the limit: %d %s", r.status, r.raw)
	}
	r := n.structured(t, big(700))
	if r.status != http.StatusRequestEntityTooLarge || r.body.Index == nil || *r.body.Index != 0 {
		t.Errorf("event over MaxPayload: %d %s", r.status, r.raw)
	}
	if r := n.structured(t, big(100)); r.status != http.StatusAccepted {
		t.Errorf("small event: %d %s", r.status, r.raw)
	}
	if w := waiting(t, n.sys); w["t.test"] != 1 {
		t.Fatalf("waiting = %v; want the small event only", w)
	}
}

// downStore fails every step while down is set, as a store whose disk or
// server is gone.
type downStore struct {
	persistence.Store
	down atomic.Bool
}

func (s *downStore) Apply(ctx context.Context, step persistence.Step) (persistence.StepResult, error) {
	if s.down.Load() {
		return persistence.StepResult{}, errors.New("disk unavailable")
	}
	return s.Store.Apply(ctx, step)
}

// A store that fails gets 503 with a reason and Retry-After: the client
// retries, and the retry is delivered once.
func TestStoreDown(t *testing.T) {
	st := &downStore{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t))}
	n := startNode(t, actor.Config{Store: st})
	st.down.Store(true)
	for _, body := range []string{minimal("a"), `[` + minimal("a") + `,` + minimal("b") + `]`} {
		ct := "application/cloudevents+json"
		if body[0] == '[' {
			ct = "application/cloudevents-batch+json"
		}
		r := n.post(t, []byte(body), "Content-Type", ct)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || !strings.Contains(r.body.Error, "disk unavailable") {
			t.Fatalf("store down: %d %s (Retry-After %q)", r.status, r.raw, r.header.Get("Retry-After"))
		}
	}
	st.down.Store(false)
	if r := n.post(t, []byte(`[`+minimal("a")+`,`+minimal("b")+`]`), "Content-Type", "application/cloudevents-batch+json"); r.status != http.StatusAccepted {
		t.Fatalf("store back: %d %s", r.status, r.raw)
	}
	if r := n.structured(t, minimal("a")); r.status != http.StatusAccepted {
		t.Fatalf("retry: %d %s", r.status, r.raw)
	}
	if w := waiting(t, n.sys); w["t.test"] != 2 {
		t.Fatalf("waiting = %v; want a and b once", w)
	}
}

// Malformed requests get 400 naming the problem; nothing is committed.
func TestMalformed(t *testing.T) {
	n := startNode(t, testConfig())
	structured := []string{"Content-Type", "application/cloudevents+json"}
	batch := []string{"Content-Type", "application/cloudevents-batch+json"}
	for _, c := range []struct {
		name    string
		body    string
		headers []string
		prefix  string // the error starts with it
		index   int    // -1: no index
	}{
		{"empty", "", structured, "empty body", -1},
		{"not JSON", "{", structured, "event: malformed JSON", 0},
		{"array in structured mode", "[" + minimal("a") + "]", structured, "a structured-mode body is one JSON object", -1},
		{"two values", minimal("a") + minimal("b"), structured, "event: more than one JSON value", 0},
		{"not UTF-8", `{"specversion":"1.0","id":"` + "\xff" + `"}`, structured, "the body is not valid UTF-8", -1},
		{"member twice", `{"specversion":"1.0","id":"a","id":"b","source":"/s","type":"t"}`, structured, "id: given twice", 0},
		{"string number", minimal("a", "ext", `"x"`, "num", "2147483648"), structured, "num:", 0},
		{"object extension", minimal("a", "ext", `{"a":1}`), structured, "ext:", 0},
		{"system type", `{"specversion":"1.0","id":"a","source":"/s","type":"$down:x"}`, structured, "type:", 0},
		{"instance not a string", minimal("a", "norninstance", "7"), structured, "norninstance:", 0},
		{"text data not a string", minimal("a", "datacontenttype", `"text/plain"`, "data", `{"a":1}`), structured, "data:", 0},
		{"bad base64", minimal("a", "data_base64", `"!!"`), structured, "data_base64:", 0},
		{"relative dataschema", minimal("a", "dataschema", `"/schema"`), structured, "dataschema:", 0},
		{"batch not an array", minimal("a"), batch, "a batch is a JSON array", -1},
		{"batch second bad", "[" + minimal("a") + `,{"id":"b"}]`, batch, "specversion: missing", 1},
		{"batch trailing", "[" + minimal("a") + "] x", batch, "malformed batch", -1},
		{"binary no specversion", "", []string{"ce-id", "a", "ce-source", "/s", "ce-type", "t"}, "specversion: missing", 0},
		{"binary bad escape", "", binaryHeaders("a%zz", "t"), "id: malformed percent-encoding", 0},
		{"binary not UTF-8", "", binaryHeaders("a%FF", "t"), "id: not valid UTF-8", 0},
		{"binary bad name", "", binaryHeaders("a", "t", "ce-my-ext", "x"), `"my-ext":`, 0},
		{"binary ce-datacontenttype", "", binaryHeaders("a", "t", "ce-datacontenttype", "text/plain"), "datacontenttype:", 0},
		{"binary bad JSON", "{", binaryHeaders("a", "t", "Content-Type", "application/json"), "data:", 0},
		{"binary bad media type", "x", binaryHeaders("a", "t", "Content-Type", "xyz"), "datacontenttype:", 0},
		{"binary time", "", binaryHeaders("a", "t", "ce-time", "yesterday"), "time:", 0},
		{"binary twice", "", binaryHeaders("a", "t", "ce-subject", "x", "ce-subject", "y"), "subject: given 2 times", 0},
	} {
		r := n.post(t, []byte(c.body), c.headers...)
		okIndex := c.index < 0 && r.body.Index == nil || c.index >= 0 && r.body.Index != nil && *r.body.Index == c.index
		if r.status != http.StatusBadRequest || !strings.HasPrefix(r.body.Error, c.prefix) || !okIndex {
			t.Errorf("%s: %d %s; want 400 %q at %d", c.name, r.status, r.raw, c.prefix, c.index)
		}
	}
	if w := waiting(t, n.sys); len(w) != 0 {
		t.Fatalf("refused requests committed: %v", w)
	}
}

// An event received again (same source and id, any content mode) is
// acknowledged and delivered once; the same id from another source is
// another event.
func TestDuplicateDeliveredOnce(t *testing.T) {
	n := startNode(t, testConfig())
	for i, send := range []func() reply{
		func() reply { return n.structured(t, minimal("x")) },
		func() reply { return n.post(t, nil, binaryHeaders("x", "t.test")...) },
		func() reply {
			return n.post(t, []byte("["+minimal("x")+","+minimal("x")+"]"), "Content-Type", "application/cloudevents-batch+json")
		},
		func() reply {
			return n.structured(t, `{"specversion":"1.0","id":"x","source":"/elsewhere","type":"t.test"}`)
		},
	} {
		if r := send(); r.status != http.StatusAccepted {
			t.Fatalf("send %d: %d %s", i, r.status, r.raw)
		}
	}
	if w := waiting(t, n.sys); w["t.test"] != 2 {
		t.Fatalf("waiting = %v; want 2 (one per source)", w)
	}
	got := n.read(t, "t.test", 2)
	if got[0].Source == got[1].Source || got[0].ID != "x" || got[1].ID != "x" {
		t.Fatalf("read %+v", got)
	}
}

// waiterIn configures waiter.
type waiterIn struct {
	Type      string
	Subscribe mailbox.Mode // "" subscribes to nothing
	Subject   string       // WithSubject if set
	Timeout   time.Duration
}

// waiter waits for one event of a type and returns what it saw.
func waiter(subscribed chan<- string) *actor.WorkflowDef[waiterIn, view] {
	return actor.Workflow("waiter", func(ctx *actor.Context, in waiterIn) (view, error) {
		if in.Subscribe != "" {
			if err := Subscribe(ctx, in.Type, in.Subscribe); err != nil {
				return view{}, err
			}
		}
		if !ctx.Replaying() && subscribed != nil {
			subscribed <- ctx.InstanceID()
		}
		var opts []WaitOption
		if in.Subject != "" {
			opts = append(opts, WithSubject(in.Subject))
		}
		if in.Timeout > 0 {
			opts = append(opts, Timeout(in.Timeout))
		}
		e, err := Wait[[]byte](ctx, in.Type, opts...)
		if err != nil {
			return view{}, err
		}
		return viewOf(ctx, e), nil
	})
}

// Broadcast subscribers each get the event; WithSubject leaves events of
// other subjects; a Timeout ends a Wait with ErrTimeout.
func TestWaitBroadcastSubjectTimeout(t *testing.T) {
	subscribed := make(chan string, 4)
	wf := waiter(subscribed)
	n := startNode(t, actor.Config{Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, wait)
	var pids []actor.PID
	for _, subject := range []string{"", "", "s2"} {
		pid, err := actor.Spawn(ctx, n.sys, wf, waiterIn{Type: "t.fan", Subscribe: mailbox.Broadcast, Subject: subject})
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
		<-subscribed
	}
	for _, ev := range []string{
		`{"specversion":"1.0","id":"1","source":"/s","type":"t.fan","subject":"s1"}`,
		`{"specversion":"1.0","id":"2","source":"/s","type":"t.fan","subject":"s2"}`,
	} {
		if r := n.structured(t, ev); r.status != http.StatusAccepted {
			t.Fatalf("%d %s", r.status, r.raw)
		}
	}
	for i, want := range []string{"1", "1", "2"} {
		v, err := actor.Await(ctx, n.sys, wf, pids[i])
		if err != nil || v.ID != want {
			t.Fatalf("waiter %d: %+v, %v; want event %s", i, v, err, want)
		}
	}
	pid, err := actor.Spawn(ctx, n.sys, wf, waiterIn{Type: "t.none", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	<-subscribed
	if _, err := actor.Await(ctx, n.sys, wf, pid); !errors.Is(err, actor.ErrTimeout) {
		t.Fatalf("Wait with a timeout = %v; want ErrTimeout", err)
	}
}

// An event with norninstance goes to that instance only (no subscription
// needed, broadcast subscribers of the type get nothing); an unknown
// instance gets 404, an ended one 410.
func TestInstanceAddressed(t *testing.T) {
	subscribed := make(chan string, 4)
	wf := waiter(subscribed)
	n := startNode(t, actor.Config{Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, wait)
	target, err := actor.Spawn(ctx, n.sys, wf, waiterIn{Type: "t.direct"})
	if err != nil {
		t.Fatal(err)
	}
	<-subscribed
	other, err := actor.Spawn(ctx, n.sys, wf, waiterIn{Type: "t.direct", Subscribe: mailbox.Broadcast})
	if err != nil {
		t.Fatal(err)
	}
	<-subscribed
	r := n.post(t, []byte(`{"x":1}`), binaryHeaders("d1", "t.direct", "ce-norninstance", string(target), "Content-Type", "application/json")...)
	if r.status != http.StatusAccepted {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	v, err := actor.Await(ctx, n.sys, wf, target)
	if err != nil || v.ID != "d1" || string(v.Data) != `{"x":1}` || v.Extensions[ExtInstance] != "string:"+string(target) {
		t.Fatalf("addressee got %+v, %v", v, err)
	}
	info, err := n.sys.Inspect(ctx, other)
	if err != nil || info.MailboxDepth != 0 {
		t.Fatalf("the broadcast subscriber's mailbox holds %d messages (%v); want none", info.MailboxDepth, err)
	}
	if w := waiting(t, n.sys); len(w) != 0 {
		t.Fatalf("an addressed event was published: %v", w)
	}
	r = n.structured(t, `{"specversion":"1.0","id":"d2","source":"/s","type":"t.direct","norninstance":"nobody"}`)
	if r.status != http.StatusNotFound || r.body.Index == nil || !strings.HasPrefix(r.body.Error, "norninstance:") {
		t.Fatalf("unknown instance: %d %s", r.status, r.raw)
	}
	batch := "[" + minimal("ok") + `,{"specversion":"1.0","id":"d3","source":"/s","type":"t.direct","norninstance":"` + string(target) + `"}]`
	r = n.post(t, []byte(batch), "Content-Type", "application/cloudevents-batch+json")
	if r.status != http.StatusGone || r.body.Index == nil || *r.body.Index != 1 {
		t.Fatalf("ended instance in a batch: %d %s", r.status, r.raw)
	}
	if w := waiting(t, n.sys); len(w) != 0 {
		t.Fatalf("a refused batch delivered: %v", w)
	}
}

type order struct {
	ID    string
	Total int
}

// orderSeen is what the handled workflows report.
type orderSeen struct {
	Order       order
	ID, Source  string
	TraceParent string
	Ext         string
}

// Handle starts one instance per event, with the event's data (or the
// whole event) as input; a redelivered event starts nothing new; data that
// does not fit the input is refused with 400.
func TestHandleStartsWorkflow(t *testing.T) {
	whole := actor.Workflow("whole", func(ctx *actor.Context, in Event[order]) (orderSeen, error) {
		Adopt(ctx, in)
		return orderSeen{Order: in.Data, ID: in.ID(), Source: in.Source(), TraceParent: TraceParent(ctx),
			Ext: fmt.Sprint(in.Extensions()["ext"])}, nil
	})
	plain := actor.Workflow("plain", func(ctx *actor.Context, in order) (orderSeen, error) {
		return orderSeen{Order: in}, nil
	})
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	n := startNode(t, actor.Config{Store: st, Workflows: actor.Register(whole, plain)},
		Handle("t.order", whole), Handle("t.order", plain), Handle("t.plain", plain))
	ctx := testutil.Ctx(t, wait)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ev := `{"specversion":"1.0","id":"o1","source":"/shop","type":"t.order","traceparent":"` + tp +
		`","ext":7,"datacontenttype":"application/json","data":{"ID":"o-1","Total":30}}`
	for range 2 {
		if r := n.structured(t, ev); r.status != http.StatusAccepted {
			t.Fatalf("%d %s", r.status, r.raw)
		}
	}
	got, err := actor.Await(ctx, n.sys, whole, actor.PID(InstanceID("whole", "/shop", "o1")))
	want := orderSeen{Order: order{"o-1", 30}, ID: "o1", Source: "/shop", TraceParent: tp, Ext: "7"}
	if err != nil || got != want {
		t.Fatalf("whole = %+v, %v; want %+v", got, err, want)
	}
	got, err = actor.Await(ctx, n.sys, plain, actor.PID(InstanceID("plain", "/shop", "o1")))
	if err != nil || got.Order != want.Order {
		t.Fatalf("plain = %+v, %v", got, err)
	}
	insts, err := st.List(ctx, persistence.ListFilter{})
	if err != nil || len(insts) != 2 {
		t.Fatalf("%d instances (%v); want 2: one per workflow, none for the redelivery", len(insts), err)
	}
	if w := waiting(t, n.sys); len(w) != 0 {
		t.Fatalf("a handled event was also published: %v", w)
	}

	batch := `[{"specversion":"1.0","id":"p1","source":"/shop","type":"t.plain","data":{"ID":"p-1"}},` +
		`{"specversion":"1.0","id":"p2","source":"/shop","type":"t.plain","data":{"ID":"p-2"}}]`
	if r := n.post(t, []byte(batch), "Content-Type", "application/cloudevents-batch+json"); r.status != http.StatusAccepted {
		t.Fatalf("batch: %d %s", r.status, r.raw)
	}
	for _, id := range []string{"p1", "p2"} {
		if got, err := actor.Await(ctx, n.sys, plain, actor.PID(InstanceID("plain", "/shop", id))); err != nil || got.Order.ID != "p-"+id[1:] {
			t.Fatalf("batch event %s: %+v, %v", id, got, err)
		}
	}
	r := n.post(t, []byte(`"not an order"`), binaryHeaders("bad", "t.plain", "Content-Type", "application/json")...)
	if r.status != http.StatusBadRequest || !strings.HasPrefix(r.body.Error, "data: not the input of workflow plain") {
		t.Fatalf("bad data: %d %s", r.status, r.raw)
	}
	if _, err := n.sys.Inspect(ctx, actor.PID(InstanceID("plain", "/test", "bad"))); !errors.Is(err, actor.ErrNotFound) {
		t.Fatalf("an instance was started for refused data: %v", err)
	}
}

// NewHandler refuses a Handle of an unregistered workflow or of a type
// that cannot name a channel.
func TestHandleMisconfigured(t *testing.T) {
	wf := actor.Workflow("known", func(ctx *actor.Context, in order) (int, error) { return 0, nil })
	other := actor.Workflow("unknown", func(ctx *actor.Context, in order) (int, error) { return 0, nil })
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	for _, opt := range []Option{Handle("t", other), Handle("$down", wf), Handle("", wf), WithMaxBodyBytes(0)} {
		if _, err := NewHandler(sys, opt); !errors.Is(err, actor.ErrInvalidInput) {
			t.Errorf("NewHandler = %v, want ErrInvalidInput", err)
		}
	}
}

// passivations signals each passivation.
type passivations chan string

func (p passivations) Observe(_ context.Context, e actor.HookEvent) {
	if e.Kind == actor.HookInstancePassivated {
		select {
		case p <- e.Instance:
		default:
		}
	}
}

// The traceparent of the event a workflow waited for is there for
// TraceParent, also after the instance was passivated and replayed.
func TestTraceParentAfterReplay(t *testing.T) {
	wf := actor.Workflow("traced", func(ctx *actor.Context, _ int) ([]string, error) {
		if _, err := Wait[[]byte](ctx, "t.traced"); err != nil {
			return nil, err
		}
		first := TraceParent(ctx)
		// Park until poked, so that the test can passivate the instance.
		if _, err := actor.Receive[string](ctx, mailbox.OnChannel("")); err != nil {
			return nil, err
		}
		return []string{first, TraceParent(ctx)}, nil
	})
	passivated := make(passivations, 4)
	n := startNode(t, actor.Config{Workflows: actor.Register(wf), PassivateAfter: 20 * time.Millisecond, Hooks: passivated})
	ctx := testutil.Ctx(t, wait)
	pid, err := actor.Spawn(ctx, n.sys, wf, 0)
	if err != nil {
		t.Fatal(err)
	}
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	r := n.post(t, nil, binaryHeaders("e1", "t.traced", "ce-traceparent", tp, "ce-norninstance", string(pid))...)
	if r.status != http.StatusAccepted {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	for p := range passivated {
		if p == string(pid) {
			break
		}
	}
	if err := n.sys.Send(ctx, pid, "go on"); err != nil {
		t.Fatal(err)
	}
	got, err := actor.Await(ctx, n.sys, wf, pid)
	if err != nil || !slices.Equal(got, []string{tp, tp}) {
		t.Fatalf("TraceParent before and after replay = %q, %v; want %q twice", got, err, tp)
	}
}

// A stopped node takes nothing and says so with 503.
func TestNodeStopped(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	sys, err := actor.Start(testutil.Ctx(t, wait), actor.Config{Store: st, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	n := serve(t, sys)
	if err := sys.Stop(testutil.Ctx(t, wait)); err != nil {
		t.Fatal(err)
	}
	r := n.structured(t, minimal("late"))
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body.Error, "stopped") {
		t.Fatalf("stopped node: %d %s", r.status, r.raw)
	}
}
