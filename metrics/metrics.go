package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence"
)

// Options configure Metrics. The zero value is usable.
type Options struct {
	// Registerer is where the metrics are registered. Default: a fresh
	// registry of their own (never prometheus.DefaultRegisterer, so that
	// two Systems in one process, or tests, do not collide).
	Registerer prometheus.Registerer
	// Gatherer is what Handler serves. Default: Registerer, if it is also
	// a Gatherer (a *prometheus.Registry is both).
	Gatherer prometheus.Gatherer
	// Namespace prefixes every metric name. Default "norn".
	Namespace string
	// ConstLabels are added to every series, e.g. {"node": id}.
	ConstLabels prometheus.Labels
	// StatsTTL is how long the store's counts (see ReadStats) are reused
	// between scrapes. Default 10s.
	StatsTTL time.Duration
	// StatsTimeout bounds one read of the store's counts. Default 5s.
	StatsTimeout time.Duration
}

// ErrNoGatherer is returned by New when Options.Registerer is not a
// Gatherer and Options.Gatherer is not set: Handler would have nothing to
// serve.
var ErrNoGatherer = errors.New("metrics: Options.Registerer is not a prometheus.Gatherer; set Options.Gatherer")

// Metrics holds a node's metrics. Create it with New; give Hooks to
// actor.Config.Hooks, the store to ObserveStore, and mount Handler.
type Metrics struct {
	opts     Options
	gatherer prometheus.Gatherer

	started, ended, restarts, lost, passivations *prometheus.CounterVec
	activations                                  *prometheus.GaugeVec
	activationsTotal                             *prometheus.CounterVec
	attempts, attemptErrors, retries, failures   *prometheus.CounterVec
	abandoned, compensationFailures              *prometheus.CounterVec
	attemptDuration                              *prometheus.HistogramVec
	sent, consumed, timersFired                  *prometheus.CounterVec
	lateness                                     prometheus.Histogram
	takeovers                                    *prometheus.CounterVec
	commitSteps, commitDuration                  prometheus.Histogram
	stepsCommitted                               prometheus.Counter
	storeErrors                                  *prometheus.CounterVec

	instancesDesc, timersDesc, messagesDesc, maxMailboxDesc *prometheus.Desc

	mu   sync.Mutex
	live map[string]string // instance → workflow, of the activations on this node

	statsMu  sync.Mutex // serialises reads of the store's counts
	store    persistence.StatsReader
	stats    persistence.Stats
	statsAt  time.Time
	statsErr error
}

// New creates the metrics and registers them.
func New(o Options) (*Metrics, error) {
	if o.Namespace == "" {
		o.Namespace = "norn"
	}
	if o.StatsTTL <= 0 {
		o.StatsTTL = 10 * time.Second
	}
	if o.StatsTimeout <= 0 {
		o.StatsTimeout = 5 * time.Second
	}
	if o.Registerer == nil {
		reg := prometheus.NewRegistry()
		o.Registerer = reg
		if o.Gatherer == nil {
			o.Gatherer = reg
		}
	}
	if o.Gatherer == nil {
		g, ok := o.Registerer.(prometheus.Gatherer)
		if !ok {
			return nil, ErrNoGatherer
		}
		o.Gatherer = g
	}
	m := &Metrics{opts: o, gatherer: o.Gatherer, live: map[string]string{}}
	ns, cl := o.Namespace, o.ConstLabels
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help, ConstLabels: cl}, labels)
	}
	wf, act := "workflow", "activity"
	m.started = counter("instances_started_total", "Instances spawned through this node.", wf)
	m.ended = counter("instances_ended_total", "Instances that ended on this node, by final status (completed, failed, cancelled).", wf, "status")
	m.restarts = counter("instance_restarts_total", "Activations that crashed (a panic or a store failure) and restart from history.", wf)
	m.lost = counter("instances_lost_total", "Activations stopped because another node took their instance's lease.", wf)
	m.passivations = counter("passivations_total", "Idle activations passivated (their instance waits in the store).", wf)
	// Not "activations": in OpenMetrics that family would clash with the
	// counter norn_activations_total.
	m.activations = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "live_activations", Help: "Live activations on this node.", ConstLabels: cl}, []string{wf})
	m.activationsTotal = counter("activations_total", "Activations started on this node (a spawn, or a replay of history).", wf)
	m.attempts = counter("activity_attempts_total", "Activity attempts started.", wf, act)
	m.attemptErrors = counter("activity_attempt_errors_total", "Activity attempts that returned an error.", wf, act)
	m.retries = counter("activity_retries_total", "Failed activity attempts that are retried after a back-off.", wf, act)
	m.failures = counter("activity_failures_total", "Activity calls that failed for good (terminal error, or retries exhausted).", wf, act)
	m.abandoned = counter("activity_abandoned_total", "Activity attempts that ignored their context past a timeout or cancel and were left running.", wf, act)
	m.compensationFailures = counter("compensation_failures_total", "Saga compensations that still failed after their retries.", wf, act)
	m.attemptDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "activity_attempt_duration_seconds",
		Help: "Duration of activity attempts.", ConstLabels: cl, Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{wf, act})
	m.sent = counter("messages_sent_total", "Messages sent by workflows.", wf)
	m.consumed = counter("messages_consumed_total", "Messages consumed by workflows.", wf)
	m.timersFired = counter("timers_fired_total", "Workflow timers (sleeps, futures) that fired.", wf)
	m.lateness = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "timer_lateness_seconds",
		Help: "How long after its due time a timer fired.", ConstLabels: cl, Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)})
	m.takeovers = counter("lease_takeovers_total", `Leases this node took over: scope "node" for all the leases of a node declared failed, "instance" for one expired lease of another node.`, "scope")
	m.commitSteps = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "commit_batch_steps",
		Help: "Writes carried by one store transaction (group commit).", ConstLabels: cl, Buckets: prometheus.ExponentialBuckets(1, 2, 11)})
	m.commitDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "commit_duration_seconds",
		Help: "Duration of one store transaction (group commit).", ConstLabels: cl, Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12)})
	m.stepsCommitted = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "steps_committed_total",
		Help: "Writes carried by store transactions that committed.", ConstLabels: cl})
	m.storeErrors = counter("store_errors_total", `Store failures: "commit" for a transaction that failed as a whole, "stats" for a failed read of the store's counts.`, "op")
	m.storeErrors.WithLabelValues("commit")
	m.storeErrors.WithLabelValues("stats")
	m.takeovers.WithLabelValues("node")
	m.takeovers.WithLabelValues("instance")

	m.instancesDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, "", "instances"),
		"Instances that have not ended, by workflow and status (running, waiting, compensating), as the store holds them.", []string{wf, "status"}, cl)
	m.timersDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, "", "timers_pending"), "Timers pending in the store.", nil, cl)
	m.messagesDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, "", "messages_waiting"),
		`Messages waiting in the store: "mailbox" for those addressed to an instance, "queue" for those in channels' queues.`, []string{"where"}, cl)
	m.maxMailboxDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, "", "mailbox_depth_max"), "Most messages waiting in any one instance's mailbox.", nil, cl)

	if err := o.Registerer.Register(m); err != nil {
		return nil, fmt.Errorf("metrics: register: %w", err)
	}
	return m, nil
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.started, m.ended, m.restarts, m.lost, m.passivations, m.activations, m.activationsTotal,
		m.attempts, m.attemptErrors, m.retries, m.failures, m.abandoned, m.compensationFailures, m.attemptDuration,
		m.sent, m.consumed, m.timersFired, m.lateness, m.takeovers, m.commitSteps, m.commitDuration, m.stepsCommitted, m.storeErrors}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
	ch <- m.instancesDesc
	ch <- m.timersDesc
	ch <- m.messagesDesc
	ch <- m.maxMailboxDesc
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	// The counts first: a failed read counts in norn_store_errors_total,
	// which the registry may read as soon as it is collected below.
	st, ok := m.readStats()
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
	if !ok {
		return
	}
	for _, c := range st.Instances {
		ch <- prometheus.MustNewConstMetric(m.instancesDesc, prometheus.GaugeValue, float64(c.Count), c.Workflow, string(c.Status))
	}
	ch <- prometheus.MustNewConstMetric(m.timersDesc, prometheus.GaugeValue, float64(st.Timers))
	ch <- prometheus.MustNewConstMetric(m.messagesDesc, prometheus.GaugeValue, float64(st.Mailbox), "mailbox")
	ch <- prometheus.MustNewConstMetric(m.messagesDesc, prometheus.GaugeValue, float64(st.Queued), "queue")
	ch <- prometheus.MustNewConstMetric(m.maxMailboxDesc, prometheus.GaugeValue, float64(st.MaxMailbox))
}

// ReadStats makes each scrape report the store's counts (norn_instances by
// workflow and status, norn_timers_pending, norn_messages_waiting,
// norn_mailbox_depth_max), read at most once per Options.StatsTTL: each
// read counts rows, so its cost grows with the live instances, timers and
// waiting messages (on SQLite, 0.25 s at 30,000 live instances and 1.3-2 s
// at 100,000, measured on a busy 2-core machine): with many live instances
// raise StatsTTL, or leave ReadStats out. A read that fails or outlasts
// StatsTimeout leaves the gauges out of that scrape. Both drivers are
// StatsReaders. In a cluster every node sees the same store, so aggregate
// these with max, not sum.
func (m *Metrics) ReadStats(st persistence.StatsReader) {
	m.statsMu.Lock()
	m.store, m.statsAt = st, time.Time{}
	m.statsMu.Unlock()
}

// readStats returns the store's counts, read again if the cached ones are
// older than StatsTTL. A failed read is counted and reported by leaving
// the gauges out (stale numbers would look like the truth), until the next
// read succeeds.
func (m *Metrics) readStats() (persistence.Stats, bool) {
	m.statsMu.Lock()
	defer m.statsMu.Unlock()
	if m.store == nil {
		return persistence.Stats{}, false
	}
	if m.statsAt.IsZero() || time.Since(m.statsAt) >= m.opts.StatsTTL {
		ctx, cancel := context.WithTimeout(context.Background(), m.opts.StatsTimeout)
		m.stats, m.statsErr = m.store.Stats(ctx)
		cancel()
		m.statsAt = time.Now()
		if m.statsErr != nil {
			m.storeErrors.WithLabelValues("stats").Inc()
		}
	}
	return m.stats, m.statsErr == nil
}

// Handler serves the metrics in the Prometheus exposition format (mount it
// at /metrics). It serves Options.Gatherer: with the default, a registry
// holding only these metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.gatherer, promhttp.HandlerOpts{})
}

// ObserveStore makes the metrics cover st, however it was opened (a
// driver's Open, storeurl.Open, a wrapper): it adds Commits to st's commit
// observers (see persistence.CommitWatcher) and reads st's counts on
// scrape (see ReadStats). The returned function stops observing commits.
// Use it instead of passing Commits to the driver's options, or commits
// are counted twice.
func (m *Metrics) ObserveStore(st persistence.Store) (stop func()) {
	m.ReadStats(st)
	return st.ObserveCommits(m.Commits())
}

// Commits is the observer to give the store driver (sqlite.Options.Commits,
// postgres.Options.Commits): it measures group-commit batch sizes and
// latency, steps committed and failed transactions.
func (m *Metrics) Commits() persistence.CommitObserver { return commits{m} }

type commits struct{ m *Metrics }

func (c commits) ObserveCommit(ci persistence.CommitInfo) {
	c.m.commitSteps.Observe(float64(ci.Steps))
	c.m.commitDuration.Observe(ci.Duration.Seconds())
	if ci.Err != nil {
		c.m.storeErrors.WithLabelValues("commit").Inc()
		return
	}
	c.m.stepsCommitted.Add(float64(ci.Steps))
}

// Hooks is the actor.Hooks to give actor.Config.Hooks (with
// actor.MultiHooks to keep logs or traces too).
func (m *Metrics) Hooks() actor.Hooks { return hooks{m} }

type hooks struct{ m *Metrics }

func (h hooks) Observe(_ context.Context, e actor.HookEvent) {
	m := h.m
	switch e.Kind {
	case actor.HookInstanceStarted:
		m.started.WithLabelValues(e.Workflow).Inc()
	case actor.HookInstanceActivated:
		// A restart activates the instance again within one activation:
		// count activations, not activated events.
		m.mu.Lock()
		_, known := m.live[e.Instance]
		m.live[e.Instance] = e.Workflow
		m.mu.Unlock()
		if !known {
			m.activations.WithLabelValues(e.Workflow).Inc()
			m.activationsTotal.WithLabelValues(e.Workflow).Inc()
		}
	case actor.HookInstanceStopped:
		m.mu.Lock()
		wf, known := m.live[e.Instance]
		delete(m.live, e.Instance)
		m.mu.Unlock()
		if known {
			m.activations.WithLabelValues(wf).Dec()
		}
	case actor.HookInstancePassivated:
		m.passivations.WithLabelValues(e.Workflow).Inc()
	case actor.HookInstanceRestarted:
		m.restarts.WithLabelValues(e.Workflow).Inc()
	case actor.HookInstanceLost:
		m.lost.WithLabelValues(e.Workflow).Inc()
	case actor.HookInstanceCompleted:
		m.ended.WithLabelValues(e.Workflow, string(persistence.StatusCompleted)).Inc()
	case actor.HookInstanceFailed:
		m.ended.WithLabelValues(e.Workflow, string(persistence.StatusFailed)).Inc()
	case actor.HookInstanceCancelled:
		m.ended.WithLabelValues(e.Workflow, string(persistence.StatusCancelled)).Inc()
	case actor.HookActivityStarted:
		m.attempts.WithLabelValues(e.Workflow, e.Name).Inc()
	case actor.HookActivityFinished:
		m.attemptDuration.WithLabelValues(e.Workflow, e.Name).Observe(e.Duration.Seconds())
		if e.Err != nil {
			m.attemptErrors.WithLabelValues(e.Workflow, e.Name).Inc()
		}
	case actor.HookActivityRetried:
		m.retries.WithLabelValues(e.Workflow, e.Name).Inc()
	case actor.HookActivityFailed:
		m.failures.WithLabelValues(e.Workflow, e.Name).Inc()
	case actor.HookActivityAbandoned:
		m.abandoned.WithLabelValues(e.Workflow, e.Name).Inc()
	case actor.HookCompensationFailed:
		m.compensationFailures.WithLabelValues(e.Workflow, e.Name).Inc()
	case actor.HookMessageSent:
		m.sent.WithLabelValues(e.Workflow).Inc()
	case actor.HookMessageConsumed:
		m.consumed.WithLabelValues(e.Workflow).Inc()
	case actor.HookTimerFired:
		m.timersFired.WithLabelValues(e.Workflow).Inc()
		m.lateness.Observe(max(e.Duration, 0).Seconds())
	case actor.HookLeaseTakeover:
		scope := "instance"
		if e.Instance == "" {
			scope = "node"
		}
		m.takeovers.WithLabelValues(scope).Inc()
	}
}
