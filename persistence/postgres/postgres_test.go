package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
	"github.com/nornlabs/norn/persistence/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.StopPostgres()
	// After StopPostgres: the goroutine waiting for the server process
	// must be gone too.
	if err := goleak.Find(); err != nil && code == 0 {
		slog.Error("leaked goroutines", "err", err)
		code = 1
	}
	os.Exit(code)
}

var bg = context.Background()

func openURL(t testing.TB, url string, opts postgres.Options) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	st, err := postgres.Open(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func open(t *testing.T) persistence.Store {
	return openURL(t, testutil.PostgresURL(t), postgres.Options{})
}

func TestConformance(t *testing.T) { storetest.Run(t, open) }

// One writer and large batches: every concurrent step shares a transaction
// with others, so the savepoint logic is what the suite exercises.
func TestConformanceOneWriter(t *testing.T) {
	storetest.Run(t, func(t *testing.T) persistence.Store {
		return openURL(t, testutil.PostgresURL(t), postgres.Options{Writers: 1, MaxBatch: 512})
	})
}

// Two stores on one database behave like two processes.
func TestConformanceShared(t *testing.T) {
	storetest.RunShared(t, func(t *testing.T) (persistence.Store, persistence.Store) {
		url := testutil.PostgresURL(t)
		return openURL(t, url, postgres.Options{}), openURL(t, url, postgres.Options{})
	})
}

func create(t testing.TB, st persistence.Store, id string) {
	t.Helper()
	_, err := st.Apply(bg, persistence.Step{
		Create:  &persistence.Instance{ID: id, Workflow: "wf", LeaseOwner: "n", LeaseEpoch: 1, LeaseExpires: time.Now().Add(time.Hour)},
		History: []persistence.Event{{Seq: 0, Kind: "started"}},
	})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
}

// createMany creates instances concurrently (so in shared commits).
func createMany(t testing.TB, st persistence.Store, ids []string) {
	t.Helper()
	var wg sync.WaitGroup
	work := make(chan string)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				if _, err := st.Apply(bg, persistence.Step{
					Create:  &persistence.Instance{ID: id, Workflow: "wf", LeaseOwner: "n", LeaseEpoch: 1, LeaseExpires: time.Now().Add(time.Hour)},
					History: []persistence.Event{{Seq: 0, Kind: "started"}},
				}); err != nil {
					t.Errorf("create %s: %v", id, err)
				}
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
}

func TestConcurrentOpen(t *testing.T) {
	url := testutil.PostgresURL(t)
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	stores := make([]*postgres.Store, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = postgres.Open(bg, url, postgres.Options{})
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("open %d: %v", i, errs[i])
		}
		defer stores[i].Close()
	}
	var versions, tables int
	if err := stores[0].Pool().QueryRow(bg, `SELECT count(*) FROM schema_migrations`).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if err := stores[0].Pool().QueryRow(bg, `SELECT count(*) FROM pg_tables WHERE schemaname = 'norn'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join("migrations", "*.sql"))
	if versions != len(files) || tables != 8 {
		t.Fatalf("after concurrent opens: %d migrations recorded, %d tables", versions, tables)
	}
	// Every store works on the shared schema.
	for i, st := range stores {
		create(t, st, fmt.Sprint("i", i))
	}
	all, err := stores[3].List(bg, persistence.ListFilter{})
	if err != nil || len(all) != n {
		t.Fatalf("list = %d instances, %v", len(all), err)
	}
}

func TestBadURL(t *testing.T) {
	for _, url := range []string{
		"postgres://norn:s3cret-pw@db.example:notaport/norn",
		"postgres://norn:s3cret-pw@db.example:5432/norn?sslmode=bogus",
		"host=db.example password=s3cret-pw port=x",
		"::not a url",
	} {
		start := time.Now()
		_, err := postgres.Open(bg, url, postgres.Options{})
		if err == nil {
			t.Fatalf("Open(%q) succeeded", url)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Open(%q) took %v", url, d)
		}
		msg := err.Error()
		if strings.Contains(msg, "s3cret-pw") {
			t.Errorf("Open(%q) error shows the password: %s", url, msg)
		}
		if strings.Contains(url, "db.example") && !strings.Contains(msg, "db.example") {
			t.Errorf("Open(%q) error does not name the host: %s", url, msg)
		}
		t.Logf("%s: %v", url, err)
	}
	if _, err := postgres.Open(bg, "postgres://localhost/x", postgres.Options{Schema: "Bad-Name"}); err == nil {
		t.Error("bad schema name accepted")
	}
}

func TestUnreachable(t *testing.T) {
	// A port nobody listens on: refused at once.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start := time.Now()
	_, err = postgres.Open(bg, "postgres://norn:pw@"+addr+"/norn?sslmode=disable", postgres.Options{})
	if err == nil || !strings.Contains(err.Error(), addr) || strings.Contains(err.Error(), ":pw@") {
		t.Fatalf("Open on a closed port: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Open on a closed port took %v", d)
	}
	t.Logf("closed port: %v", err)

	// A server that accepts connections and never answers: ConnectTimeout.
	l, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var conns sync.WaitGroup
	var mu sync.Mutex
	var held []net.Conn
	conns.Add(1)
	go func() {
		defer conns.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		l.Close()
		conns.Wait()
		for _, c := range held {
			c.Close()
		}
	}()
	addr = l.Addr().String()
	start = time.Now()
	_, err = postgres.Open(bg, "postgres://norn@"+addr+"/norn?sslmode=disable", postgres.Options{ConnectTimeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Open on a silent server: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Open on a silent server took %v", d)
	}
	t.Logf("silent server: %v", err)
}

func TestClosedStore(t *testing.T) {
	st := openURL(t, testutil.PostgresURL(t), postgres.Options{})
	listenDone := make(chan error, 1)
	go func() { listenDone <- st.Listen(bg, func([]string) {}) }()
	create(t, st, "a")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-listenDone:
		if !errors.Is(err, persistence.ErrStoreClosed) {
			t.Fatalf("Listen returned %v on Close", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Listen still running after Close")
	}
	_, err := st.Apply(bg, persistence.Step{Send: []persistence.NewMessage{{ID: "x", Channel: "c"}}})
	if !errors.Is(err, persistence.ErrStoreClosed) {
		t.Fatalf("Apply after Close = %v", err)
	}
	if _, err := st.AcquireLease(bg, "a", "n", time.Second); !errors.Is(err, persistence.ErrStoreClosed) {
		t.Fatalf("AcquireLease after Close = %v", err)
	}
	if err := st.Listen(bg, func([]string) {}); !errors.Is(err, persistence.ErrStoreClosed) {
		t.Fatalf("Listen after Close = %v", err)
	}
}

// Close lets queued steps finish; nothing queued is lost or left hanging.
func TestCloseDrains(t *testing.T) {
	st := openURL(t, testutil.PostgresURL(t), postgres.Options{Writers: 2})
	create(t, st, "a")
	var wg sync.WaitGroup
	var ok, closed atomic.Int64
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.Apply(bg, persistence.Step{Send: []persistence.NewMessage{{ID: fmt.Sprint(i), Target: "a"}}})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, persistence.ErrStoreClosed):
				closed.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	time.Sleep(5 * time.Millisecond)
	st.Close()
	wg.Wait()
	t.Logf("%d applied, %d refused by Close", ok.Load(), closed.Load())
	if ok.Load()+closed.Load() != 200 {
		t.Fatalf("%d applied + %d refused != 200", ok.Load(), closed.Load())
	}
}

// Steps that fail in different ways share batches with steps that succeed;
// each gets its own outcome, as if applied alone.
func TestMixedBatch(t *testing.T) {
	st := openURL(t, testutil.PostgresURL(t), postgres.Options{Writers: 1, MaxBatch: 512})
	const n = 120
	for i := range n {
		create(t, st, fmt.Sprint("i", i))
	}
	type outcome struct {
		res persistence.StepResult
		err error
	}
	out := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprint("i", i)
			step := persistence.Step{Instance: id, Epoch: 1, History: []persistence.Event{{Seq: 1, Kind: "x"}},
				Send: []persistence.NewMessage{{ID: "m" + id, Target: fmt.Sprint("i", (i+1)%n)}}}
			switch i % 6 {
			case 1:
				step.Epoch = 7 // fenced
			case 2:
				step.History[0].Seq = 9 // gap
			case 3:
				step = persistence.Step{Create: &persistence.Instance{ID: id, Workflow: "other"}} // exists
			case 4:
				step.Consume = []int64{1 << 40} // gone
			case 5:
				step.Subscribe = []persistence.Subscription{{Channel: "c", Mode: "bogus"}} // invalid, after SQL
			}
			res, err := st.Apply(bg, step)
			out[i] = outcome{res, err}
		}()
	}
	wg.Wait()
	for i, o := range out {
		id := fmt.Sprint("i", i)
		var want error
		switch i % 6 {
		case 1:
			want = persistence.ErrFenced
		case 2:
			want = persistence.ErrHistoryGap
		case 4:
			want = persistence.ErrMessageGone
		case 5:
			want = persistence.ErrInvalidRecord
		}
		if want != nil {
			if !errors.Is(o.err, want) {
				t.Errorf("%s: error %v, want %v", id, o.err, want)
			}
		} else if o.err != nil {
			t.Errorf("%s: %v", id, o.err)
		}
		in, err := st.Instance(bg, id)
		if err != nil {
			t.Fatal(err)
		}
		wantLen := int64(1)
		if i%6 == 0 {
			wantLen = 2
			if len(o.res.Woken) != 1 {
				t.Errorf("%s: woken %v", id, o.res.Woken)
			}
		}
		if in.HistoryLen != wantLen {
			t.Errorf("%s: history length %d, want %d", id, in.HistoryLen, wantLen)
		}
		if i%6 == 3 && (o.res.Existing == nil || o.res.Existing.Workflow != "wf") {
			t.Errorf("%s: existing = %+v", id, o.res.Existing)
		}
		ms, _ := st.Mailbox(bg, fmt.Sprint("i", (i+1)%n), 0)
		if got := len(ms) == 1; got != (i%6 == 0) {
			t.Errorf("message from %s delivered: %v", id, got)
		}
	}
}

// Two stores on one database behave like two processes: competing consumers
// on both never take one message twice.
func TestCompetingAcrossStores(t *testing.T) {
	url := testutil.PostgresURL(t)
	stores := []*postgres.Store{openURL(t, url, postgres.Options{}), openURL(t, url, postgres.Options{})}
	const consumers, msgs = 8, 200
	for c := range consumers {
		id := fmt.Sprint("c", c)
		create(t, stores[c%2], id)
		if _, err := stores[c%2].Apply(bg, persistence.Step{Instance: id, Epoch: 1,
			Subscribe: []persistence.Subscription{{Channel: "q", Mode: persistence.Competing}}}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := stores[i%2].Apply(bg, persistence.Step{Send: []persistence.NewMessage{{ID: fmt.Sprint("m", i), Channel: "q"}}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	var mu sync.Mutex
	got := map[string]string{}
	for c := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, id, seq := stores[c%2], fmt.Sprint("c", c), int64(1)
			for {
				ms, err := st.Mailbox(bg, id, 10)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ms) == 0 {
					return
				}
				m := ms[c%len(ms)]
				_, err = st.Apply(bg, persistence.Step{Instance: id, Epoch: 1, Consume: []int64{m.Seq},
					History: []persistence.Event{{Seq: seq, Kind: "received", Ref: m.ID}}})
				if errors.Is(err, persistence.ErrMessageGone) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				seq++
				mu.Lock()
				if prev, dup := got[m.ID]; dup {
					t.Errorf("message %s consumed by %s and %s", m.ID, prev, id)
				}
				got[m.ID] = id
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(got) != msgs {
		t.Fatalf("consumed %d messages, want %d", len(got), msgs)
	}
}

// Concurrent subscriptions to one channel in different modes, from two
// stores: the channel never ends up with two modes.
func TestModeRaceAcrossStores(t *testing.T) {
	url := testutil.PostgresURL(t)
	stores := []*postgres.Store{openURL(t, url, postgres.Options{}), openURL(t, url, postgres.Options{})}
	const n = 40
	modes := []persistence.Mode{persistence.Broadcast, persistence.Competing, persistence.Direct}
	for i := range n {
		create(t, stores[0], fmt.Sprint("i", i))
	}
	for round := range 5 {
		ch := fmt.Sprint("ch", round)
		var wg sync.WaitGroup
		var conflicts atomic.Int64
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := stores[i%2].Apply(bg, persistence.Step{Instance: fmt.Sprint("i", i), Epoch: 1,
					Subscribe: []persistence.Subscription{{Channel: ch, Mode: modes[(i+round)%3]}}})
				if errors.Is(err, persistence.ErrChannelMode) {
					conflicts.Add(1)
				} else if err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		var distinct int
		if err := stores[0].Pool().QueryRow(bg, `SELECT count(DISTINCT mode) FROM subscriptions WHERE channel = $1`, ch).Scan(&distinct); err != nil {
			t.Fatal(err)
		}
		if distinct != 1 || conflicts.Load() == 0 {
			t.Fatalf("round %d: %d modes on the channel, %d conflicts", round, distinct, conflicts.Load())
		}
	}
}

// A message sent while its target ends either is dropped with the target's
// mailbox or is not delivered at all: it never outlives the target. That
// holds for steps that send to a few instances and for steps that send to
// so many that they lock the instances' buckets instead.
func TestSendRacesEnd(t *testing.T) {
	url := testutil.PostgresURL(t)
	a, b := openURL(t, url, postgres.Options{}), openURL(t, url, postgres.Options{})
	const n = 160
	for i := range n {
		create(t, a, fmt.Sprint("t", i))
	}
	var wg sync.WaitGroup
	for j := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var all []persistence.NewMessage
			for i := range n {
				all = append(all, persistence.NewMessage{ID: fmt.Sprint("all-", j, "-", i), Target: fmt.Sprint("t", i)})
			}
			if _, err := b.Apply(bg, persistence.Step{Send: all}); err != nil {
				t.Error(err)
			}
		}()
	}
	for i := range n {
		id := fmt.Sprint("t", i)
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, err := a.Apply(bg, persistence.Step{Instance: id, Epoch: 1, Status: persistence.StatusCompleted}); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			for j := range 5 {
				if _, err := b.Apply(bg, persistence.Step{Send: []persistence.NewMessage{{ID: fmt.Sprint(id, "-", j), Target: id}}}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	var left int
	if err := a.Pool().QueryRow(bg, `SELECT count(*) FROM messages`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d messages left in mailboxes of ended instances", left)
	}
}

type recorder struct {
	mu     sync.Mutex
	ids    map[string]int
	nils   int
	notify chan struct{}
}

func newRecorder() *recorder {
	return &recorder{ids: map[string]int{}, notify: make(chan struct{}, 1000)}
}

func (r *recorder) fn(ids []string) {
	r.mu.Lock()
	if ids == nil {
		r.nils++
	}
	for _, id := range ids {
		r.ids[id]++
	}
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids, r.nils = map[string]int{}, 0
}

// wait waits until cond holds (checked under the lock).
func (r *recorder) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.notify:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func listen(t *testing.T, st *postgres.Store, rec *recorder) {
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- st.Listen(ctx, rec.fn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Listen returned %v, want context.Canceled", err)
		}
	})
	rec.wait(t, "the listener to start", func() bool { return rec.nils >= 1 })
}

func TestListenAcrossStores(t *testing.T) {
	url := testutil.PostgresURL(t)
	a, b := openURL(t, url, postgres.Options{}), openURL(t, url, postgres.Options{})
	ra, rb := newRecorder(), newRecorder()
	listen(t, a, ra)
	listen(t, b, rb)
	// A spawn under a lease runs where it was made: no wake-up. One that
	// nobody leased is a wake-up, as its owner may be elsewhere.
	create(t, a, "leased")
	for _, id := range []string{"x", "y", "z"} {
		if _, err := a.Apply(bg, persistence.Step{Create: &persistence.Instance{ID: id, Workflow: "wf", LeaseEpoch: 1},
			History: []persistence.Event{{Seq: 0, Kind: "started"}}}); err != nil {
			t.Fatal(err)
		}
	}
	rb.wait(t, "b to hear the spawns", func() bool { return rb.ids["x"] == 1 && rb.ids["y"] == 1 && rb.ids["z"] == 1 })
	// Notifications arrive in commit order, and the leased spawn's would
	// have committed first.
	rb.mu.Lock()
	heardLeased := rb.ids["leased"]
	rb.mu.Unlock()
	if heardLeased != 0 {
		t.Fatal("a spawn under a lease woke the other store")
	}
	if _, err := b.Apply(bg, persistence.Step{Instance: "z", Epoch: 1,
		Subscribe: []persistence.Subscription{{Channel: "news", Mode: persistence.Broadcast}}}); err != nil {
		t.Fatal(err)
	}
	res, err := a.Apply(bg, persistence.Step{Send: []persistence.NewMessage{
		{ID: "1", Target: "x"}, {ID: "2", Target: "y"}, {ID: "3", Channel: "news"}}})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(res.Woken)
	if fmt.Sprint(res.Woken) != "[x y z]" {
		t.Fatalf("woken = %v", res.Woken)
	}
	rb.wait(t, "b to hear x, y, z", func() bool { return rb.ids["x"] == 2 && rb.ids["y"] == 2 && rb.ids["z"] == 2 })
	// So are cancel requests.
	if err := a.RequestCancel(bg, "y", "stop"); err != nil {
		t.Fatal(err)
	}
	rb.wait(t, "b to hear the cancel", func() bool { return rb.ids["y"] == 3 })

	// Many wake-ups in one batch: split into several payloads or a rescan.
	var big []persistence.NewMessage
	var ids []string
	for i := range 3000 {
		id := fmt.Sprintf("instance-with-a-long-name-%04d", i)
		ids = append(ids, id)
		big = append(big, persistence.NewMessage{ID: fmt.Sprint(i), Target: id})
	}
	createMany(t, b, ids) // leased: no wake-ups
	ra.reset()
	if _, err := b.Apply(bg, persistence.Step{Send: big[:200]}); err != nil {
		t.Fatal(err)
	}
	ra.wait(t, "a to hear 200 wake-ups", func() bool { return len(ra.ids) == 200 && ra.nils == 0 })
	if _, err := b.Apply(bg, persistence.Step{Send: big}); err != nil {
		t.Fatal(err)
	}
	ra.wait(t, "a to be told to rescan", func() bool { return ra.nils == 1 })
	// A store does not hear its own wake-ups.
	time.Sleep(100 * time.Millisecond)
	ra.mu.Lock()
	defer ra.mu.Unlock()
	if ra.ids["x"] != 0 || len(ra.ids) != 200 {
		t.Fatalf("a heard its own wake-ups: %d ids", len(ra.ids))
	}
}

func listenerPIDs(t *testing.T, st *postgres.Store) []int {
	t.Helper()
	rows, _ := st.Pool().Query(bg, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'norn listener'`)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

func TestListenReconnects(t *testing.T) {
	url := testutil.PostgresURL(t)
	a, b := openURL(t, url, postgres.Options{}), openURL(t, url, postgres.Options{})
	create(t, a, "x")
	rb := newRecorder()
	listen(t, b, rb)
	for round := 1; round <= 2; round++ {
		pids := listenerPIDs(t, a)
		if len(pids) != 1 {
			t.Fatalf("listener backends: %v", pids)
		}
		if _, err := a.Pool().Exec(bg, `SELECT pg_terminate_backend($1)`, pids[0]); err != nil {
			t.Fatal(err)
		}
		rb.wait(t, "the rescan after reconnecting", func() bool { return rb.nils == 1+round })
		rb.mu.Lock()
		rb.ids = map[string]int{}
		rb.mu.Unlock()
		if _, err := a.Apply(bg, persistence.Step{Send: []persistence.NewMessage{{ID: fmt.Sprint(round), Target: "x"}}}); err != nil {
			t.Fatal(err)
		}
		rb.wait(t, "a wake-up after reconnecting", func() bool { return rb.ids["x"] == 1 })
	}
}

func TestPostgresRestart(t *testing.T) {
	url := testutil.PostgresURL(t)
	st := openURL(t, url, postgres.Options{WriteTimeout: 5 * time.Second})
	create(t, st, "a")
	rec := newRecorder()
	listen(t, st, rec)
	other := openURL(t, url, postgres.Options{})

	// Apply continuously while the server restarts.
	stop := make(chan struct{})
	var failed, slow atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			_, err := st.Apply(bg, persistence.Step{Send: []persistence.NewMessage{{ID: fmt.Sprint("during-", i), Target: "a"}}})
			if time.Since(start) > 10*time.Second {
				slow.Add(1)
			}
			if err != nil {
				failed.Add(1)
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	// halt stops the goroutine; deferred too, since RestartPostgres skips
	// the test on a server it did not start.
	var once sync.Once
	halt := func() { once.Do(func() { close(stop); wg.Wait() }) }
	defer halt()
	time.Sleep(100 * time.Millisecond)
	testutil.RestartPostgres(t)
	time.Sleep(100 * time.Millisecond)
	halt()
	if failed.Load() == 0 {
		t.Error("no Apply failed while the server was down")
	}
	if slow.Load() > 0 {
		t.Error("an Apply hung during the outage")
	}
	t.Logf("%d Apply calls failed during the restart", failed.Load())

	// Works again (a broken pooled connection may fail one more call).
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := st.Apply(bg, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{{Seq: 1, Kind: "after"}}})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Apply after restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	in, err := st.Instance(bg, "a")
	if err != nil || in.HistoryLen != 2 {
		t.Fatalf("after restart: %+v, %v", in, err)
	}
	// The listener came back and asked for a rescan, and hears wake-ups.
	rec.wait(t, "the rescan after the restart", func() bool { return rec.nils >= 2 })
	deadline = time.Now().Add(15 * time.Second)
	for i := 0; ; i++ {
		_, err := other.Apply(bg, persistence.Step{Send: []persistence.NewMessage{{ID: fmt.Sprint("after-", i), Target: "a"}}})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Apply on the other store after restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rec.wait(t, "a wake-up after the restart", func() bool { return rec.ids["a"] >= 1 })
}

// Everything at once, from two stores: spawns, sends, publishes, competing
// consumption, subscriptions, timers, cancels, lease renewals and ends. No
// step may fail other than as the rules say, and none may stall (a deadlock
// between batches costs deadlock_timeout, one second, per victim).
func TestMixedWorkloadAcrossStores(t *testing.T) {
	url := testutil.PostgresURL(t)
	stores := []*postgres.Store{openURL(t, url, postgres.Options{}), openURL(t, url, postgres.Options{})}
	const n, steps = 40, 25
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprint("w", i)
	}
	createMany(t, stores[0], ids)
	var slowest atomic.Int64
	timed := func(f func() error) error {
		start := time.Now()
		err := f()
		if d := int64(time.Since(start)); d > slowest.Load() {
			slowest.Store(d)
		}
		return err
	}
	stop := make(chan struct{})
	var bgWG sync.WaitGroup
	bgWG.Add(1)
	go func() { // lease renewals and cancel requests
		defer bgWG.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if err := timed(func() error { _, err := stores[i%2].RenewLeases(bg, "n", time.Hour); return err }); err != nil {
				t.Error(err)
			}
			err := timed(func() error { return stores[(i+1)%2].RequestCancel(bg, ids[i%n], "test") })
			if err != nil && !errors.Is(err, persistence.ErrInstanceDone) {
				t.Error(err)
			}
		}
	}()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, id, seq := stores[i%2], ids[i], int64(1)
			apply := func(step persistence.Step, allowed ...error) {
				step.Instance, step.Epoch = id, 1
				step.History = []persistence.Event{{Seq: seq, Kind: "step"}}
				err := timed(func() error { _, err := st.Apply(bg, step); return err })
				if err == nil {
					seq++
					return
				}
				for _, a := range allowed {
					if errors.Is(err, a) {
						return
					}
				}
				t.Errorf("%s step %d: %v", id, seq, err)
			}
			apply(persistence.Step{Subscribe: []persistence.Subscription{
				{Channel: "news", Mode: persistence.Broadcast}, {Channel: "jobs", Mode: persistence.Competing}}})
			for j := range steps {
				other := ids[(i+j+1)%n]
				switch j % 5 {
				case 0:
					apply(persistence.Step{Send: []persistence.NewMessage{{ID: fmt.Sprint(id, "-", j), Target: other}},
						AddTimers: []persistence.Timer{{ID: fmt.Sprint("t", j), Due: time.Now()}}})
				case 1:
					apply(persistence.Step{Send: []persistence.NewMessage{{ID: fmt.Sprint(id, "-", j), Channel: "news"},
						{ID: fmt.Sprint(id, "-", j, "j"), Channel: "jobs"}}})
				case 2, 3:
					ms, err := st.Mailbox(bg, id, 3)
					if err != nil {
						t.Error(err)
						return
					}
					if len(ms) > 0 {
						apply(persistence.Step{Consume: []int64{ms[len(ms)-1].Seq}}, persistence.ErrMessageGone)
					}
				case 4:
					apply(persistence.Step{FireTimers: []string{fmt.Sprint("t", j-4)}, CancelTimers: []string{"nope"},
						Create: nil})
				}
			}
			apply(persistence.Step{Status: persistence.StatusCompleted, Output: []byte(`1`)})
		}()
	}
	wg.Wait()
	close(stop)
	bgWG.Wait()
	t.Logf("slowest call: %v", time.Duration(slowest.Load()))
	if d := time.Duration(slowest.Load()); d > 5*time.Second {
		t.Errorf("a call took %v", d)
	}
	var left int
	if err := stores[0].Pool().QueryRow(bg, `SELECT count(*) FROM messages WHERE target IS NOT NULL`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		rows, _ := stores[0].Pool().Query(bg, `SELECT channel, count(*) FROM messages WHERE target IS NOT NULL GROUP BY channel`)
		for rows.Next() {
			var ch string
			var c int
			rows.Scan(&ch, &c)
			t.Logf("channel %q: %d", ch, c)
		}
		rows.Close()
		t.Errorf("%d messages left in mailboxes of ended instances", left)
	}
}
