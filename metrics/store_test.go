package metrics_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/metrics"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// wrapped is a store wrapper as users write them (tracing, auditing): it
// embeds the Store and overrides nothing the metrics need.
type wrapped struct{ persistence.Store }

// stepCounter sums the steps of the commits that succeeded.
type stepCounter struct {
	mu    sync.Mutex
	steps int
}

func (c *stepCounter) ObserveCommit(ci persistence.CommitInfo) {
	if ci.Err == nil {
		c.mu.Lock()
		c.steps += ci.Steps
		c.mu.Unlock()
	}
}

func (c *stepCounter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.steps
}

// TestObserveStoreThroughStoreURL: a store opened by URL, behind a
// wrapper, has its commits counted, as many steps as the driver committed,
// and its counts read on scrape.
func TestObserveStoreThroughStoreURL(t *testing.T) {
	t.Parallel()
	urls := map[string]func(t testing.TB) string{
		"sqlite":   func(t testing.TB) string { return "sqlite://" + testutil.SQLitePath(t) },
		"postgres": testutil.PostgresURL,
	}
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			raw, err := storeurl.Open(ctx, url(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { raw.Close() })
			var truth stepCounter
			raw.ObserveCommits(&truth)
			st := wrapped{raw}

			m, err := metrics.New(metrics.Options{StatsTTL: time.Nanosecond})
			if err != nil {
				t.Fatal(err)
			}
			stop := m.ObserveStore(st)
			defer stop()

			hello := actor.Workflow("hello", func(ctx *actor.Context, n int) (int, error) { return n + 1, nil })
			sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(hello), Hooks: m.Hooks(), Logger: testutil.Logger()})
			if err != nil {
				t.Fatal(err)
			}
			const jobs = 5
			for i := range jobs {
				pid, err := actor.Spawn(ctx, sys, hello, i)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := actor.Await(ctx, sys, hello, pid); err != nil {
					t.Fatal(err)
				}
			}
			if err := sys.Stop(ctx); err != nil {
				t.Fatal(err)
			}

			srv := httptest.NewServer(m.Handler())
			defer srv.Close()
			// A commit is reported after its callers were answered: wait
			// until the last ones are in.
			var got float64
			testutil.Eventually(t, 10*time.Second, "norn_steps_committed_total equals the steps the driver committed", func() bool {
				got, _ = value(scrape(t, srv.URL), "norn_steps_committed_total")
				return got == float64(truth.get())
			})
			// Each instance commits at least its spawn and its end.
			if got < 2*jobs {
				t.Fatalf("norn_steps_committed_total = %v, want at least %d", got, 2*jobs)
			}
			fams := scrape(t, srv.URL)
			if v, ok := value(fams, "norn_timers_pending"); !ok || v != 0 {
				t.Fatalf("norn_timers_pending = %v, %v: the store's counts are not read", v, ok)
			}
			if v, _ := value(fams, "norn_commit_batch_steps"); v == 0 {
				t.Fatal("norn_commit_batch_steps observed no commit")
			}

			// Once stopped, commits no longer count.
			stop()
			before := truth.get()
			if _, err := raw.Apply(ctx, persistence.Step{Create: &persistence.Instance{ID: "after-stop", Workflow: "hello"},
				History: []persistence.Event{{Kind: "started", Name: "hello"}}}); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 10*time.Second, "the driver reports the commit", func() bool { return truth.get() > before })
			if v, _ := value(scrape(t, srv.URL), "norn_steps_committed_total"); v != got {
				t.Fatalf("after stop: norn_steps_committed_total = %v, want %v", v, got)
			}
		})
	}
}

// fullExposition returns the metrics' text exposition with every family
// present: each hook kind observed once, a committed and a failed commit,
// and the counts of a real store holding a live instance.
func fullExposition(t *testing.T) []byte {
	t.Helper()
	ctx := context.Background()
	m, err := metrics.New(metrics.Options{ConstLabels: prometheus.Labels{"node": "n1"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := storeurl.Open(ctx, "sqlite://"+testutil.SQLitePath(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	defer m.ObserveStore(st)()
	if _, err := st.Apply(ctx, persistence.Step{Create: &persistence.Instance{ID: "i1", Workflow: "wf"},
		History: []persistence.Event{{Kind: "started", Name: "wf"}}}); err != nil {
		t.Fatal(err)
	}
	c := m.Commits()
	c.ObserveCommit(persistence.CommitInfo{Driver: "sqlite", Steps: 3, Duration: time.Millisecond})
	c.ObserveCommit(persistence.CommitInfo{Driver: "sqlite", Steps: 1, Duration: time.Millisecond, Err: errors.New("disk full")})
	h := m.Hooks()
	for _, k := range []actor.HookKind{actor.HookInstanceStarted, actor.HookInstanceActivated, actor.HookInstancePassivated,
		actor.HookInstanceRestarted, actor.HookInstanceLost, actor.HookInstanceCompleted, actor.HookInstanceFailed,
		actor.HookInstanceCancelled, actor.HookActivityStarted, actor.HookActivityFinished, actor.HookActivityRetried,
		actor.HookActivityFailed, actor.HookActivityAbandoned, actor.HookCompensationFailed, actor.HookMessageSent,
		actor.HookMessageConsumed, actor.HookTimerFired, actor.HookLeaseTakeover, actor.HookInstanceStopped} {
		h.Observe(ctx, actor.HookEvent{Kind: k, Instance: "i1", Workflow: "wf", Name: "act", Duration: time.Millisecond})
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestExpositionLint checks the exposition with the linter Prometheus's
// promtool uses (HELP and TYPE, counters ending in _total, base units,
// naming), and that no two families claim one name in OpenMetrics, where a
// counter's family is its name without _total and a histogram's samples
// add _bucket, _sum and _count.
func TestExpositionLint(t *testing.T) {
	t.Parallel()
	body := fullExposition(t)
	fams := scrapeBody(t, body)
	if len(fams) < 25 {
		t.Fatalf("exposition has %d families: the workload left some out", len(fams))
	}
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	owner := map[string]string{}
	claim := func(name, fam string) {
		if o, ok := owner[name]; ok && o != fam {
			t.Errorf("name %s claimed by families %s and %s", name, o, fam)
		}
		owner[name] = fam
	}
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		switch fams[n].GetType() {
		case dto.MetricType_COUNTER:
			base := strings.TrimSuffix(n, "_total")
			claim(base, n)
			claim(base+"_total", n)
			claim(base+"_created", n)
		case dto.MetricType_HISTOGRAM:
			for _, s := range []string{"", "_bucket", "_sum", "_count", "_created"} {
				claim(n+s, n)
			}
		default:
			claim(n, n)
		}
	}
}

// TestPromtoolCheckMetrics runs promtool itself on the exposition. In CI
// (CI set) promtool must be installed; elsewhere the test skips without it.
func TestPromtoolCheckMetrics(t *testing.T) {
	t.Parallel()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not installed (Debian package prometheus); CI requires it")
		}
		t.Skip("promtool not installed (apt-get install prometheus); TestExpositionLint runs the same linter in-process")
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(fullExposition(t))
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// scrapeBody parses a text exposition.
func scrapeBody(t *testing.T, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return fams
}
