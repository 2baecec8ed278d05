package actor

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nornlabs/norn/actor/internal/compete"
	"github.com/nornlabs/norn/actor/internal/starts"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/timers"
)

// Config configures a node. Store and Workflows are required; every other
// field has a documented default, used when the field is zero. Start rejects
// values below a field's documented minimum with ErrInvalidInput.
type Config struct {
	// Store holds all durable state. Required. The System does not close it.
	Store persistence.Store
	// Workflows are the workflows this node can run (see Register).
	Workflows []Definition
	// NodeID names this node in leases; it must be unique among live nodes.
	// Default: hostname-pid-random. A node restarted with the same NodeID
	// takes its instances back at once; with a new one it waits for the old
	// leases to expire (LeaseTTL).
	NodeID string
	// LeaseTTL is how long an activation's lease lasts without renewal.
	// Default 10s, minimum 100ms; renewed every LeaseTTL/3.
	LeaseTTL time.Duration
	// PassivateAfter stops activations parked this long; mail, a timer or a
	// cancel brings them back. Default 1 minute, minimum 10ms.
	PassivateAfter time.Duration
	// RecoveryInterval is the safety-net scan for instances that need an
	// activation and have none (e.g. their node died). Default LeaseTTL, with
	// ±20% jitter; minimum 10ms.
	RecoveryInterval time.Duration
	// MaxActivating bounds concurrent activation starts. Default 64; negative
	// values are rejected. Eight times as many woken instances may be
	// replaying at once before their first commit or park (a woken instance
	// takes its lease with its first commit): so that waking 100,000
	// instances at once holds a bounded number of them in memory.
	MaxActivating int
	// HistoryPage is how many history events an activation (and Replay)
	// reads from the store at a time while it replays: it holds at most two
	// pages, so a long history costs memory for two pages, not for all of
	// it. Default 512; negative is rejected.
	HistoryPage int
	// TimerHorizon is how far ahead timers are held in memory. Default 1
	// minute, minimum 1s.
	TimerHorizon time.Duration
	// TimerWarmUp is how long before a durable timer is due its instance
	// is activated, if it is passivated: its history is read and replayed
	// ahead of time, so that the timer fires with a single commit and on
	// time even when many come due at once. Default 1s, capped at half of
	// PassivateAfter and of TimerHorizon; negative turns the warm-up off
	// (a passivated instance is then activated when its timer is due).
	TimerWarmUp time.Duration
	// DurableBackoff is the shortest activity retry back-off that waits on a
	// durable timer (surviving restarts, holding no goroutine once
	// passivated) instead of sleeping in memory. Default 5s, minimum 1ms.
	DurableBackoff time.Duration
	// DedupeWindow is how long the message IDs given with WithMessageID are
	// remembered: a retried Send or Publish with the same ID within the
	// window delivers nothing more. Older IDs are forgotten (the node prunes
	// them every few minutes). Default 7 days, minimum 1 minute.
	DedupeWindow time.Duration
	// QueueRetention bounds how long a message published on a channel that
	// no broadcast subscriber listens to (no subscribers at all, or only
	// competing ones) waits in the channel's queue for a competing consumer:
	// older ones are deleted, so that a channel nobody consumes does not
	// grow forever (the node prunes every few minutes, or every
	// QueueRetention if that is shorter). Broadcast subscribers never see
	// such messages: they receive only what is published after they
	// subscribed. Default 7 days, minimum 1s.
	QueueRetention time.Duration
	// Retention is how long ended instances (completed, failed, cancelled)
	// are kept, with their history: older ones are purged, in small
	// batches, by the node that owns their bucket, and then read as
	// ErrNotFound. Default 30 days: long enough to look into a failure
	// after a holiday; minimum 1s; negative keeps them forever. An ended
	// instance's pending outgoing events are kept until delivered, and a
	// purged parent's children keep running (see persistence.Purger).
	Retention time.Duration
	// MaxPayload bounds, in bytes, the encoded input of Spawn and the encoded
	// message of Send, SendOn, Publish and PublishWith; larger ones fail with
	// a *PayloadTooLargeError before anything is written. Default 4 MiB;
	// negative values are rejected.
	MaxPayload int
	// Codec encodes inputs, results and messages. Default JSON; values that
	// are proto.Message always use protobuf. It is recorded with each
	// instance, and an instance written with another codec stops with an
	// error instead of being misread.
	Codec Codec
	// Messages give message types names that survive renaming and moving
	// the Go type, with aliases for the names earlier builds used (see
	// Message). Types not listed are stored under the name they give
	// themselves (MessageTyper, protobuf) or their Go type name.
	Messages []MessageName
	// Errors are the application errors that keep their identity through
	// history (see Sentinel and ErrorType): a workflow, and Await, can match
	// them with errors.Is / errors.As on the first run and after a restart.
	Errors []ErrorDef
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Hooks observes instances, activities, messages and timers. Default:
	// SlogHooks on Logger at Debug level. MultiHooks combines several
	// (packages metrics and tracing provide Hooks).
	Hooks Hooks
	// Cluster spreads instances over the nodes of a cluster (see package
	// github.com/nornlabs/norn/cluster): each node hosts the instances it
	// owns and fires their timers, and wake-ups for instances owned
	// elsewhere go to their owner. Default nil: this node owns every
	// instance (other processes sharing the store then divide work by
	// lease races, and a dead node's instances wait for its leases to
	// expire).
	Cluster Cluster
	// Client makes the System a client of the store rather than a node: it
	// runs no instances (no activations, recovery scans, timers or lease
	// renewals), while Spawn, Send, SendOn, Publish, PublishWith, Cancel,
	// Await and the read calls (Inspect, List, HistoryPage, ...) work as
	// usual. The nodes sharing the store run what it spawns and delivers:
	// a store that notifies across processes (PostgreSQL) wakes them at
	// once; on SQLite the client records wake requests that the nodes poll
	// for (sqlite.Options.WakePoll, 100ms by default).
	// In a cluster (Cluster set, as a member that owns nothing) wake-ups go
	// to the owners; Start fails with a *RoleConflictError if the cluster
	// gives the node buckets to own. Workflows may be empty: Spawn accepts
	// a definition that is not registered here, since running it is the
	// nodes' business.
	// Tools such as the norn command use this to act on a store without the
	// program's workflows.
	Client bool
	// Clock is the time workflows see: Context.Now, timers, receive
	// timeouts and activity retry back-offs (see Clock for what stays on
	// real time). Default: real time. Tests pass a virtual one (package
	// norntest).
	Clock Clock
	// ReplaceActivity, when set, is asked for each activity attempt's
	// function by the activity's name: a non-nil answer runs instead of
	// the registered function, with the call's In value, and must return
	// an Out value (or an error). For tests (see norntest.Mock); replay is
	// unaffected, since it runs no activity.
	ReplaceActivity func(name string) func(ctx context.Context, in any) (any, error)
}

// System is a running node. Create it with Start, end it with Stop.
type System struct {
	// env is what running workflow code needs; the rest is the runtime.
	env
	store  persistence.Store
	timers *timers.Service
	// fresh holds a slot for each activation woken without its lease until
	// it takes the lease, parks or ends (see activation.slot).
	fresh chan struct{}
	// role is what this node is: alone, a cluster member or a client.
	role role
	// rebalance is signalled when the cluster's ownership changed; dead
	// collects the failed nodes it reported meanwhile (under mu).
	rebalanceCh chan struct{}
	dead        []string
	owned       []bool // buckets owned at the last rebalance (rebalance loop only)

	cancel context.CancelFunc
	bg     sync.WaitGroup // background loops
	runs   sync.WaitGroup // activation goroutines

	calls sync.WaitGroup // admitted calls from outside the workflows (see enter)
	// work counts what the node has in hand (see Idle and clock.go).
	work atomic.Int64

	lastPrune      time.Time // recovery loop only
	lastQueuePrune time.Time // recovery loop only

	outboxMu sync.Mutex
	outboxCh []chan struct{} // WatchOutbox subscribers
	// outboxListening: forwardOutbox runs (under outboxMu).
	outboxListening bool

	mu       sync.Mutex
	stopping bool
	closed   bool // no more calls from outside: Stop has unwound the activations
	acts     map[string]*activation
	// starts are the starts (spawns and activators) in progress and the
	// instances queued for an activator.
	starts  *starts.Table
	waiters map[string][]chan *persistence.Instance
	// answers are the CallFrom calls waiting here for the answer of their
	// call instance, by its ID (see answerCall).
	answers map[string]chan []byte
	// competing picks the consumer each message queued on a competing
	// channel wakes (see compete.go).
	competing *compete.Router[*activation]
	// fetchers claim queued messages for the consumers waiting here (fetch.go).
	fetchers fetchers
	// claims holds the queued messages local consumers are claiming, so
	// that they do not all race for the same rows.
	claims mailbox.Claims[*activation]
}

// env is what running a workflow's code needs from its node, live or in
// Replay: the configuration, the codec, the registered workflows and
// errors, the logger and the hooks. A System is an env plus the runtime
// (store, timers, activations, the node's role); Replay has the env alone.
type env struct {
	ctx   context.Context // lives until Stop (a Replay: until it returns)
	cfg   Config
	codec Codec
	defs  map[string]Definition
	names *messageNames // Config.Messages
	log   *slog.Logger
}

// parkWatcher is implemented by Hooks that hear, before an activation
// parks in a receive, that it read its mailbox and found nothing (or knew
// it empty). Only tests' Hooks do: a new instance that parks without
// reading its mailbox makes no store call between its creation and its
// park, so nothing but this can land a commit in that window.
type parkWatcher interface{ beforePark(id string) }

// gatherWatcher is implemented by Hooks that hear each time a node's
// fetcher starts to wait for its consumers to ask together (see
// System.gather): a race point of its own, for tests.
type gatherWatcher interface{ inGather() }

// inGather tells Config.Hooks, if it is a gatherWatcher, that a gather
// waits.
func (s *System) inGather() {
	if w, ok := s.cfg.Hooks.(gatherWatcher); ok {
		w.inGather()
	}
}

// beforePark tells Config.Hooks, if it is a parkWatcher, that activation
// id is about to park in a receive.
func (s *System) beforePark(id string) {
	if w, ok := s.cfg.Hooks.(parkWatcher); ok {
		w.beforePark(id)
	}
}

// Minimums of the Config durations: below them a node spends its time on
// bookkeeping (or a ticker panics).
const (
	minLeaseTTL         = 100 * time.Millisecond
	minPassivateAfter   = 10 * time.Millisecond
	minRecoveryInterval = 10 * time.Millisecond
	minTimerHorizon     = time.Second
	minDurableBackoff   = time.Millisecond
	minDedupeWindow     = time.Minute
	minQueueRetention   = time.Second

	defaultDedupeWindow   = 7 * 24 * time.Hour
	defaultQueueRetention = 7 * 24 * time.Hour
	defaultMaxPayload     = 4 << 20

	// pruneEvery spaces the pruning of dedupe IDs and of expired queued
	// messages.
	pruneEvery = 5 * time.Minute
)

// validate rejects settings that can never work well; zero means default.
func (c *Config) validate() error {
	for _, f := range []struct {
		name     string
		val, min time.Duration
	}{
		{"LeaseTTL", c.LeaseTTL, minLeaseTTL},
		{"PassivateAfter", c.PassivateAfter, minPassivateAfter},
		{"RecoveryInterval", c.RecoveryInterval, minRecoveryInterval},
		{"TimerHorizon", c.TimerHorizon, minTimerHorizon},
		{"DurableBackoff", c.DurableBackoff, minDurableBackoff},
		{"DedupeWindow", c.DedupeWindow, minDedupeWindow},
		{"QueueRetention", c.QueueRetention, minQueueRetention},
	} {
		if f.val != 0 && f.val < f.min {
			return fmt.Errorf("%w: Config.%s is %v; it must be at least %v (or zero for the default)", ErrInvalidInput, f.name, f.val, f.min)
		}
	}
	if c.HistoryPage < 0 {
		return fmt.Errorf("%w: Config.HistoryPage is %d; it must not be negative", ErrInvalidInput, c.HistoryPage)
	}
	if err := c.validateRetention(); err != nil {
		return err
	}
	if c.MaxActivating < 0 {
		return fmt.Errorf("%w: Config.MaxActivating is %d; it must not be negative", ErrInvalidInput, c.MaxActivating)
	}
	if c.MaxPayload < 0 {
		return fmt.Errorf("%w: Config.MaxPayload is %d; it must not be negative", ErrInvalidInput, c.MaxPayload)
	}
	return nil
}

// registry indexes the workflows to register by name, refusing empty and
// repeated names and invalid restart policies.
func registry(wfs []Definition) (map[string]Definition, error) {
	defs := make(map[string]Definition, len(wfs))
	for _, d := range wfs {
		if d == nil || d.Name() == "" {
			return nil, fmt.Errorf("%w: workflow with an empty name", ErrInvalidInput)
		}
		if _, dup := defs[d.Name()]; dup {
			return nil, fmt.Errorf("%w: two workflows registered as %q", ErrInvalidInput, d.Name())
		}
		if err := d.restartPolicy().Validate(); err != nil {
			return nil, fmt.Errorf("%w: workflow %q: %v", ErrInvalidInput, d.Name(), err)
		}
		defs[d.Name()] = d
	}
	return defs, nil
}

// withDefaults fills in what cfg leaves zero.
func (c Config) withDefaults() Config {
	if c.NodeID == "" {
		host, _ := os.Hostname()
		c.NodeID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(4))
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.PassivateAfter <= 0 {
		c.PassivateAfter = time.Minute
	}
	if c.RecoveryInterval <= 0 {
		c.RecoveryInterval = c.LeaseTTL
	}
	if c.DurableBackoff <= 0 {
		c.DurableBackoff = 5 * time.Second
	}
	if c.HistoryPage == 0 {
		c.HistoryPage = defaultHistoryPage
	}
	if c.MaxActivating == 0 {
		c.MaxActivating = 64
	}
	if c.DedupeWindow == 0 {
		c.DedupeWindow = defaultDedupeWindow
	}
	if c.QueueRetention == 0 {
		c.QueueRetention = defaultQueueRetention
	}
	if c.Retention == 0 {
		c.Retention = defaultRetention
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = defaultMaxPayload
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Codec == nil {
		c.Codec = JSON{}
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.Hooks == nil {
		c.Hooks = SlogHooks{Logger: c.Logger, Level: slog.LevelDebug}
	}
	return c
}

// Start validates cfg, recovers instances that were running, and starts the
// node's background work.
func Start(ctx context.Context, cfg Config) (*System, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: Config.Store is required", ErrInvalidInput)
	}
	// A nil *sqlite.Store (an ignored Open error) is a non-nil interface.
	if v := reflect.ValueOf(cfg.Store); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("%w: Config.Store is a nil %T", ErrInvalidInput, cfg.Store)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	defs, err := registry(cfg.Workflows)
	if err != nil {
		return nil, err
	}
	if _, taken := defs[callWorkflowName]; taken {
		return nil, fmt.Errorf("%w: the workflow name %q is the runtime's (calls from outside)", ErrInvalidInput, callWorkflowName)
	}
	defs[callWorkflowName] = newCallWorkflow()
	names, err := newMessageNames(cfg.Messages)
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &System{
		env:   env{cfg: cfg, defs: defs, names: names, log: cfg.Logger.With("node", cfg.NodeID), codec: cfg.Codec},
		store: cfg.Store,
		acts:  map[string]*activation{}, starts: starts.New(cfg.MaxActivating), waiters: map[string][]chan *persistence.Instance{},
		competing: compete.NewRouter[*activation](),
	}
	s.fetchers.reads = cfg.Store.SingleWriter()
	s.fresh = make(chan struct{}, 8*cfg.MaxActivating)
	s.role = newRole(cfg)
	s.rebalanceCh = make(chan struct{}, 1)
	tc := timers.Config{Source: cfg.Store, Horizon: cfg.TimerHorizon, Logger: s.log, Clock: cfg.Clock,
		Ownership: ownership{s}, Fire: func(t persistence.Timer) { s.fireTimer(t.Instance) }}
	if s.role.hosts() {
		tc.Work = func(d int) { s.work.Add(int64(d)) }
	}
	if cfg.TimerWarmUp >= 0 {
		tc.Warm = func(t persistence.Timer) { s.warm(t.Instance) }
		tc.WarmLead = min(cmp.Or(cfg.TimerWarmUp, time.Second), cfg.PassivateAfter/2)
	}
	if s.timers, err = timers.New(tc); err != nil {
		return nil, err
	}
	// Check the store answers before promising anything.
	if _, err := cfg.Store.List(ctx, persistence.ListFilter{Limit: 1}); err != nil {
		return nil, fmt.Errorf("norn: store not usable: %w", err)
	}
	// A node restarted under the same NodeID holds no activation yet: leases
	// in its name are left over from its previous life. Free them so that
	// recovery takes those instances back now (renewing them would keep
	// them stranded). A client never holds leases.
	if s.role.hosts() {
		if err := cfg.Store.ReleaseLeases(ctx, cfg.NodeID); err != nil {
			return nil, fmt.Errorf("norn: release leases left by an earlier %s: %w", cfg.NodeID, err)
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.role.join(ctx, ClusterHost{NodeID: cfg.NodeID, Logger: s.log, Wake: s.wakeFromPeer, Changed: s.clusterChanged}); err != nil {
		s.cancel()
		return nil, err
	}
	// Only a cluster's Changed signals it.
	s.owned = s.ownedMask()
	s.goBG(s.rebalanceLoop)
	if !s.role.hosts() {
		return s, nil
	}
	s.host()
	return s, nil
}

// host starts the background work of a node that hosts instances: the
// timer service, lease renewals, recovery scans and the store's
// notifications.
func (s *System) host() {
	s.work.Add(1) // see recoveryLoop
	s.goBG(func() {
		if err := s.timers.Run(s.ctx); err != nil {
			s.log.Error("timer service stopped", "err", err)
		}
	})
	s.goBG(s.renewLoop)
	s.goBG(s.recoveryLoop)
	s.goBG(s.retentionLoop)
	s.goBG(func() {
		err := s.store.Listen(s.ctx, func(ids []string) {
			if ids == nil {
				s.rescan()
				return
			}
			for _, id := range ids {
				s.wakeRemote(id, fromStore)
			}
		})
		if err != nil && !errors.Is(err, persistence.ErrUnsupported) && s.ctx.Err() == nil {
			s.log.Error("store notifications stopped", "err", err)
		}
	})
}

// NodeID is this node's name in leases.
func (s *System) NodeID() string { return s.cfg.NodeID }

// Workflows lists the names of the workflows this node runs, sorted.
// Instances of other workflows are left to the nodes that have them.
func (s *System) Workflows() []string {
	names := make([]string, 0, len(s.defs))
	for name := range s.defs {
		if name == callWorkflowName {
			continue // the runtime's own
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func (s *System) goBG(fn func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		fn()
	}()
}

// enter admits a call from outside the workflows (Spawn, Send, Publish,
// Cancel) unless the System is stopped; Stop waits for admitted calls, so
// that nothing is written on the node's behalf after Stop returns. Every
// successful enter is paired with a leave.
func (s *System) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrStopped
	}
	s.calls.Add(1)
	s.work.Add(1)
	return nil
}

func (s *System) leave() {
	s.work.Add(-1)
	s.calls.Done()
}

// Stop stops every activation (they resume later from history, here or on
// another node), releases their leases and stops background work. It waits
// for activations to unwind until ctx ends. Calls from outside the workflows
// (Spawn, Send, SendOn, Publish, PublishWith, Cancel) still running when
// the activations have unwound are waited for too; later ones fail with
// ErrStopped.
func (s *System) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return nil
	}
	s.stopping = true
	acts := make([]*activation, 0, len(s.acts))
	for _, a := range s.acts {
		acts = append(acts, a)
	}
	s.mu.Unlock()
	for _, a := range acts {
		a.signal(sigStop)
	}
	var err error
	if !waitCtx(ctx, &s.runs) {
		err = fmt.Errorf("norn: stop: activations still running: %w", ctx.Err())
	}
	// Only now: an activation that ends during the stop still cancels its
	// linked children through Cancel.
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if !waitCtx(ctx, &s.calls) && err == nil {
		err = fmt.Errorf("norn: stop: calls still running: %w", ctx.Err())
	}
	s.cancel()
	s.closeOutboxWatchers()
	s.bg.Wait()
	if s.role.hosts() {
		if rerr := s.store.ReleaseLeases(context.Background(), s.cfg.NodeID); rerr != nil && !errors.Is(rerr, persistence.ErrStoreClosed) {
			err = errors.Join(err, fmt.Errorf("norn: release leases: %w", rerr))
		}
	}
	// Only now, with the leases released: in a cluster, the other nodes
	// take this node's buckets as they learn that it left, and find its
	// instances free to activate (and load their timers).
	if lerr := s.role.leave(ctx); lerr != nil {
		s.log.Warn("leaving the cluster failed; the others will find this node gone", "err", lerr)
	}
	// And wake the new owners of what was live here, in case a scan ran
	// before it could see the leases released.
	ids := make([]string, 0, len(acts))
	for _, a := range acts {
		ids = append(ids, a.id)
	}
	s.forward(ids)
	if cerr := s.role.close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("norn: close cluster: %w", cerr))
	}
	return err
}

// waitCtx waits for wg until ctx ends; it reports whether wg finished.
func waitCtx(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *System) renewLoop() {
	t := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			s.renew()
		}
	}
}

// renew extends this node's leases and stops the activations whose lease
// is gone: another node took the instance over (the cluster declared this
// one failed, or its lease expired while it could not renew). They would
// fail on their next write anyway; an idle one might not write for days.
func (s *System) renew() {
	s.mu.Lock()
	before := make(map[string]*activation, len(s.acts))
	for id, a := range s.acts {
		// One woken without the lease (see activation.leased) holds none
		// yet; if its first write takes it while the renewal runs, the
		// renewal may not name it, and must not count it lost.
		if a.leased.Load() {
			before[id] = a
		}
	}
	s.mu.Unlock()
	held, err := s.store.RenewLeases(s.ctx, s.cfg.NodeID, s.cfg.LeaseTTL)
	if err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("lease renewal failed", "err", err)
		}
		return
	}
	for _, id := range held {
		delete(before, id)
	}
	for id, a := range before {
		s.mu.Lock()
		// Still the same live activation, and not giving the lease back
		// itself meanwhile (passivating, finishing).
		lost := s.acts[id] == a && !a.passivating && !a.finishing.Load() && !s.stopping
		s.mu.Unlock()
		if lost && a.leaseLost() {
			s.log.Warn("lease taken over by another node; activation stopped", "instance", id)
		}
	}
}

// recoveryLoop activates instances that need an activation and have none:
// at start (instances that were mid-run when the process died) and then as a
// slow, jittered safety net (instances whose owner died, wake-ups lost with a
// crashed process). It also forgets old dedupe message IDs and deletes
// queued messages older than QueueRetention.
func (s *System) recoveryLoop() {
	for first := true; ; first = false {
		s.recoverOnce()
		if first {
			s.work.Add(-1) // taken in host: the node is busy until its first scan woke what it found
		}
		s.pruneMessageIDs()
		s.pruneQueue()
		d := time.Duration(float64(s.cfg.RecoveryInterval) * (0.8 + 0.4*mrand.Float64()))
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

func (s *System) recoverOnce() {
	ids, err := s.runnable(s.ownedBuckets())
	if err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("recovery scan failed", "err", err)
		}
		return
	}
	for _, id := range ids {
		s.wake(id)
	}
}

// pruneMessageIDs drops dedupe IDs older than DedupeWindow, at start and
// then every pruneEvery: the table only needs to stay bounded.
func (s *System) pruneMessageIDs() {
	now := time.Now()
	if !s.lastPrune.IsZero() && now.Sub(s.lastPrune) < pruneEvery {
		return
	}
	s.lastPrune = now
	n, err := s.store.PruneMessageIDs(s.ctx, now.Add(-s.cfg.DedupeWindow))
	switch {
	case err != nil && s.ctx.Err() == nil:
		s.log.Warn("pruning dedupe message IDs failed", "err", err)
	case n > 0:
		s.log.Debug("pruned dedupe message IDs", "count", n)
	}
}

// pruneQueue deletes queued messages older than QueueRetention, at start
// and then every pruneEvery (or every QueueRetention, if that is shorter,
// so that a short retention is kept roughly to).
func (s *System) pruneQueue() {
	now := time.Now()
	if !s.lastQueuePrune.IsZero() && now.Sub(s.lastQueuePrune) < min(pruneEvery, s.cfg.QueueRetention) {
		return
	}
	s.lastQueuePrune = now
	n, err := s.store.PruneQueue(s.ctx, now.Add(-s.cfg.QueueRetention))
	switch {
	case err != nil && s.ctx.Err() == nil:
		s.log.Warn("pruning expired queued messages failed", "err", err)
	case n > 0:
		s.log.Info("pruned expired queued messages", "count", n, "retention", s.cfg.QueueRetention)
	}
}

// rescan follows a notification gap: notifications may have been lost, for
// instances with no activation (the Runnable scan finds those), for
// timers (reloaded) and for instances live or starting here, which Runnable
// skips because this node holds their lease: they all look again.
func (s *System) rescan() {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	for _, a := range s.acts {
		a.recheck.Store(true)
		s.signalLocked(a, sigWake)
	}
	s.starts.MarkAll()
	s.mu.Unlock()
	s.timers.Reload()
	s.goBG(s.recoverOnce)
}

// wake makes sure the instance's activation looks at its mailbox, timers and
// cancel flag: it signals a live activation, starts one, or (in a cluster)
// sends the wake to the instance's owner.
func (s *System) wake(id string) { s.forward(s.poke(id, sigWake, fromHere)) }

// fireTimer wakes id for a timer of its that came due, unless a live
// activation holds it: that one fires its timers from its own clock, and a
// wake would only make it read its mailbox. (Should it end without firing,
// the service fires the timer again later.)
func (s *System) fireTimer(id string) {
	s.mu.Lock()
	a, live := s.acts[id]
	own := live && !a.passivating
	s.mu.Unlock()
	if !own {
		s.wake(id)
	}
}

// warm activates id ahead of its timer (Config.TimerWarmUp) unless it is
// live or starting already: a live activation fires its timers itself, and
// a wake would only make it read its mailbox.
func (s *System) warm(id string) {
	s.mu.Lock()
	_, live := s.acts[id]
	busy := s.starts.Starting(id)
	s.mu.Unlock()
	if !live && !busy {
		s.wake(id)
	}
}

// wakeMany wakes ids, sending those owned elsewhere in one message per owner.
func (s *System) wakeMany(ids []string) {
	var away []string
	for _, id := range ids {
		away = append(away, s.poke(id, sigWake, fromHere)...)
	}
	s.forward(away)
}

// wakeRemote is wake for a commit of another process: that may have been a
// cancel request, which reaches a live activation only through the store,
// so the activation reads its cancel flag again.
func (s *System) wakeRemote(id string, from origin) {
	s.mu.Lock()
	if a, ok := s.acts[id]; ok {
		a.recheck.Store(true)
	}
	s.mu.Unlock()
	s.poke(id, sigWake, from)
}

// wakeFromPeer takes the wake-ups another node sent (ClusterHost.Wake).
func (s *System) wakeFromPeer(ids []string) {
	for _, id := range ids {
		if validID("instance ID", id) == nil {
			s.wakeRemote(id, fromPeer)
		}
	}
}

// owns reports whether this node should host id; a client hosts nothing.
func (s *System) owns(id string) bool { return s.role.owns(id) }

// forward hands on the wake-ups this node does not act on (see role): to
// their owners in a cluster; a client on a store that cannot notify other
// processes (SQLite) asks the nodes through the store's wake requests. If
// that fails, the nodes find the work at their next recovery scan.
func (s *System) forward(ids []string) {
	if len(ids) == 0 {
		return
	}
	if err := s.role.forward(s.ctx, ids); err != nil && s.ctx.Err() == nil {
		s.log.Warn("could not ask the nodes to wake instances; they find them at their next recovery scan", "instances", len(ids), "err", err)
	}
}

// poke delivers sig (sigWake or sigCancel) to the instance's activation,
// records it for a start in progress, or starts an activation. It returns
// id if the wake belongs to another node (see forward).
func (s *System) poke(id string, sig signal, from origin) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.acts[id]; ok && !s.stopping {
		s.signalLocked(a, sig)
		return nil
	}
	if !s.stopping && s.starts.Mark(id, sig == sigCancel) {
		if from == fromHere {
			s.starts.MarkLocal(id)
		}
		return nil
	}
	if s.stopping || !s.role.actsOn(id, from) {
		// A stopping node has left the cluster: what it commits meanwhile
		// (an activation finishing, a Send) wakes the new owners.
		// A client hands its own wake-ups on too: to the owners in a
		// cluster, else to the store's wake requests (forward).
		if from == fromHere {
			return []string{id}
		}
		return nil
	}
	newActivator := s.starts.Queue(id)
	if from == fromHere {
		s.starts.MarkLocal(id)
	}
	if newActivator {
		s.runs.Add(1)
		s.work.Add(1)
		go s.activator()
	}
	return nil
}

// signalLocked hands sig to a registered activation; s.mu is held.
func (s *System) signalLocked(a *activation, sig signal) {
	if a.passivating {
		// Its end starts a new activation, which reads mailbox, timers
		// and cancel flag afresh.
		a.rewake = true
		return
	}
	// Deliver under s.mu, not through the shell's (asynchronous) mailbox:
	// passivate looks at wakeCh under s.mu, and a wake still in flight when
	// it looks would be lost with the activation.
	a.deliver(sig)
}

// activator starts queued activations; at most MaxActivating run at once,
// so that waking 100,000 passivated instances does not start 100,000
// goroutines at the same moment.
func (s *System) activator() {
	defer s.runs.Done()
	defer s.work.Add(-1)
	for {
		s.mu.Lock()
		id, ok := s.starts.Next(s.stopping)
		s.mu.Unlock()
		if !ok {
			return
		}
		s.activate(id)
	}
}

// activate takes the lease and starts an activation that replays history.
func (s *System) activate(id string) {
	if s.ctx.Err() != nil {
		s.endStart(id, false)
		return
	}
	select {
	case s.fresh <- struct{}{}:
	case <-s.ctx.Done():
		s.endStart(id, false)
		return
	}
	a, err := s.load(id)
	if a != nil && !a.leased.Load() {
		a.slot.Store(true)
	} else {
		<-s.fresh
	}
	if err != nil {
		switch {
		case errors.Is(err, persistence.ErrLeaseHeld):
			s.leaseHeldElsewhere(id)
		case errors.Is(err, persistence.ErrInstanceDone), errors.Is(err, persistence.ErrNotFound):
			s.endStart(id, true)
		case errors.Is(err, ErrUnknownWorkflow):
			// Not ours to run: nodes that have the workflow will.
			s.log.Debug("instance of a workflow this node does not have; left alone", "instance", id, "err", err)
			s.endStart(id, true)
		case s.ctx.Err() != nil:
			s.endStart(id, false)
		default:
			// Most likely the store is unreachable: try again later, or the
			// instance would sit under our own lease with nobody running it.
			// The retry covers any wake that arrived meanwhile.
			s.endStart(id, false)
			s.log.Warn("activation failed; retrying", "instance", id, "err", err)
			s.wakeLater(id, storeRetryDelay())
		}
		return
	}
	s.launch(a)
}

// endStart ends a start that launched no activation. With again, a wake or
// cancel that arrived meanwhile starts the instance anew: it may stand for
// a change the start did not see (mail, a cancel, the instance's creation).
func (s *System) endStart(id string, again bool) {
	s.mu.Lock()
	st := s.starts.End(id)
	s.mu.Unlock()
	if again && (st.Woken || st.Cancelled) {
		s.wake(id)
	}
}

// leaseHeldElsewhere ends a start that found another node's live lease on
// id. Without a cluster, that node hears this one's commits only if the
// store tells other processes (PostgreSQL's notifications); SQLite does
// not, so a wake of this process's own making (mail it sent, a timer it
// fired) is handed on through the store's wake requests, which every node
// sharing the file reads. Otherwise a message sent here to an instance live
// on another process would wait until that activation passivated. A wake
// that arrived through the wake requests is not handed on again: two nodes
// would pass it back and forth until the lease expired.
func (s *System) leaseHeldElsewhere(id string) {
	s.mu.Lock()
	st := s.starts.End(id)
	s.mu.Unlock()
	handed := false
	if wr, ok := s.store.(persistence.WakeRequester); ok && st.Local && s.role.hearsAll() {
		ctx, cancel := context.WithTimeout(s.ctx, requestWakeTimeout)
		err := wr.RequestWake(ctx, []string{id})
		cancel()
		switch {
		case err == nil:
			handed = true
		case !errors.Is(err, persistence.ErrUnsupported) && s.ctx.Err() == nil:
			s.log.Warn("could not hand a wake-up on to the node that holds the instance; it reads its mail when it passivates",
				"instance", id, "err", err)
		}
	}
	switch {
	case !st.Woken && !st.Cancelled:
	case handed:
		// As endStart does, but not as a wake of this process's own: the
		// request just made covers what arrived meanwhile.
		s.poke(id, sigWake, fromStore)
	default:
		s.wake(id)
	}
}

func (s *System) load(id string) (*activation, error) {
	// Look before taking the lease: with several nodes most wake-ups are for
	// instances another node holds, and a read is cheaper than a failed write.
	// A store that can read the instance, the first page of its history and
	// its mailbox in one round trip does (most wake-ups are of passivated
	// instances, which need all three).
	var pre *persistence.Loaded
	var cur persistence.Instance
	var err error
	if l, ok := s.store.(persistence.Loader); ok {
		var got persistence.Loaded
		if got, err = l.Load(s.ctx, id, s.cfg.HistoryPage, mailboxPage); err == nil {
			cur, pre = got.Instance, &got
		}
	} else {
		cur, err = s.store.Instance(s.ctx, id)
	}
	if err != nil {
		return nil, err
	}
	if cur.Status.Terminal() {
		return nil, persistence.ErrInstanceDone
	}
	// A workflow this node lacks: leave the lease to a node that has it.
	def, ok := s.defs[cur.Workflow]
	if !ok {
		return nil, fmt.Errorf("%w: %q (instance %s)", ErrUnknownWorkflow, cur.Workflow, id)
	}
	// Without a cluster every node hears every wake-up: skip the write when
	// another node's lease looks live. In a cluster the wake-ups go to the
	// owner, and the store alone judges the lease, by its own clock (a
	// node whose clock lags must not wait out its lag).
	if s.role.hearsAll() && cur.LeaseOwner != "" && cur.LeaseOwner != s.cfg.NodeID && time.Now().Before(cur.LeaseExpires) {
		return nil, persistence.ErrLeaseHeld
	}
	// A passivated instance (waiting, no lease) is replayed as read: its
	// first write takes the lease (Step.TakeLease), so a wake costs no
	// commit of its own; another node that took it meanwhile fences that
	// write, and this activation ends before it did anything outside.
	// Anything else (running without a live lease: its node died or lost
	// it mid-run) may have work to resume at once: take the lease first.
	inst := cur
	if cur.Status != persistence.StatusWaiting || cur.LeaseOwner != "" {
		if inst, err = s.store.AcquireLease(s.ctx, id, s.cfg.NodeID, s.cfg.LeaseTTL); err != nil {
			return nil, err
		}
		pre = nil // read before the lease was taken: read again under it
	}
	var first []persistence.Event
	if pre != nil {
		first = pre.History
	}
	hist, err := readHistFrom(s.ctx, s.store, id, inst.HistoryLen, s.cfg.HistoryPage, first)
	if err != nil {
		return nil, err
	}
	if cur.LeaseOwner != "" && cur.LeaseOwner != s.cfg.NodeID {
		s.hook(HookEvent{Kind: HookLeaseTakeover, Instance: id, Workflow: def.Name(), Name: cur.LeaseOwner})
	}
	s.hook(HookEvent{Kind: HookInstanceActivated, Instance: id, Workflow: def.Name()})
	a := newActivation(s, def, inst, hist)
	if pre != nil {
		a.preMail = &preMail{msgs: pre.Mailbox, limit: mailboxPage}
	}
	return a, nil
}

// launch registers a and starts its actor and workflow goroutine; it ends
// the start in progress for a's instance (activator or spawn).
//
// Wakes and cancels recorded during the start are handed over. A local
// Cancel is recorded as such; a plain wake may stand for a cancel that
// another process committed after a's instance was read, so the flag is
// read again before a goes live.
func (s *System) launch(a *activation) {
	woken := false
	for {
		s.mu.Lock()
		if s.stopping {
			s.starts.End(a.id)
			s.mu.Unlock()
			s.abandon(a)
			return
		}
		if st := s.starts.Peek(a.id); st.Woken && !st.Cancelled {
			s.starts.Take(a.id) // later wakes mark it again
			s.mu.Unlock()
			woken = true
			inst, err := s.store.Instance(s.ctx, a.id)
			if err != nil {
				s.endStart(a.id, false)
				s.abandon(a)
				if s.ctx.Err() == nil {
					s.log.Warn("activation failed; retrying", "instance", a.id, "err", err)
					s.wakeLater(a.id, storeRetryDelay())
				}
				return
			}
			if inst.CancelReason != "" {
				a.deliver(sigCancel)
			}
			continue
		}
		st := s.starts.End(a.id)
		s.acts[a.id] = a
		if st.Cancelled {
			a.deliver(sigCancel)
		}
		if st.Woken || woken {
			a.deliver(sigWake)
		}
		s.runs.Add(1)
		s.work.Add(1) // until a parks (see Idle)
		s.mu.Unlock()
		break
	}
	go func() {
		defer s.runs.Done()
		defer s.work.Add(-1)
		a.run()
		// A wake that came after the last park was never received: drop
		// its count (a is no longer registered, so no more come).
		select {
		case <-a.wakeCh:
			s.work.Add(-1)
		default:
		}
	}()
}

// abandon drops an activation that never ran and gives its lease back.
func (s *System) abandon(a *activation) {
	a.releaseSlot()
	if a.leased.Load() {
		_, _ = s.store.Apply(context.Background(), persistence.Step{Instance: a.id, Epoch: a.epoch, ReleaseLease: true})
	}
	a.hook(HookEvent{Kind: HookInstanceStopped})
}

// ended is called by an activation's goroutine as it exits.
func (s *System) ended(a *activation, finished bool) {
	a.releaseSlot()
	// Reported while a is still registered, so that it comes before the
	// activated event of the instance's next activation here.
	a.hook(HookEvent{Kind: HookInstanceStopped})
	s.mu.Lock()
	if s.acts[a.id] == a {
		delete(s.acts, a.id)
	}
	// A hand-over's end wakes the new owner.
	rewake := (a.rewake || a.handover.Load()) && !finished
	// Waiters hear of the end; those of an activation that ended without
	// ending its instance (passivated, stopped, lost) look again.
	var ws []chan *persistence.Instance
	if s.acts[a.id] == nil {
		ws = s.waiters[a.id]
		delete(s.waiters, a.id)
	}
	s.mu.Unlock()
	s.passOnWakes(a)
	var end *persistence.Instance
	if finished {
		end = &a.final
	}
	for _, w := range ws {
		w <- end // buffered: the waiter may have gone
	}
	if rewake {
		s.wake(a.id)
	}
}

// wakeLater wakes id after d, unless the System stops first.
func (s *System) wakeLater(id string, d time.Duration) {
	s.goBG(func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-s.ctx.Done():
		case <-t.C:
			s.wake(id)
		}
	})
}

// afterCommit wakes the instances a committed step gave mail and hands its
// timers to the timer service.
func (s *System) afterCommit(self string, step *persistence.Step, res persistence.StepResult) {
	if len(step.Emit) > 0 {
		s.outboxSignal()
	}
	for _, t := range step.AddTimers {
		t.Instance = self
		s.timers.Schedule(t)
	}
	s.wakeCommitted(self, res)
}

// waitEnd returns a channel that gets the ended instance when a local
// activation of id finishes it, or nil when one ends without finishing it.
// live reports an activation of id registered here: it sends one or the
// other for sure.
func (s *System) waitEnd(id string) (c chan *persistence.Instance, live bool) {
	c = make(chan *persistence.Instance, 1)
	s.mu.Lock()
	s.waiters[id] = append(s.waiters[id], c)
	live = s.acts[id] != nil
	s.mu.Unlock()
	return c, live
}

func (s *System) dropWaiter(id string, c chan *persistence.Instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.waiters[id]
	for i, w := range ws {
		if w == c {
			s.waiters[id] = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(s.waiters[id]) == 0 {
		delete(s.waiters, id)
	}
}

// newSortableID starts with the time so that instances created together sit
// together in the store's indexes (one page touched per batch, not one per
// instance), and ends with randomness so that nodes do not collide.
func newSortableID() string {
	return fmt.Sprintf("%011x", time.Now().UnixMilli()) + randomHex(6)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// encode turns v into its stored form with the node's codec.
func (e *env) encode(v any) ([]byte, error) { return encodeWith(e.codec, v) }
