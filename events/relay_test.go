package events_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"go.uber.org/goleak"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/events"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
	"github.com/nornlabs/norn/persistence/sqlite"
	"github.com/nornlabs/norn/supervisor"
)

// noLeaks checks, when the test has cleaned up, that its goroutines are
// gone. Call it first, so that its cleanup runs last.
func noLeaks(t *testing.T) {
	t.Helper()
	opts := []goleak.Option{
		goleak.IgnoreCurrent(),
		// The throw-away PostgreSQL server lives as long as the test binary.
		goleak.IgnoreAnyFunction("github.com/nornlabs/norn/internal/testutil.(*server).start.func1"),
	}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// openSQLite is a fresh SQLite store, closed when the test ends.
func openSQLite(t *testing.T) persistence.Store {
	t.Helper()
	return testutil.OpenSQLite(t, testutil.SQLitePath(t))
}

// emitInput asks emitFlow for Count events of Type; with Hold it waits
// for one message after the first, so that a test can restart the node
// in between.
type emitInput struct {
	Count int
	Type  string
	Hold  bool
}

// emitFlow emits events; its result is their IDs.
var emitFlow = actor.Workflow("emitter", func(ctx *actor.Context, in emitInput) ([]string, error) {
	var ids []string
	for i := range in.Count {
		e := event.New()
		e.SetType(in.Type)
		if err := e.SetData(event.ApplicationJSON, map[string]int{"n": i}); err != nil {
			return nil, err
		}
		id, err := events.Emit(ctx, e)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
		if in.Hold && i == 0 {
			if _, err := actor.Receive[string](ctx); err != nil {
				return nil, err
			}
		}
	}
	return ids, nil
})

// sink is a CloudEvents HTTP endpoint on loopback that counts requests by
// event ID and answers each with the status answer picks.
type sink struct {
	t      *testing.T
	srv    *httptest.Server
	client *http.Client
	// answer returns the status of the n-th request (from 1) for an ID.
	answer func(id string, n int) int
	// hold, if set, is waited for before answering (or the request's end).
	hold func(id string, n int) <-chan struct{}

	entered  chan string // IDs as requests arrive (buffered; dropped if full)
	accepted chan string // IDs answered 2xx (buffered; dropped if full)

	mu       sync.Mutex
	requests map[string]int
	oks      map[string]int
	last     map[string]*http.Request
	events   map[string]event.Event
}

func newSink(t *testing.T, answer func(id string, n int) int) *sink {
	t.Helper()
	return newHoldingSink(t, answer, nil)
}

// newHoldingSink is a sink that holds requests (see sink.hold).
func newHoldingSink(t *testing.T, answer func(id string, n int) int, hold func(id string, n int) <-chan struct{}) *sink {
	t.Helper()
	s := &sink{t: t, answer: answer, hold: hold, entered: make(chan string, 10000), accepted: make(chan string, 10000),
		requests: map[string]int{}, oks: map[string]int{}, last: map[string]*http.Request{}, events: map[string]event.Event{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	// A client of its own, so that its idle connections go with the test.
	s.client = &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		s.client.CloseIdleConnections()
		s.srv.Close()
	})
	return s
}

func ok(string, int) int { return http.StatusOK }

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	e, err := cehttp.NewEventFromHTTPRequest(r)
	if err != nil {
		http.Error(w, "not a CloudEvent: "+err.Error(), http.StatusBadRequest)
		return
	}
	id := e.ID()
	s.mu.Lock()
	s.requests[id]++
	n := s.requests[id]
	s.last[id] = r
	s.mu.Unlock()
	select {
	case s.entered <- id:
	default:
	}
	if s.hold != nil {
		if ch := s.hold(id, n); ch != nil {
			select {
			case <-ch:
			case <-r.Context().Done():
				return
			}
		}
	}
	code := s.answer(id, n)
	if code >= 200 && code < 300 {
		s.mu.Lock()
		s.oks[id]++
		s.events[id] = *e
		s.mu.Unlock()
		select {
		case s.accepted <- id:
		default:
		}
	}
	w.WriteHeader(code)
	if code >= 400 {
		fmt.Fprintf(w, "refused %s (attempt %d)", id, n)
	}
}

// httpSink is an HTTPSink to this server.
func (s *sink) httpSink(mode events.SinkMode) *events.HTTPSink {
	return &events.HTTPSink{URL: s.srv.URL, Mode: mode, Client: s.client}
}

func (s *sink) counts(id string) (requests, oks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[id], s.oks[id]
}

func (s *sink) event(id string) event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events[id]
}

// waitAccepted waits until the sink has accepted every ID in ids.
func (s *sink) waitAccepted(t *testing.T, d time.Duration, ids ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		if _, oks := s.counts(id); oks == 0 {
			want[id] = true
		}
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for len(want) > 0 {
		select {
		case id := <-s.accepted:
			delete(want, id)
		case <-deadline.C:
			t.Fatalf("the sink has not accepted %d of %d events after %v", len(want), len(ids), d)
		}
	}
}

// waitEntered waits for the next request to arrive and returns its ID.
func (s *sink) waitEntered(t *testing.T, d time.Duration) string {
	t.Helper()
	select {
	case id := <-s.entered:
		return id
	case <-time.After(d):
		t.Fatalf("no request reached the sink within %v", d)
		return ""
	}
}

// countingStore counts ClaimOutbox calls and signals each on claims.
type countingStore struct {
	// Store's outbox calls go to ob; it hides whether the store is a
	// persistence.OutboxNotifier.
	persistence.Store
	ob     persistence.Outbox
	claims chan struct{}
}

func countClaims(st persistence.Store) *countingStore {
	return &countingStore{Store: st, ob: st.(persistence.Outbox), claims: make(chan struct{}, 1000)}
}

func (c *countingStore) ClaimOutbox(ctx context.Context, owner string, now time.Time, ttl time.Duration, limit int) ([]persistence.OutboxRecord, error) {
	recs, err := c.ob.ClaimOutbox(ctx, owner, now, ttl, limit)
	select {
	case c.claims <- struct{}{}:
	default:
	}
	return recs, err
}

func (c *countingStore) FinishOutbox(ctx context.Context, id, owner string, status persistence.OutboxStatus, next time.Time, errText string) error {
	return c.ob.FinishOutbox(ctx, id, owner, status, next, errText)
}

func (c *countingStore) ReleaseOutbox(ctx context.Context, owner string, ids []string) (int, error) {
	return c.ob.ReleaseOutbox(ctx, owner, ids)
}

func (c *countingStore) PruneOutbox(ctx context.Context, before time.Time, limit int) (int, error) {
	return c.ob.PruneOutbox(ctx, before, limit)
}

func (c *countingStore) ListOutbox(ctx context.Context, status persistence.OutboxStatus, after string, limit int) ([]persistence.OutboxRecord, error) {
	return c.ob.ListOutbox(ctx, status, after, limit)
}

// waitClaims waits for n more claims.
func (c *countingStore) waitClaims(t *testing.T, n int, d time.Duration) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for range n {
		select {
		case <-c.claims:
		case <-deadline.C:
			t.Fatalf("fewer than %d claims within %v", n, d)
		}
	}
}

// fastBackoff retries every 10ms, so that retry tests take no time.
var fastBackoff = supervisor.RetryPolicy{Initial: 10 * time.Millisecond, Multiplier: 1}

// startRelayer runs a relayer until the test ends (or stop is called) and
// checks that Run returned nil.
func startRelayer(t *testing.T, cfg events.RelayerConfig) (stop func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testutil.Logger()
	}
	r, err := events.NewRelayer(cfg)
	if err != nil {
		t.Fatalf("NewRelayer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("Run did not return within 30s of its context's end")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// record reads one outbox record.
func record(t *testing.T, st persistence.Store, id string) persistence.OutboxRecord {
	t.Helper()
	recs, err := st.(persistence.Outbox).ListOutbox(context.Background(), "", "", 0)
	if err != nil {
		t.Fatalf("ListOutbox: %v", err)
	}
	for _, r := range recs {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no outbox record %s", id)
	return persistence.OutboxRecord{}
}

// waitStatus waits until the record of id has the status.
func waitStatus(t *testing.T, st persistence.Store, id string, status persistence.OutboxStatus, d time.Duration) persistence.OutboxRecord {
	t.Helper()
	var rec persistence.OutboxRecord
	testutil.Eventually(t, d, fmt.Sprintf("event %s %s", id, status), func() bool {
		rec = record(t, st, id)
		return rec.Status == status
	})
	return rec
}

// emit runs emitFlow on a node of st and returns the IDs it emitted.
func emit(t *testing.T, sys *actor.System, id string, in emitInput) []string {
	t.Helper()
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, emitFlow, in, actor.WithID(id))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := actor.Await(ctx, sys, emitFlow, pid)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestRelayRetriesServerErrorsThenSendsOnce: each event is refused with
// 500 three times, then accepted once. With an hour between polls, the
// retries come from the relayer's own schedule.
func TestRelayRetriesServerErrorsThenSendsOnce(t *testing.T) {
	noLeaks(t)
	st := openSQLite(t)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(emitFlow)})
	s := newSink(t, func(_ string, n int) int {
		if n <= 3 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	startRelayer(t, events.RelayerConfig{Store: st, Sink: s.httpSink(events.Binary), Wake: sys.WatchOutbox(),
		Backoff: fastBackoff, PollInterval: time.Hour})

	ids := emit(t, sys, "retry", emitInput{Count: 3, Type: "com.example.retried"})
	s.waitAccepted(t, 30*time.Second, ids...)
	for _, id := range ids {
		rec := waitStatus(t, st, id, persistence.OutboxSent, 10*time.Second)
		if requests, oks := s.counts(id); requests != 4 || oks != 1 {
			t.Errorf("%s: sink saw %d requests, accepted %d; want 4 and 1", id, requests, oks)
		}
		if rec.Attempts != 4 || rec.Claimer != "" || rec.Error != "" {
			t.Errorf("%s: %d attempts, claimer %q, error %q; want 4 attempts, no claim, no error", id, rec.Attempts, rec.Claimer, rec.Error)
		}
	}
}

func TestRelayClientErrorIsInvalidAndNeverRetried(t *testing.T) {
	noLeaks(t)
	st := openSQLite(t)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(emitFlow)})
	s := newSink(t, func(id string, _ int) int {
		if strings.Contains(id, "refused") {
			return http.StatusNotFound
		}
		return http.StatusOK
	})
	cs := countClaims(st)
	startRelayer(t, events.RelayerConfig{Store: cs, Sink: s.httpSink(events.Structured), Wake: sys.WatchOutbox(),
		Backoff: fastBackoff, PollInterval: 10 * time.Millisecond})

	ids := emit(t, sys, "refused", emitInput{Count: 1, Type: "com.example.refused"})
	rec := waitStatus(t, st, ids[0], persistence.OutboxInvalid, 30*time.Second)
	if !strings.Contains(rec.Error, "404") || !strings.Contains(rec.Error, "refused "+ids[0]) {
		t.Errorf("the invalid event's error %q does not show the sink's answer", rec.Error)
	}
	// Many polls later, the sink has still seen it once, and other events
	// still flow.
	cs.waitClaims(t, 20, 30*time.Second)
	more := emit(t, sys, "accepted", emitInput{Count: 1, Type: "com.example.accepted"})
	s.waitAccepted(t, 30*time.Second, more...)
	cs.waitClaims(t, 5, 30*time.Second)
	if requests, _ := s.counts(ids[0]); requests != 1 {
		t.Fatalf("the sink saw the refused event %d times, want 1", requests)
	}
	invalid, err := st.(persistence.Outbox).ListOutbox(context.Background(), persistence.OutboxInvalid, "", 0)
	if err != nil || len(invalid) != 1 || invalid[0].ID != ids[0] {
		t.Fatalf("ListOutbox(invalid) = %v, %v; want just %s", invalid, err, ids[0])
	}
}

func TestRelayExpiresAtMaxAge(t *testing.T) {
	noLeaks(t)
	st := openSQLite(t)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(emitFlow)})
	s := newSink(t, func(string, int) int { return http.StatusServiceUnavailable })
	startRelayer(t, events.RelayerConfig{Store: st, Sink: s.httpSink(events.Binary), Wake: sys.WatchOutbox(),
		Backoff: supervisor.RetryPolicy{Initial: 100 * time.Millisecond, Multiplier: 1}, MaxAge: time.Second})

	ids := emit(t, sys, "expiring", emitInput{Count: 1, Type: "com.example.expiring"})
	rec := waitStatus(t, st, ids[0], persistence.OutboxExpired, 30*time.Second)
	if !strings.Contains(rec.Error, "503") {
		t.Errorf("expired with error %q, want the last 503", rec.Error)
	}
	requests, _ := s.counts(ids[0])
	if requests < 2 || rec.Attempts != requests {
		t.Errorf("%d attempts recorded, %d requests seen; want the same, at least 2", rec.Attempts, requests)
	}
}

func TestRelayModesCarryTheEvent(t *testing.T) {
	for _, mode := range []events.SinkMode{events.Binary, events.Structured} {
		t.Run(mode.String(), func(t *testing.T) {
			noLeaks(t)
			st := openSQLite(t)
			sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(traceFlow)})
			s := newSink(t, ok)
			startRelayer(t, events.RelayerConfig{Store: st, Sink: s.httpSink(mode), Wake: sys.WatchOutbox()})

			ctx := testutil.Ctx(t, 30*time.Second)
			pid, err := actor.Spawn(ctx, sys, traceFlow, "order-7", actor.WithID("modes"))
			if err != nil {
				t.Fatal(err)
			}
			id, err := actor.Await(ctx, sys, traceFlow, pid)
			if err != nil {
				t.Fatal(err)
			}
			s.waitAccepted(t, 30*time.Second, id)
			got := s.event(id)
			if got.ID() != id || got.Type() != "com.example.traced" || got.Source() != "norn://modes" || got.Subject() != "order-7" {
				t.Errorf("sink got %v", got)
			}
			if tp, _ := got.Extensions()["traceparent"].(string); tp != testTraceParent {
				t.Errorf("traceparent = %q, want %q", tp, testTraceParent)
			}
			var data map[string]string
			if err := got.DataAs(&data); err != nil || data["order"] != "order-7" {
				t.Errorf("data = %v (%v)", data, err)
			}
			s.mu.Lock()
			req := s.last[id]
			s.mu.Unlock()
			ct := req.Header.Get("Content-Type")
			switch mode {
			case events.Binary:
				if req.Header.Get("Ce-Id") != id || ct != event.ApplicationJSON {
					t.Errorf("binary mode: ce-id %q, content type %q", req.Header.Get("Ce-Id"), ct)
				}
			case events.Structured:
				if !strings.HasPrefix(ct, event.ApplicationCloudEventsJSON) || req.Header.Get("Ce-Id") != "" {
					t.Errorf("structured mode: content type %q, ce-id %q", ct, req.Header.Get("Ce-Id"))
				}
			}
		})
	}
}

// TestRelayWokenByCommit: with an hour between polls, only the node's
// commit signal (WatchOutbox) can get the event out promptly.
func TestRelayWokenByCommit(t *testing.T) {
	noLeaks(t)
	st := openSQLite(t)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(emitFlow)})
	s := newSink(t, ok)
	cs := countClaims(st)
	startRelayer(t, events.RelayerConfig{Store: cs, Sink: s.httpSink(events.Binary), Wake: sys.WatchOutbox(), PollInterval: time.Hour})
	cs.waitClaims(t, 1, 10*time.Second) // the start-up claim found nothing

	for i := range 3 {
		ids := emit(t, sys, fmt.Sprintf("woken-%d", i), emitInput{Count: 2, Type: "com.example.woken"})
		s.waitAccepted(t, 10*time.Second, ids...)
	}
}

// TestRelayStoppedMidSend: a relayer stopped while the sink holds its
// request gives back that event and those it had claimed for later; the
// next relayer sends them all.
func TestRelayStoppedMidSend(t *testing.T) {
	noLeaks(t)
	st := openSQLite(t)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(emitFlow)})
	release := make(chan struct{})
	defer close(release)
	var first atomic.Bool
	s := newHoldingSink(t, ok, func(string, int) <-chan struct{} {
		if first.CompareAndSwap(false, true) {
			return release // never answered: the relayer stops first
		}
		return nil
	})
	// One sender and room for four: one event in flight, three queued.
	stop1 := startRelayer(t, events.RelayerConfig{Store: st, Sink: s.httpSink(events.Binary), Wake: sys.WatchOutbox(),
		Owner: "first", Concurrency: 1, BatchSize: 4})
	ids := emit(t, sys, "stopped", emitInput{Count: 4, Type: "com.example.stopped"})
	held := s.waitEntered(t, 30*time.Second)
	stop1()
	for _, id := range ids {
		rec := record(t, st, id)
		if rec.Status != persistence.OutboxPending || rec.Claimer != "" {
			t.Fatalf("%s after the stop: status %s, claimer %q; want pending and unclaimed", id, rec.Status, rec.Claimer)
		}
		if requests, _ := s.counts(id); requests != 0 && id != held {
			t.Fatalf("%s was sent, but only %s should have been", id, held)
		}
		// The send cut short is an attempt; the events never sent were
		// released without one.
		if want := map[bool]int{true: 1, false: 0}[id == held]; rec.Attempts != want {
			t.Fatalf("%s after the stop: %d attempts, want %d", id, rec.Attempts, want)
		}
	}
	startRelayer(t, events.RelayerConfig{Store: st, Sink: s.httpSink(events.Binary), Owner: "second",
		ClaimTTL: time.Hour}) // no claim has to expire
	s.waitAccepted(t, 30*time.Second, ids...)
	for _, id := range ids {
		waitStatus(t, st, id, persistence.OutboxSent, 10*time.Second)
	}
}

// TestRelayPrunesEndedEvents: events whose delivery ended (sent, invalid)
// are deleted once Retention has passed since they ended; a pending one
// (failing, retried later) stays. With Retention negative nothing goes.
func TestRelayPrunesEndedEvents(t *testing.T) {
	noLeaks(t)
	st := openSQLite(t)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(emitFlow)})
	s := newSink(t, func(id string, n int) int {
		switch {
		case strings.HasSuffix(id, "emit:2"):
			return http.StatusNotFound
		case strings.HasSuffix(id, "emit:3"):
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	backoff := supervisor.RetryPolicy{Initial: time.Hour, Multiplier: 1} // one failure keeps it pending
	stop := startRelayer(t, events.RelayerConfig{Store: st, Sink: s.httpSink(events.Binary), Wake: sys.WatchOutbox(),
		Backoff: backoff, Retention: -1})
	ids := emit(t, sys, "kept", emitInput{Count: 3, Type: "com.example.pruned"})
	waitStatus(t, st, ids[0], persistence.OutboxSent, 10*time.Second)
	waitStatus(t, st, ids[1], persistence.OutboxInvalid, 10*time.Second)
	testutil.Eventually(t, 10*time.Second, "a failed attempt at "+ids[2], func() bool { return record(t, st, ids[2]).Attempts == 1 })
	stop()
	if recs := listAll(t, st); len(recs) != 3 {
		t.Fatalf("with Retention < 0, %d events left, want 3", len(recs))
	}

	startRelayer(t, events.RelayerConfig{Store: st, Sink: s.httpSink(events.Binary), Wake: sys.WatchOutbox(),
		Backoff: backoff, Retention: 50 * time.Millisecond})
	testutil.Eventually(t, 10*time.Second, "ended events pruned", func() bool { return len(listAll(t, st)) == 1 })
	if rec := record(t, st, ids[2]); rec.Status != persistence.OutboxPending {
		t.Fatalf("the event left is %+v, want %s pending", rec, ids[2])
	}
}

// listAll lists every outbox record.
func listAll(t *testing.T, st persistence.Store) []persistence.OutboxRecord {
	t.Helper()
	recs, err := st.(persistence.Outbox).ListOutbox(context.Background(), "", "", 0)
	if err != nil {
		t.Fatalf("ListOutbox: %v", err)
	}
	return recs
}

// The child process of TestRelayKilledMidSend: a relayer on the parent's
// SQLite file, sending to the parent's sink, until it is killed.
const (
	childEnv     = "NORN_EVENTS_TEST_RELAY_CHILD"
	childDBEnv   = "NORN_EVENTS_TEST_DB"
	childSinkEnv = "NORN_EVENTS_TEST_SINK"
)

// TestRelayChildProcess is not a test: TestRelayKilledMidSend runs the
// test binary again with only it selected, to play a relayer in a process
// of its own.
func TestRelayChildProcess(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("the child process of TestRelayKilledMidSend")
	}
	// Never outlive the parent: its end closes our stdin.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	st, err := sqlite.Open(context.Background(), os.Getenv(childDBEnv), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The claim outlasts the moment between the request's arrival and the
	// kill by far; the survivor then waits for it to expire.
	r, err := events.NewRelayer(events.RelayerConfig{Store: st, Owner: "doomed", ClaimTTL: 2 * time.Second,
		PollInterval: 10 * time.Millisecond, Sink: &events.HTTPSink{URL: os.Getenv(childSinkEnv)}, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Run(context.Background()) // until kill -9
}

// TestRelayKilledMidSend: a relayer process killed with -9 while the sink
// holds its request leaves a claim behind; once it expires, another
// relayer sends the event (again: at least once), with the same ID.
func TestRelayKilledMidSend(t *testing.T) {
	noLeaks(t)
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(emitFlow)})
	release := make(chan struct{})
	defer close(release)
	s := newHoldingSink(t, ok, func(_ string, n int) <-chan struct{} {
		if n == 1 {
			return release
		}
		return nil
	})
	ids := emit(t, sys, "killed", emitInput{Count: 1, Type: "com.example.killed"})

	child := exec.Command(os.Args[0], "-test.run=^TestRelayChildProcess$", "-test.count=1")
	child.Env = append(os.Environ(), childEnv+"=1", childDBEnv+"="+path, childSinkEnv+"="+s.srv.URL)
	var out syncBuffer
	child.Stdout, child.Stderr = &out, &out
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() {
		_ = child.Wait()
		close(reaped)
	}()
	kill := func() {
		_ = child.Process.Signal(syscall.SIGKILL)
		<-reaped
		_ = stdin.Close()
	}
	t.Cleanup(kill)
	select {
	case id := <-s.entered:
		if id != ids[0] {
			t.Fatalf("sink got %s, want %s", id, ids[0])
		}
	case <-reaped:
		t.Fatalf("the child relayer exited before sending:\n%s", out.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("the child relayer sent nothing within 60s:\n%s", out.String())
	}
	kill()
	rec := record(t, st, ids[0])
	if rec.Status != persistence.OutboxPending || rec.Claimer != "doomed" {
		t.Fatalf("after kill -9: status %s, claimer %q; want pending, claimed by the dead relayer", rec.Status, rec.Claimer)
	}

	startRelayer(t, events.RelayerConfig{Store: st, Sink: s.httpSink(events.Binary), Owner: "survivor",
		PollInterval: 50 * time.Millisecond})
	s.waitAccepted(t, 30*time.Second, ids...)
	rec = waitStatus(t, st, ids[0], persistence.OutboxSent, 10*time.Second)
	if requests, oks := s.counts(ids[0]); requests != 2 || oks != 1 {
		t.Errorf("sink saw %d requests, accepted %d; want 2 (the dead relayer's and the survivor's) and 1", requests, oks)
	}
	if rec.Attempts != 1 {
		t.Errorf("Attempts = %d, want 1 (the killed attempt was never recorded)", rec.Attempts)
	}
}

// syncBuffer collects a child's output.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTwoRelayersPostgres: two relayers sharing one PostgreSQL database
// send each of 200 events once: claims keep them apart.
func TestTwoRelayersPostgres(t *testing.T) {
	noLeaks(t)
	url := testutil.PostgresURL(t)
	ctx := testutil.Ctx(t, 2*time.Minute)
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })

	const n = 200
	var ids []string
	for batch := range n / 20 {
		var step persistence.Step
		for i := range 20 {
			e := event.New()
			id := fmt.Sprintf("two-%03d", batch*20+i)
			e.SetID(id)
			e.SetType("com.example.shared")
			e.SetSource("norn://test")
			data, err := e.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			step.Emit = append(step.Emit, persistence.OutboxEvent{ID: id, Type: e.Type(), Data: data, At: time.Now()})
			ids = append(ids, id)
		}
		if _, err := st.Apply(ctx, step); err != nil {
			t.Fatal(err)
		}
	}
	s := newSink(t, ok)
	var sent [2]atomic.Int64
	for i := range 2 {
		startRelayer(t, events.RelayerConfig{Store: st, Owner: fmt.Sprintf("relay-%d", i), Concurrency: 4, BatchSize: 4,
			PollInterval: 10 * time.Millisecond, Sink: countingSink{s.httpSink(events.Binary), &sent[i]}})
	}
	s.waitAccepted(t, time.Minute, ids...)
	testutil.Eventually(t, 30*time.Second, "all events sent", func() bool {
		recs, err := st.ListOutbox(ctx, persistence.OutboxSent, "", 0)
		return err == nil && len(recs) == n
	})
	for _, id := range ids {
		if requests, oks := s.counts(id); requests != 1 || oks != 1 {
			t.Errorf("event %s: %d requests, %d accepted; want 1 and 1", id, requests, oks)
		}
	}
	t.Logf("relay-0 sent %d, relay-1 sent %d", sent[0].Load(), sent[1].Load())
}

// countingSink counts the sends of one relayer.
type countingSink struct {
	events.Sink
	n *atomic.Int64
}

func (c countingSink) Send(ctx context.Context, e event.Event) error {
	c.n.Add(1)
	return c.Sink.Send(ctx, e)
}

// noOutbox is a store whose driver has no outbox.
type noOutbox struct{ persistence.Store }

func (noOutbox) ClaimOutbox(context.Context, string, time.Time, time.Duration, int) ([]persistence.OutboxRecord, error) {
	return nil, persistence.ErrUnsupported
}

// TestRelayerWithoutOutbox: a relayer on a store without an outbox stops
// at once with the store's error rather than retrying for ever.
func TestRelayerWithoutOutbox(t *testing.T) {
	noLeaks(t)
	r, err := events.NewRelayer(events.RelayerConfig{Store: noOutbox{openSQLite(t)}, Sink: &events.HTTPSink{URL: "http://127.0.0.1:1/"},
		Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	// A relayer that retried would run until the deadline and return nil.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Run(ctx); !errors.Is(err, persistence.ErrUnsupported) {
		t.Fatalf("Run = %v, want ErrUnsupported", err)
	}
}

func TestNewRelayerConfig(t *testing.T) {
	st := openSQLite(t)
	s := &events.HTTPSink{URL: "http://127.0.0.1:1/"}
	for _, tc := range []struct {
		name string
		cfg  events.RelayerConfig
		want string
	}{
		{"no store", events.RelayerConfig{Sink: s}, "Store is required"},
		{"no sink", events.RelayerConfig{Store: st}, "Sink is required"},
		{"short claim", events.RelayerConfig{Store: st, Sink: s, ClaimTTL: time.Millisecond}, "ClaimTTL"},
		{"short max age", events.RelayerConfig{Store: st, Sink: s, MaxAge: time.Millisecond}, "MaxAge"},
		{"short poll", events.RelayerConfig{Store: st, Sink: s, PollInterval: time.Millisecond}, "PollInterval"},
		{"negative batch", events.RelayerConfig{Store: st, Sink: s, BatchSize: -1}, "BatchSize"},
		{"negative concurrency", events.RelayerConfig{Store: st, Sink: s, Concurrency: -1}, "Concurrency"},
		{"bad backoff", events.RelayerConfig{Store: st, Sink: s, Backoff: supervisor.RetryPolicy{Initial: time.Second, Multiplier: 0.5}}, "Backoff"},
		{"bad owner", events.RelayerConfig{Store: st, Sink: s, Owner: "a\x00b"}, "Owner"},
	} {
		_, err := events.NewRelayer(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewRelayer = %v, want an error about %s", tc.name, err, tc.want)
		}
	}
	r, err := events.NewRelayer(events.RelayerConfig{Store: st, Sink: s})
	if err != nil {
		t.Fatal(err)
	}
	if r.Owner() == "" {
		t.Error("no default owner")
	}
}

func TestRelayerRunsOnce(t *testing.T) {
	noLeaks(t)
	cs := countClaims(openSQLite(t))
	r, err := events.NewRelayer(events.RelayerConfig{Store: cs, Sink: &events.HTTPSink{URL: "http://127.0.0.1:1/"}, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	cs.waitClaims(t, 1, 10*time.Second) // running
	if err := r.Run(ctx); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("a second Run = %v, want an error", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v after its context ended, want nil", err)
	}
}

func TestRelayStoreClosed(t *testing.T) {
	noLeaks(t)
	st := openSQLite(t)
	r, err := events.NewRelayer(events.RelayerConfig{Store: st, Sink: &events.HTTPSink{URL: "http://127.0.0.1:1/"},
		PollInterval: 10 * time.Millisecond, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	err = r.Run(testutil.Ctx(t, 30*time.Second))
	if !errors.Is(err, persistence.ErrStoreClosed) {
		t.Fatalf("Run on a closed store = %v, want ErrStoreClosed", err)
	}
}

func TestHTTPSinkOutcomes(t *testing.T) {
	noLeaks(t)
	for _, tc := range []struct {
		code      int
		permanent bool
		ok        bool
	}{
		{http.StatusOK, false, true},
		{http.StatusAccepted, false, true},
		{http.StatusNoContent, false, true},
		{http.StatusBadRequest, true, false},
		{http.StatusNotFound, true, false},
		{http.StatusConflict, true, false},
		{http.StatusRequestTimeout, false, false},
		{http.StatusTooManyRequests, false, false},
		{http.StatusInternalServerError, false, false},
		{http.StatusBadGateway, false, false},
	} {
		s := newSink(t, func(string, int) int { return tc.code })
		e := event.New()
		e.SetID("x")
		e.SetType("com.example.t")
		e.SetSource("norn://t")
		err := s.httpSink(events.Binary).Send(context.Background(), e)
		switch {
		case tc.ok && err != nil, !tc.ok && err == nil:
			t.Errorf("HTTP %d: Send = %v", tc.code, err)
		case errors.Is(err, events.ErrPermanent) != tc.permanent:
			t.Errorf("HTTP %d: Send = %v; permanent: %v, want %v", tc.code, err, errors.Is(err, events.ErrPermanent), tc.permanent)
		}
	}

	// Nobody listening: a network error, retried.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	e := event.New()
	e.SetID("x")
	e.SetType("com.example.t")
	e.SetSource("norn://t")
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	err = (&events.HTTPSink{URL: "http://" + addr + "/", Client: client}).Send(context.Background(), e)
	if err == nil || errors.Is(err, events.ErrPermanent) {
		t.Fatalf("Send to a closed port = %v, want a transient error", err)
	}
}

// TestRelayWokenAcrossProcessesPostgres: two nodes on one PostgreSQL
// database, as two processes would be. Workflows emit on one node; the
// relayer runs on the other, which emits nothing, with an hour between
// polls: only the store's notification of the other node's commits can
// get the events out promptly.
func TestRelayWokenAcrossProcessesPostgres(t *testing.T) {
	noLeaks(t)
	url := testutil.PostgresURL(t)
	ctx := testutil.Ctx(t, 2*time.Minute)
	open := func() *postgres.Store {
		st, err := postgres.Open(ctx, url, postgres.Options{Logger: testutil.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	stA, stB := open(), open()
	sysA := testutil.StartNode(t, actor.Config{Store: stA, NodeID: "emitter", Workflows: actor.Register(emitFlow)})
	sysB := testutil.StartNode(t, actor.Config{Store: stB, NodeID: "relayer", Workflows: actor.Register()})
	s := newSink(t, ok)
	cs := countClaims(stB)
	startRelayer(t, events.RelayerConfig{Store: cs, Sink: s.httpSink(events.Binary), Wake: sysB.WatchOutbox(), PollInterval: time.Hour})
	cs.waitClaims(t, 1, 10*time.Second) // the start-up claim found nothing

	// Each round needs a wake-up of its own (the previous claim found
	// fewer events than it asked for): at least the later rounds can only
	// have been woken by a notification of the emitting commit.
	for i := range 3 {
		ids := emit(t, sysA, fmt.Sprintf("remote-%d", i), emitInput{Count: 2, Type: "com.example.remote"})
		s.waitAccepted(t, 10*time.Second, ids...)
	}
}

// TestRelayListensWithoutNode: a relayer given no Wake listens to a store
// that can notify (PostgreSQL) itself, so that it relays what any process
// emits at once.
func TestRelayListensWithoutNode(t *testing.T) {
	noLeaks(t)
	url := testutil.PostgresURL(t)
	ctx := testutil.Ctx(t, 2*time.Minute)
	open := func() *postgres.Store {
		st, err := postgres.Open(ctx, url, postgres.Options{Logger: testutil.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	stA, stB := open(), open()
	s := newSink(t, ok)
	startRelayer(t, events.RelayerConfig{Store: stB, Sink: s.httpSink(events.Binary), PollInterval: time.Hour})
	for i := range 3 {
		e := event.New()
		id := fmt.Sprintf("bare-%d", i)
		e.SetID(id)
		e.SetType("com.example.bare")
		e.SetSource("norn://test")
		data, err := e.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stA.Apply(ctx, persistence.Step{Emit: []persistence.OutboxEvent{{ID: id, Type: e.Type(), Data: data}}}); err != nil {
			t.Fatal(err)
		}
		s.waitAccepted(t, 10*time.Second, id)
	}
}
