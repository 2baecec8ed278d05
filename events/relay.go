package events

import (
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

// RelayerConfig configures a Relayer. Store and Sink are required; every
// other field has a documented default, used when the field is zero.
// NewRelayer rejects values below a field's documented minimum.
type RelayerConfig struct {
	// Store holds the outbox that workflows emit into (see Emit). Required;
	// its driver must support persistence.Outbox, as the SQLite and
	// PostgreSQL drivers do (Run fails with persistence.ErrUnsupported
	// otherwise). The Relayer does not close it.
	Store persistence.Store
	// Sink receives the events. Required.
	Sink Sink
	// Owner names this relayer in its claims on events; it must be unique
	// among the relayers sharing the store. Default: hostname-pid-random.
	Owner string
	// ClaimTTL is how long a claimed event stays reserved for this relayer.
	// Other relayers never send an event while a claim holds it; a relayer
	// that dies mid-send holds it until the claim expires, and then the
	// event is sent again. A send is cancelled when four fifths of ClaimTTL
	// have passed, so that its claim never runs out while it is in flight:
	// keep it well above the slowest send you accept, and the clocks of
	// the relayers' hosts within a small part of it. Default 30s, minimum
	// 100ms.
	ClaimTTL time.Duration
	// BatchSize bounds how many events the relayer holds claimed at once:
	// waiting for a sender, being sent, or having their outcome recorded.
	// Claims are made ahead of the senders, so that they never wait for
	// the store, and take up to BatchSize events each. A claimed event
	// waits for at most BatchSize/Concurrency sends before its own; an
	// event that has waited for more than half its claim is given back
	// unsent, so with a slow sink keep that many sends well inside
	// ClaimTTL/2. Lower it also to share a backlog more evenly between
	// relayers. Default 64, minimum 1.
	BatchSize int
	// Concurrency is how many sends run at once (at most BatchSize).
	// Default 16, minimum 1.
	Concurrency int
	// Backoff spaces the attempts at an event that failed transiently:
	// Backoff.Backoff(n) after the n-th attempt, counted in the store so
	// that the spacing holds across relayers and restarts. Its MaxAttempts,
	// if set, ends delivery (expired) after that many attempts; its
	// MaxDuration is ignored (MaxAge bounds the time). Default: 1s doubling
	// to at most 1 minute, with ±20% jitter.
	Backoff supervisor.RetryPolicy
	// MaxAge bounds how long an event is retried, from when its step
	// committed: the last attempt is made at MaxAge, and an event still
	// failing then is marked expired and not sent again. Default 24h,
	// minimum 1s.
	MaxAge time.Duration
	// Wake signals that events may be waiting, so that they are relayed at
	// once rather than at the next poll: pass the System's WatchOutbox() to
	// relay what this node emits as soon as it commits, and, on a store
	// shared between processes that supports
	// persistence.OutboxNotifier (PostgreSQL), what other processes emit.
	// Optional; a closed channel is ignored from then on (the node
	// stopped; polling goes on). Without it, a relayer whose Store
	// supports persistence.OutboxNotifier listens to it itself.
	Wake <-chan struct{}
	// PollInterval is the safety net that finds events nothing signalled:
	// those committed by other processes on a store that cannot notify
	// (SQLite) or whose notifications were lost, and retries scheduled by
	// other relayers. Default 5s, with ±20% jitter; minimum 10ms.
	PollInterval time.Duration
	// Retention is how long an event whose delivery ended (sent, invalid
	// or expired) stays in the outbox, visible to ListOutbox, counted from
	// when it ended; then the relayer deletes it, so that the outbox does
	// not keep every event ever sent. A relayer prunes at its start and
	// then every Retention/2 (at most hourly, with jitter); several
	// relayers sharing a store may all prune it. Default 7 days; negative
	// keeps ended events forever (prune them yourself, with
	// persistence.Outbox.PruneOutbox). Pending events are never pruned.
	Retention time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Defaults and minimums of RelayerConfig.
const (
	defaultClaimTTL     = 30 * time.Second
	defaultBatchSize    = 64
	defaultConcurrency  = 16
	defaultMaxAge       = 24 * time.Hour
	defaultPollInterval = 5 * time.Second
	defaultRetention    = 7 * 24 * time.Hour

	minClaimTTL     = 100 * time.Millisecond
	minMaxAge       = time.Second
	minPollInterval = 10 * time.Millisecond

	// finishTimeout bounds recording one outcome, also when Run is
	// stopping: an outcome that is known is worth the wait.
	finishTimeout = 5 * time.Second
	// maxErrorText bounds the error text stored with an event.
	maxErrorText = 1024
)

// defaultBackoff is RelayerConfig.Backoff's default.
func defaultBackoff() supervisor.RetryPolicy {
	return supervisor.RetryPolicy{Initial: time.Second, Multiplier: 2, MaxInterval: time.Minute, Jitter: 0.2}
}

// Relayer delivers the events of an outbox to a Sink: emitted events are
// claimed from the store (so that relayers sharing a store never send one
// event at the same time), sent, and their outcome recorded, where
// ListOutbox shows it:
//
//   - accepted by the sink: sent;
//   - refused for good (an error wrapping ErrPermanent; HTTPSink: 4xx):
//     invalid, with the sink's answer, never retried;
//   - failed otherwise (5xx, network error, timeout): pending again, retried
//     after RelayerConfig.Backoff, until MaxAge after the event was
//     committed; then expired.
//
// Delivery is at least once: a relayer killed mid-send leaves its claim to
// expire, after which any relayer sends the event again with the same ID.
//
//	r, err := events.NewRelayer(events.RelayerConfig{
//		Store: store,
//		Sink:  &events.HTTPSink{URL: "https://example.com/events"},
//		Wake:  sys.WatchOutbox(),
//	})
//	go r.Run(ctx) // until ctx ends
type Relayer struct {
	cfg     RelayerConfig
	outbox  persistence.Outbox // cfg.Store
	log     *slog.Logger
	running atomic.Bool
}

// NewRelayer validates cfg and fills in its defaults.
func NewRelayer(cfg RelayerConfig) (*Relayer, error) {
	if cfg.Store == nil {
		return nil, errors.New("events: RelayerConfig.Store is required")
	}
	ob := persistence.Outbox(cfg.Store)
	if cfg.Sink == nil {
		return nil, errors.New("events: RelayerConfig.Sink is required")
	}
	for _, f := range []struct {
		name     string
		val, min time.Duration
	}{
		{"ClaimTTL", cfg.ClaimTTL, minClaimTTL},
		{"MaxAge", cfg.MaxAge, minMaxAge},
		{"PollInterval", cfg.PollInterval, minPollInterval},
	} {
		if f.val != 0 && f.val < f.min {
			return nil, fmt.Errorf("events: RelayerConfig.%s is %v; it must be at least %v (or zero for the default)", f.name, f.val, f.min)
		}
	}
	if cfg.BatchSize < 0 || cfg.Concurrency < 0 {
		return nil, fmt.Errorf("events: RelayerConfig.BatchSize (%d) and Concurrency (%d) must not be negative", cfg.BatchSize, cfg.Concurrency)
	}
	if cfg.Backoff == (supervisor.RetryPolicy{}) {
		cfg.Backoff = defaultBackoff()
	} else if err := cfg.Backoff.Validate(); err != nil {
		return nil, fmt.Errorf("events: RelayerConfig.Backoff: %w", err)
	}
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner()
	} else if err := persistence.ValidateID("RelayerConfig.Owner", cfg.Owner); err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	cfg.ClaimTTL = or(cfg.ClaimTTL, defaultClaimTTL)
	cfg.MaxAge = or(cfg.MaxAge, defaultMaxAge)
	cfg.PollInterval = or(cfg.PollInterval, defaultPollInterval)
	cfg.Retention = or(cfg.Retention, defaultRetention)
	cfg.BatchSize = or(cfg.BatchSize, defaultBatchSize)
	cfg.Concurrency = or(cfg.Concurrency, defaultConcurrency)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Relayer{cfg: cfg, outbox: ob, log: cfg.Logger.With("relayer", cfg.Owner)}, nil
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func defaultOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("relay-%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Owner is the name this relayer claims events under.
func (r *Relayer) Owner() string { return r.cfg.Owner }

// claimed is one claimed event, with when its claim was taken.
type claimed struct {
	rec persistence.OutboxRecord
	at  time.Time
}

// Run relays events until ctx ends, then gives back the events it claimed
// but did not send (without counting an attempt: any relayer may take them
// at once), waits for the sends in flight to end (they are cancelled, and
// count as attempts) and their outcomes to be recorded, and returns nil. It
// returns an error only if the store is closed; a store that fails
// otherwise is retried. One Relayer runs once at a time; run several
// Relayers (with different Owners) for more throughput or availability.
func (r *Relayer) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("events: Relayer.Run is already running")
	}
	defer r.running.Store(false)
	l := &loop{r: r, ctx: ctx, batch: r.cfg.BatchSize, conc: min(r.cfg.Concurrency, r.cfg.BatchSize)}
	return l.run()
}

// loop is one Run: a claimer that keeps up to batch events claimed, and
// conc senders that send them. Claims are made ahead of the senders, and
// outcomes are recorded after them, so that neither waits for the store's
// commits: a relayer's rate is not bound by one event per sender per
// commit.
type loop struct {
	r           *Relayer
	ctx         context.Context
	batch, conc int

	work     chan claimed     // to the senders (unbuffered)
	idle     chan struct{}    // a sender is free again
	finished chan time.Time   // an outcome is recorded: when the event is due again, or zero
	claims   chan claimResult // the outcome of the claim in flight

	senders   sync.WaitGroup
	recorders sync.WaitGroup

	queue    []claimed // claimed, waiting for a sender
	free     int       // idle senders
	held     int       // claimed and not finished: queued, being sent or being recorded
	claiming bool
	want     bool // events may be due: claim when there is room
	pollAt   time.Time
	retries  timeHeap // when the events this relayer gave back are due
}

type claimResult struct {
	recs  []persistence.OutboxRecord
	at    time.Time
	asked int
	err   error
}

func (l *loop) run() error {
	l.work = make(chan claimed)
	l.idle = make(chan struct{}, l.conc)
	l.finished = make(chan time.Time, l.batch) // one per held event: never full
	l.claims = make(chan claimResult, 1)
	l.free = l.conc
	for range l.conc {
		l.senders.Go(l.sender)
	}
	defer l.shutdown()
	if l.r.cfg.Retention > 0 {
		var pruner sync.WaitGroup
		pctx, cancel := context.WithCancel(l.ctx)
		pruner.Go(func() { l.r.pruneLoop(pctx) })
		defer pruner.Wait()
		defer cancel()
	}

	timer := time.NewTimer(0)
	defer timer.Stop()
	wake := l.r.cfg.Wake
	if wake == nil {
		lctx, cancel := context.WithCancel(l.ctx)
		ch, err := l.r.cfg.Store.ListenOutbox(lctx)
		if err != nil {
			cancel()
			if !errors.Is(err, persistence.ErrUnsupported) {
				l.r.log.Warn("cannot listen for other processes' outgoing events; polling", "err", err)
			}
		} else {
			wake = ch
			defer func() {
				cancel()
				for range ch { // until the listener is gone
				}
			}()
		}
	}
	l.want = true // at start: relay whatever is waiting
	for {
		l.dispatch()
		l.claim()
		due := l.pollAt
		if len(l.retries) > 0 && l.retries[0].Before(due) {
			due = l.retries[0]
		}
		timer.Reset(time.Until(due))
		select {
		case <-l.ctx.Done():
			return nil
		case _, ok := <-wake:
			if !ok {
				wake = nil // the node stopped; polling carries on
				continue
			}
			l.want = true
		case <-l.idle:
			l.free++
		case next := <-l.finished:
			l.held--
			if !next.IsZero() {
				heap.Push(&l.retries, next)
			}
		case res := <-l.claims:
			if err := l.claimed(res); err != nil {
				return err
			}
		case now := <-timer.C:
			for len(l.retries) > 0 && !l.retries[0].After(now) {
				heap.Pop(&l.retries)
			}
			l.want = true
		}
	}
}

// claim starts a claim if events may be due, none is in flight, there is
// room for more, and the queue is short enough to run dry soon.
func (l *loop) claim() {
	if !l.want || l.claiming || l.held >= l.batch || len(l.queue) >= l.conc {
		return
	}
	n := l.batch - l.held
	at := time.Now()
	l.claiming, l.want = true, false
	l.pollAt = at.Add(jitter(l.r.cfg.PollInterval))
	// Not cancelled with Run: a claim that commits must be seen, so that
	// its events are given back at the stop rather than left to expire.
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), finishTimeout)
		defer cancel()
		recs, err := l.r.outbox.ClaimOutbox(ctx, l.r.cfg.Owner, at, l.r.cfg.ClaimTTL, n)
		l.claims <- claimResult{recs: recs, at: at, asked: n, err: err}
	}()
}

// claimed takes a claim's outcome.
func (l *loop) claimed(res claimResult) error {
	l.claiming = false
	switch {
	case res.err == nil:
		for _, rec := range res.recs {
			l.queue = append(l.queue, claimed{rec: rec, at: res.at})
		}
		l.held += len(res.recs)
		if len(res.recs) == res.asked {
			l.want = true // a full claim: more may be waiting
		}
	case errors.Is(res.err, persistence.ErrStoreClosed), errors.Is(res.err, persistence.ErrUnsupported):
		return fmt.Errorf("events: relayer %s: %w", l.r.cfg.Owner, res.err)
	default:
		if l.ctx.Err() == nil {
			l.r.log.Warn("claiming events failed; retrying", "err", res.err)
		}
		l.want = false
		l.pollAt = time.Now().Add(jitter(min(time.Second, l.r.cfg.PollInterval)))
	}
	return nil
}

// dispatch hands queued events to idle senders.
func (l *loop) dispatch() {
	ttl := l.r.cfg.ClaimTTL
	// Not once stopping: shutdown releases the queue.
	for l.free > 0 && len(l.queue) > 0 && l.ctx.Err() == nil {
		c := l.queue[0]
		l.queue[0] = claimed{}
		l.queue = l.queue[1:]
		if time.Until(c.at.Add(sendWindow(ttl))) < ttl/4 {
			// It waited here for most of its claim (a slow sink): give it
			// back rather than start a send that the claim may not cover.
			l.record(c, time.Time{}, errClaimShort)
			continue
		}
		l.free--
		l.work <- c // to an idle sender
	}
}

// sender sends events, leaving their outcomes to be recorded aside.
func (l *loop) sender() {
	for c := range l.work {
		if l.ctx.Err() != nil {
			// Stopping: not sent at all (see also dispatch).
			l.record(c, time.Time{}, errStopped)
			l.idle <- struct{}{}
			continue
		}
		created, err := l.r.attempt(l.ctx, c)
		l.record(c, created, err)
		l.idle <- struct{}{}
	}
}

// record records an outcome in the background and reports it on finished.
func (l *loop) record(c claimed, created time.Time, err error) {
	l.recorders.Go(func() { l.finished <- l.r.outcome(l.ctx, c, created, err) })
}

// shutdown gives back what was claimed and not sent, and waits for the
// senders and the recording of their outcomes.
func (l *loop) shutdown() {
	if l.claiming {
		res := <-l.claims
		for _, rec := range res.recs {
			l.queue = append(l.queue, claimed{rec: rec, at: res.at})
		}
	}
	if len(l.queue) > 0 {
		// Never sent: given back without counting an attempt, so that
		// another relayer (or this one, restarted) takes them at once.
		recs := make([]persistence.OutboxRecord, len(l.queue))
		for i, c := range l.queue {
			recs[i] = c.rec
		}
		l.r.release(l.ctx, recs, errStopped)
	}
	l.queue = nil
	close(l.work)
	l.senders.Wait()
	l.recorders.Wait()
}

// sendWindow is how long after its claim an event may still be sent: the
// rest of the claim is left for recording the outcome, so that the claim
// never runs out while the event is in flight.
func sendWindow(ttl time.Duration) time.Duration { return ttl * 4 / 5 }

// Why an event claimed but never sent goes back to pending.
var (
	errClaimShort = errors.New("events: not sent: the event waited for a sender for most of its claim")
	errStopped    = errors.New("events: not sent: the relayer stopped")
)

// timeHeap is a min-heap of times (container/heap).
type timeHeap []time.Time

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *timeHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

// jitter spreads d by ±20%, so that relayers started together do not poll
// the store in step.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*mrand.Float64()))
}

// attempt sends one claimed event. It returns the event's creation time
// (for MaxAge) and the sink's answer.
func (r *Relayer) attempt(ctx context.Context, c claimed) (time.Time, error) {
	rec := c.rec
	var e event.Event
	if err := json.Unmarshal(rec.Data, &e); err != nil {
		return rec.At, fmt.Errorf("%w: the stored event does not decode: %v", ErrPermanent, err)
	}
	if e.ID() == "" {
		// Emit leaves the ID to the outbox (see Emit).
		e.SetID(rec.ID)
	}
	created := rec.At
	if created.IsZero() {
		created = e.Time()
	}
	// Give up on the send before the claim runs out: after that another
	// relayer may claim the event and send it at the same time.
	sctx, cancel := context.WithDeadline(ctx, c.at.Add(sendWindow(r.cfg.ClaimTTL)))
	defer cancel()
	return created, r.send(sctx, e)
}

// outcome records how an attempt at a claimed event went. It returns when
// the event is due again if it stays pending (zero if not).
func (r *Relayer) outcome(ctx context.Context, c claimed, created time.Time, err error) time.Time {
	rec := c.rec
	log := r.log.With("event", rec.ID, "type", rec.Type, "attempt", rec.Attempts+1)
	now := time.Now()
	switch {
	case err == nil:
		r.finish(ctx, log, rec, persistence.OutboxSent, time.Time{}, nil)
		return time.Time{}
	case errors.Is(err, errClaimShort) || errors.Is(err, errStopped):
		// Never sent: given back without counting an attempt, due again
		// at once (for any relayer).
		r.release(ctx, []persistence.OutboxRecord{rec}, err)
		return now
	case ctx.Err() != nil:
		// Stopping: give the event back at once rather than leave it to
		// the claim's expiry. Whether the sink got it is unknown, so it is
		// sent again (at least once).
		r.finish(ctx, log, rec, persistence.OutboxPending, now, fmt.Errorf("relayer stopped during the send: %w", err))
		return time.Time{}
	case errors.Is(err, ErrPermanent):
		r.finish(ctx, log, rec, persistence.OutboxInvalid, time.Time{}, err)
		return time.Time{}
	}
	deadline := created.Add(r.cfg.MaxAge)
	attempt := rec.Attempts + 1
	p := r.cfg.Backoff
	if (!created.IsZero() && !now.Before(deadline)) || (p.MaxAttempts > 0 && attempt >= p.MaxAttempts) {
		r.finish(ctx, log, rec, persistence.OutboxExpired, time.Time{}, err)
		return time.Time{}
	}
	next := now.Add(p.Backoff(attempt))
	if !created.IsZero() && next.After(deadline) {
		next = deadline // one last attempt at MaxAge
	}
	if !r.finish(ctx, log, rec, persistence.OutboxPending, next, err) {
		return time.Time{}
	}
	return next
}

// release gives back claimed events that were never sent, without
// counting an attempt.
func (r *Relayer) release(ctx context.Context, recs []persistence.OutboxRecord, why error) {
	ids := make([]string, len(recs))
	for i, rec := range recs {
		ids[i] = rec.ID
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	n, err := r.outbox.ReleaseOutbox(rctx, r.cfg.Owner, ids)
	switch {
	case err != nil:
		r.log.Warn("claims on unsent events not released; the events are sent once the claims expire", "events", len(ids), "reason", why, "err", err)
	case n < len(ids):
		r.log.Warn("some claims on unsent events had run out already", "events", len(ids), "released", n, "reason", why)
	default:
		r.log.Debug("claims on unsent events released", "events", n, "reason", why)
	}
}

// pruneLoop deletes the events whose delivery ended more than Retention
// ago, at once and then every Retention/2 (at most hourly), until ctx ends.
func (r *Relayer) pruneLoop(ctx context.Context) {
	every := min(max(r.cfg.Retention/2, minPollInterval), time.Hour)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.prune(ctx)
		t.Reset(jitter(every))
	}
}

// prune deletes the events whose delivery ended before now-Retention, in
// rounds of persistence.DefaultPruneLimit, each its own transaction.
func (r *Relayer) prune(ctx context.Context) {
	before := time.Now().Add(-r.cfg.Retention)
	total := 0
	for ctx.Err() == nil {
		n, err := r.outbox.PruneOutbox(ctx, before, persistence.DefaultPruneLimit)
		total += n
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("pruning ended events failed; trying again later", "err", err)
			}
			break
		}
		if n < persistence.DefaultPruneLimit {
			break
		}
	}
	if total > 0 {
		r.log.Debug("ended events pruned", "events", total, "ended_before", before)
	}
}

// send calls the sink, turning a panic into a transient error: one bad
// event must not take the relayer down.
func (r *Relayer) send(ctx context.Context, e event.Event) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("events: sink panicked: %v", p)
		}
	}()
	return r.cfg.Sink.Send(ctx, e)
}

// finish records one attempt's outcome and reports whether it was stored.
func (r *Relayer) finish(ctx context.Context, log *slog.Logger, rec persistence.OutboxRecord, status persistence.OutboxStatus, next time.Time, cause error) bool {
	var text string
	if cause != nil {
		text = errorText(cause)
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if err := r.outbox.FinishOutbox(fctx, rec.ID, r.cfg.Owner, status, next, text); err != nil {
		if errors.Is(err, persistence.ErrLeaseHeld) {
			log.Warn("event outcome not recorded: the claim ran out during the send, and another relayer may have sent it too", "outcome", status)
		} else {
			log.Warn("event outcome not recorded; the event is sent again once its claim expires", "outcome", status, "err", err)
		}
		return false
	}
	switch status {
	case persistence.OutboxSent:
		log.Debug("event sent")
	case persistence.OutboxPending:
		log.Info("event delivery failed; retrying", "next", next, "err", text)
	default:
		log.Warn("event delivery ended without success", "outcome", status, "err", text)
	}
	return true
}

// errorText is storable error text: valid UTF-8 without NUL bytes, at most
// maxErrorText bytes.
func errorText(err error) string {
	s := strings.ReplaceAll(strings.ToValidUTF8(err.Error(), "\uFFFD"), "\x00", "\uFFFD")
	if len(s) <= maxErrorText {
		return s
	}
	cut := maxErrorText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
