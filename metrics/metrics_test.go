package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/metrics"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
	"github.com/nornlabs/norn/persistence/sqlite"
	"github.com/nornlabs/norn/supervisor"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.StopPostgres()
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
		code = 1
	}
	os.Exit(code)
}

// scrape fetches url over HTTP and parses the exposition text.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape: parse: %v", err)
	}
	return fams
}

// value is the value of the series of family name whose labels include
// labels (name=value pairs); for a histogram, its sample count. ok is false
// if there is no such series.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.Label {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

type storeKind struct {
	name string
	open func(t *testing.T, c persistence.CommitObserver) persistence.Store
}

var stores = []storeKind{
	{"sqlite", func(t *testing.T, c persistence.CommitObserver) persistence.Store {
		st, err := sqlite.Open(context.Background(), testutil.SQLitePath(t), sqlite.Options{Commits: c})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
	{"postgres", func(t *testing.T, c persistence.CommitObserver) persistence.Store {
		url := testutil.PostgresURL(t)
		st, err := postgres.Open(context.Background(), url, postgres.Options{Commits: c, Logger: testutil.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
}

// TestScrapeAfterKnownWorkload runs jobs with an activity and a timer, one
// workflow whose activity fails through its retries, and one that waits
// with mail it does not take and a receive timeout pending, then scrapes
// the handler over HTTP and checks every counter against the workload.
func TestScrapeAfterKnownWorkload(t *testing.T) {
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			const jobs = 7
			m, err := metrics.New(metrics.Options{ConstLabels: prometheus.Labels{"node": "n1"}, StatsTTL: time.Nanosecond})
			if err != nil {
				t.Fatal(err)
			}
			st := sk.open(t, m.Commits())
			m.ReadStats(st.(persistence.StatsReader))

			work := actor.Activity("work", func(ctx context.Context, n int) (int, error) { return n * 2, nil })
			job := actor.Workflow("job", func(ctx *actor.Context, n int) (int, error) {
				if err := ctx.Sleep(time.Millisecond); err != nil {
					return 0, err
				}
				return work.Run(ctx, n)
			})
			flakyAct := actor.Activity("charge", func(ctx context.Context, n int) (int, error) {
				return 0, errors.New("card declined")
			}, actor.WithRetry(supervisor.Exponential(time.Millisecond, 1, time.Millisecond, 3)))
			flaky := actor.Workflow("flaky", func(ctx *actor.Context, n int) (int, error) { return flakyAct.Run(ctx, n) })
			waiter := actor.Workflow("waiter", func(ctx *actor.Context, _ int) (int, error) {
				r, err := actor.Receive[int](ctx, mailbox.Timeout(time.Hour))
				return r.Value, err
			})
			sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(job, flaky, waiter), Hooks: m.Hooks()})
			srv := httptest.NewServer(m.Handler())
			defer srv.Close()
			ctx := testutil.Ctx(t, 60*time.Second)

			var pids []actor.PID
			for i := range jobs {
				pid, err := actor.Spawn(ctx, sys, job, i)
				if err != nil {
					t.Fatal(err)
				}
				pids = append(pids, pid)
			}
			fpid, err := actor.Spawn(ctx, sys, flaky, 1)
			if err != nil {
				t.Fatal(err)
			}
			wpid, err := actor.Spawn(ctx, sys, waiter, 0, actor.WithID("the-waiter"))
			if err != nil {
				t.Fatal(err)
			}
			// Not an int: stays in the waiter's mailbox.
			if err := sys.Send(ctx, wpid, "not for Receive[int]"); err != nil {
				t.Fatal(err)
			}
			for i, pid := range pids {
				if out, err := actor.Await(ctx, sys, job, pid); err != nil || out != 2*i {
					t.Fatalf("job %d: %v, %v", i, out, err)
				}
			}
			if _, err := actor.Await(ctx, sys, flaky, fpid); err == nil {
				t.Fatal("flaky succeeded")
			}

			want := []struct {
				name   string
				labels []string
				v      float64
			}{
				{"norn_instances_started_total", []string{"workflow", "job", "node", "n1"}, jobs},
				{"norn_instances_started_total", []string{"workflow", "flaky"}, 1},
				{"norn_instances_started_total", []string{"workflow", "waiter"}, 1},
				{"norn_instances_ended_total", []string{"workflow", "job", "status", "completed"}, jobs},
				{"norn_instances_ended_total", []string{"workflow", "flaky", "status", "failed"}, 1},
				{"norn_activity_attempts_total", []string{"workflow", "job", "activity", "work"}, jobs},
				{"norn_activity_attempts_total", []string{"workflow", "flaky", "activity", "charge"}, 3},
				{"norn_activity_attempt_errors_total", []string{"activity", "charge"}, 3},
				{"norn_activity_retries_total", []string{"activity", "charge"}, 2},
				{"norn_activity_failures_total", []string{"activity", "charge"}, 1},
				{"norn_activity_attempt_duration_seconds", []string{"activity", "work"}, jobs},
				{"norn_timers_fired_total", []string{"workflow", "job"}, jobs},
				{"norn_timer_lateness_seconds", nil, jobs},
				{"norn_live_activations", []string{"workflow", "job"}, 0},
				{"norn_live_activations", []string{"workflow", "flaky"}, 0},
				{"norn_live_activations", []string{"workflow", "waiter"}, 1},
				{"norn_activations_total", []string{"workflow", "job"}, jobs},
				{"norn_store_errors_total", []string{"op", "commit"}, 0},
				{"norn_store_errors_total", []string{"op", "stats"}, 0},
				{"norn_lease_takeovers_total", []string{"scope", "node"}, 0},
				// From the store: the waiter only is live (parked: waiting), with its
				// receive timeout pending and the string in its mailbox.
				{"norn_instances", []string{"workflow", "waiter", "status", "waiting"}, 1},
				{"norn_timers_pending", nil, 1},
				{"norn_messages_waiting", []string{"where", "mailbox"}, 1},
				{"norn_messages_waiting", []string{"where", "queue"}, 0},
				{"norn_mailbox_depth_max", nil, 1},
			}
			var fams map[string]*dto.MetricFamily
			// The activations' ends and the waiter's park race the awaits.
			testutil.Eventually(t, 20*time.Second, "scrape matches the workload", func() bool {
				fams = scrape(t, srv.URL)
				for _, w := range want {
					if v, ok := value(fams, w.name, w.labels...); !ok || v != w.v {
						return false
					}
				}
				return true
			})
			for _, w := range want {
				if v, ok := value(fams, w.name, w.labels...); !ok || v != w.v {
					t.Errorf("%s%v = %v (present %v), want %v", w.name, w.labels, v, ok, w.v)
				}
			}
			if _, ok := value(fams, "norn_instances", "workflow", "job"); ok {
				t.Error("ended jobs still counted in norn_instances")
			}
			// Group commits: every job took several steps (spawn, timer,
			// activity, end), all committed.
			steps, _ := value(fams, "norn_steps_committed_total")
			commits, _ := value(fams, "norn_commit_batch_steps")
			latencies, _ := value(fams, "norn_commit_duration_seconds")
			if steps < 4*jobs || commits == 0 || commits > steps || latencies != commits {
				t.Errorf("steps committed %v, commits %v, commit latencies %v", steps, commits, latencies)
			}
		})
	}
}

// countingStats counts reads of the store's counts.
type countingStats struct {
	reads atomic.Int32
	fail  atomic.Bool
}

func (c *countingStats) Stats(context.Context) (persistence.Stats, error) {
	n := c.reads.Add(1)
	if c.fail.Load() {
		return persistence.Stats{}, errors.New("store down")
	}
	return persistence.Stats{Timers: int(n)}, nil
}

// TestStatsCachedBetweenScrapes checks that scrapes within StatsTTL reuse
// one read of the store, and that a failed read leaves the store's gauges
// out and counts a store error.
func TestStatsCachedBetweenScrapes(t *testing.T) {
	m, err := metrics.New(metrics.Options{StatsTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStats{}
	m.ReadStats(cs)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	for range 3 {
		if v, ok := value(scrape(t, srv.URL), "norn_timers_pending"); !ok || v != 1 {
			t.Fatalf("timers pending = %v (present %v), want the first read's 1", v, ok)
		}
	}
	if n := cs.reads.Load(); n != 1 {
		t.Fatalf("store read %d times for 3 scrapes within the TTL", n)
	}

	m2, err := metrics.New(metrics.Options{StatsTTL: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	cs2 := &countingStats{}
	cs2.fail.Store(true)
	m2.ReadStats(cs2)
	srv2 := httptest.NewServer(m2.Handler())
	defer srv2.Close()
	fams := scrape(t, srv2.URL)
	if _, ok := value(fams, "norn_timers_pending"); ok {
		t.Error("a failed read still reports timers pending")
	}
	if v, _ := value(fams, "norn_store_errors_total", "op", "stats"); v != 1 {
		t.Errorf("stats errors = %v, want 1", v)
	}
}

// TestRegistererOption checks that the metrics go to the registry given,
// and that two sets of metrics on one registry conflict rather than mix.
func TestRegistererOption(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(metrics.Options{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	if !names["norn_store_errors_total"] || !names["norn_lease_takeovers_total"] {
		t.Errorf("registry has %v", names)
	}
	if _, err := metrics.New(metrics.Options{Registerer: reg}); err == nil {
		t.Error("a second registration on the same registry succeeded")
	}
	if _, err := metrics.New(metrics.Options{Registerer: registererOnly{reg}}); !errors.Is(err, metrics.ErrNoGatherer) {
		t.Errorf("registerer without gatherer: %v, want ErrNoGatherer", err)
	}
}

type registererOnly struct{ prometheus.Registerer }

// TestLeaseTakeoverCounted leaves an instance under the expired lease of a
// node that is gone; the node that recovers it counts a take-over.
func TestLeaseTakeoverCounted(t *testing.T) {
	m, err := metrics.New(metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := stores[0].open(t, m.Commits())
	ctx := testutil.Ctx(t, 30*time.Second)
	wf := actor.Workflow("orphan", func(ctx *actor.Context, n int) (int, error) { return n + 1, nil })
	in := []byte("41")
	_, err = st.Apply(ctx, persistence.Step{
		Create: &persistence.Instance{ID: "orphan-1", Workflow: wf.Name(), Status: persistence.StatusRunning, Input: in,
			HistoryLen: 1, LeaseOwner: "ghost", LeaseEpoch: 1, LeaseExpires: time.Now().Add(-time.Minute)},
		History: []persistence.Event{{Seq: 0, Kind: string(actor.EventStarted), Name: wf.Name(), Ref: "json", Payload: in, At: time.Now()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), Hooks: m.Hooks(), RecoveryInterval: 50 * time.Millisecond})
	if n, err := actor.Await(ctx, sys, wf, "orphan-1"); err != nil || n != 42 {
		t.Fatalf("orphan: %v, %v", n, err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	fams := scrape(t, srv.URL)
	if v, _ := value(fams, "norn_lease_takeovers_total", "scope", "instance"); v != 1 {
		t.Errorf("instance take-overs = %v, want 1", v)
	}
	if v, _ := value(fams, "norn_instances_ended_total", "workflow", "orphan", "status", "completed"); v != 1 {
		t.Errorf("orphans completed = %v, want 1", v)
	}
}

// BenchmarkHooksPerWorkflow measures the hook events of one three-activity
// workflow (spawn, activation, three attempts, end, stop): the metrics'
// cost per workflow, to compare with the workflow's own.
func BenchmarkHooksPerWorkflow(b *testing.B) {
	m, err := metrics.New(metrics.Options{})
	if err != nil {
		b.Fatal(err)
	}
	h := m.Hooks()
	ctx := context.Background()
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprintf("chain-%d", i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			id := ids[i%len(ids)]
			i++
			ev := func(k actor.HookKind, name string) actor.HookEvent {
				return actor.HookEvent{Kind: k, Instance: id, Workflow: "chain", Name: name, Attempt: 1, Duration: time.Millisecond}
			}
			h.Observe(ctx, ev(actor.HookInstanceStarted, ""))
			h.Observe(ctx, ev(actor.HookInstanceActivated, ""))
			for _, a := range []string{"a", "b", "c"} {
				h.Observe(ctx, ev(actor.HookActivityStarted, a))
				h.Observe(ctx, ev(actor.HookActivityFinished, a))
			}
			h.Observe(ctx, ev(actor.HookInstanceCompleted, ""))
			h.Observe(ctx, ev(actor.HookInstanceStopped, ""))
		}
	})
}

// TestCommitObserver checks what one committed and one failed transaction
// add up to.
func TestCommitObserver(t *testing.T) {
	m, err := metrics.New(metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := m.Commits()
	c.ObserveCommit(persistence.CommitInfo{Driver: "sqlite", Steps: 12, Duration: 3 * time.Millisecond})
	c.ObserveCommit(persistence.CommitInfo{Driver: "sqlite", Steps: 5, Duration: time.Second, Err: errors.New("disk I/O error")})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	fams := scrape(t, srv.URL)
	for _, w := range []struct {
		name   string
		labels []string
		v      float64
	}{
		{"norn_steps_committed_total", nil, 12},
		{"norn_commit_batch_steps", nil, 2},
		{"norn_commit_duration_seconds", nil, 2},
		{"norn_store_errors_total", []string{"op", "commit"}, 1},
	} {
		if v, _ := value(fams, w.name, w.labels...); v != w.v {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, v, w.v)
		}
	}
	if s := fams["norn_commit_batch_steps"].Metric[0].Histogram.GetSampleSum(); s != 17 {
		t.Errorf("batch steps sum = %v, want 17", s)
	}
}
