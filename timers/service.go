package timers

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// Source is the part of the store the service reads.
type Source interface {
	DueTimers(ctx context.Context, before time.Time, buckets []int, limit int) ([]persistence.Timer, error)
}

// Ownership says which instances' timers this node fires. A cluster node
// owns some buckets of instance IDs; a node alone owns everything (OwnAll).
type Ownership interface {
	// Owns reports whether this node fires the instance's timers.
	Owns(instanceID string) bool
	// Buckets lists the buckets owned (see persistence.BucketOf); nil
	// means all of them.
	Buckets() []int
}

// OwnAll is the ownership of a node that is alone.
type OwnAll struct{}

// Owns is always true.
func (OwnAll) Owns(string) bool { return true }

// Buckets is nil: every bucket.
func (OwnAll) Buckets() []int { return nil }

// Config configures a Service.
type Config struct {
	// Source is where timers are loaded from. Required.
	Source Source
	// Fire is called (from the service's goroutine; it must not block) when a
	// timer is due. Required.
	Fire func(persistence.Timer)
	// Ownership filters the timers this node fires. Default OwnAll. After
	// it changes, call Reload.
	Ownership Ownership
	// Horizon is how far ahead timers are held in memory. Default 1 minute.
	Horizon time.Duration
	// BatchLimit is how many timers one load reads beyond those already
	// held. Default 10,000.
	BatchLimit int
	// Warm, when set, is called (like Fire, from the service's goroutine;
	// it must not block) WarmLead before each timer is due, so that the
	// instance can be made ready ahead of time (activated, its history
	// replayed) and the firing itself costs only its commit. A timer that
	// has less than WarmLead left when it is scheduled or loaded is warmed
	// at once. Fire is called at the due time all the same.
	Warm func(persistence.Timer)
	// WarmLead is how long before its due time a timer is warmed. Default
	// 1 second; it is capped at half the Horizon.
	WarmLead time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Clock is what due times are read and waited on with. Default: real
	// time. The reloads that refresh the horizon stay on real time.
	Clock Clock
	// Work, when set, hears +1 and -1 around the work the service has in
	// hand, so that its owner can tell when nothing is going on: from New
	// until the first load has been read, during each load, and from a due
	// time coming up until its timers are fired (Fire called). Run must be
	// called once New was (the first count is released there).
	Work func(delta int)
}

// Clock is a source of time the service reads and waits on (see
// actor.Clock, which has the same methods).
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once d has passed on this clock; stop cancels
	// the call and reports whether it did.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// Service fires timers. Create with New, run with Run.
type Service struct {
	cfg    Config
	kick   chan struct{}
	reload chan struct{}

	mu   sync.Mutex
	h    timerHeap // timers to fire
	cold timerHeap // timers not warmed yet (with Config.Warm), to move to h
	// known holds the due time of every timer in the heap, and of the
	// timers fired since the last load: the store keeps a fired timer
	// until its instance commits the fire, and a reload that reads it
	// again must not fire it twice.
	known   map[key]entry
	horizon time.Time // timers due before it have been loaded
	loading bool      // a load is reading the store
	// early holds timers scheduled while a load was in flight or before
	// the first one: the load may have read the store before they were
	// committed, so they are added once it has set the new horizon.
	early []persistence.Timer
}

type key struct{ inst, id string }

type entry struct {
	due   time.Time
	fired time.Time // zero while in the heap
}

// refireAfter is how long a fired timer that the store still holds is left
// alone: normally its instance commits the fire within milliseconds; one
// still there later lost its wake-up (a failed activation, a node gone)
// and fires again.
const refireAfter = 10 * time.Second

// minReloadGap spaces the loads that follow a load cut at BatchLimit.
const minReloadGap = 50 * time.Millisecond

// New validates cfg and returns a service.
func New(cfg Config) (*Service, error) {
	if cfg.Source == nil || cfg.Fire == nil {
		return nil, errors.New("timers: Config.Source and Config.Fire are required")
	}
	if cfg.Ownership == nil {
		cfg.Ownership = OwnAll{}
	}
	if cfg.Horizon <= 0 {
		cfg.Horizon = time.Minute
	}
	if cfg.BatchLimit <= 0 {
		cfg.BatchLimit = 10000
	}
	if cfg.WarmLead <= 0 {
		cfg.WarmLead = time.Second
	}
	cfg.WarmLead = min(cfg.WarmLead, cfg.Horizon/2)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Work == nil {
		cfg.Work = func(int) {}
	}
	cfg.Work(1) // the first load (see Run)
	return &Service{cfg: cfg, known: map[key]entry{}, kick: make(chan struct{}, 1), reload: make(chan struct{}, 1)}, nil
}

// Schedule adds a timer that was just committed. Timers beyond the loaded
// horizon are left to the next reload.
func (s *Service) Schedule(t persistence.Timer) {
	if !s.cfg.Ownership.Owns(t.Instance) {
		return
	}
	s.mu.Lock()
	if s.loading || s.horizon.IsZero() {
		s.early = append(s.early, t)
		s.mu.Unlock()
		return
	}
	if t.Due.After(s.horizon) {
		s.mu.Unlock()
		return
	}
	// A timer already held or fired with this due time is not pushed
	// again, and the heap may then be empty.
	top := s.push(t) && s.next().Equal(s.nextOf(t))
	s.mu.Unlock()
	if top {
		// Work until Run waits for the new due time (see Config.Work).
		s.cfg.Work(1)
		select {
		case s.kick <- struct{}{}:
		default:
			s.cfg.Work(-1)
		}
	}
}

// Reload asks for the store to be read again (after an ownership change or a
// gap in notifications).
func (s *Service) Reload() { s.poke(s.reload) }

// Pending is the number of timers held in memory.
func (s *Service) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.h) + len(s.cold)
}

// lead is how long before its due time a timer is warmed.
func (s *Service) lead() time.Duration {
	if s.cfg.Warm == nil {
		return 0
	}
	return s.cfg.WarmLead
}

// nextOf is when the service next acts on t: it warms it, or fires it.
func (s *Service) nextOf(t persistence.Timer) time.Time {
	return t.Due.Add(-s.lead())
}

// next is when the service next acts on a timer it holds (zero if none);
// caller holds mu.
func (s *Service) next() time.Time {
	var t time.Time
	if len(s.h) > 0 {
		t = s.h[0].Due
	}
	if len(s.cold) > 0 {
		if w := s.nextOf(s.cold[0]); t.IsZero() || w.Before(t) {
			t = w
		}
	}
	return t
}

func (s *Service) poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// push adds t unless it is already held, or was fired, with the same due
// time, and reports whether it did; caller holds mu.
func (s *Service) push(t persistence.Timer) bool {
	k := key{t.Instance, t.ID}
	if e, ok := s.known[k]; ok && e.due.Equal(t.Due) {
		return false
	}
	s.known[k] = entry{due: t.Due}
	if s.cfg.Warm != nil {
		heap.Push(&s.cold, t)
	} else {
		heap.Push(&s.h, t)
	}
	return true
}

// load reads the timers due within the horizon. It reports whether the read
// was cut at its limit: the horizon then ends at the last timer read, and
// the next load must come before that time.
func (s *Service) load(ctx context.Context) (bool, error) {
	s.mu.Lock()
	s.loading = true
	// The timers already held, and those fired but not yet committed by
	// their instances, come first in the read: read past them.
	limit := s.cfg.BatchLimit + len(s.known)
	s.mu.Unlock()
	now := s.cfg.Clock.Now()
	until := now.Add(s.cfg.Horizon)
	ts, err := s.cfg.Source.DueTimers(ctx, until, s.cfg.Ownership.Buckets(), limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loading = false
	if err != nil {
		return false, err
	}
	cut := len(ts) == limit
	if cut {
		// More were due than one batch holds: the horizon ends just
		// before the last one read (timers due at that same instant may
		// be left out), and the next load continues from there.
		until = ts[len(ts)-1].Due.Add(-1)
	}
	// Fired timers the store no longer holds are done with.
	read := make(map[key]bool, len(ts))
	for _, t := range ts {
		read[key{t.Instance, t.ID}] = true
	}
	for k, e := range s.known {
		if !e.fired.IsZero() && (!read[k] || now.Sub(e.fired) > refireAfter) {
			delete(s.known, k)
		}
	}
	for _, t := range ts {
		if !t.Due.After(until) && s.cfg.Ownership.Owns(t.Instance) {
			s.push(t)
		}
	}
	s.horizon = until
	early := s.early
	s.early = nil
	for _, t := range early {
		if !t.Due.After(until) && s.cfg.Ownership.Owns(t.Instance) {
			s.push(t)
		}
	}
	return cut, nil
}

// Run fires timers until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	// Due times are waited for on the Clock, reloads on real time.
	due := newDueWait(s.cfg.Clock, s.cfg.Work)
	defer due.stop()
	reload := time.NewTimer(time.Hour)
	reload.Stop()
	defer reload.Stop()
	reloadEvery := s.cfg.Horizon / 2
	// Loads run on their own goroutine, so that a long read (tens of
	// thousands of timers) does not hold back the firing of those due
	// meanwhile; one at a time.
	type loaded struct {
		cut bool
		err error
		at  time.Time
	}
	done := make(chan loaded, 1)
	var loads sync.WaitGroup
	defer loads.Wait()
	loading, again, first, reloadDue := false, false, true, true
	defer func() {
		if first {
			s.cfg.Work(-1)
		}
	}()
	firedWork := 0
	for {
		if !loading && reloadDue {
			loading, again, reloadDue = true, false, false
			s.cfg.Work(1)
			loads.Go(func() {
				at := s.cfg.Clock.Now()
				cut, err := s.load(ctx)
				done <- loaded{cut, err, at}
			})
		}
		next := s.fireDue(s.cfg.Clock.Now())
		if !next.IsZero() {
			due.reset(next.Sub(s.cfg.Clock.Now()))
		} else {
			due.stop()
		}
		// What came due has been fired (and woken its instances, which
		// count as work of their own), and the next due time is waited on.
		s.cfg.Work(-firedWork)
		firedWork = 0
		select {
		case <-ctx.Done():
			return nil
		case l := <-done:
			loading = false
			nextReload := s.afterLoad(ctx, l.cut, l.err, l.at, reloadEvery)
			if again {
				nextReload = time.Time{}
			}
			reload.Reset(nextReload.Sub(s.cfg.Clock.Now()))
			s.cfg.Work(-1)
			if first {
				first = false
				s.cfg.Work(-1)
			}
		case <-reload.C:
			reloadDue = true
		case <-due.c:
			firedWork++
		case <-s.kick:
			firedWork++ // see Schedule
		case <-s.reload:
			if !reload.Stop() {
				select {
				case <-reload.C:
				default:
				}
			}
			reloadDue, again = true, loading
			s.mu.Lock()
			for _, h := range []*timerHeap{&s.h, &s.cold} {
				for i := 0; i < len(*h); {
					if t := (*h)[i]; !s.cfg.Ownership.Owns(t.Instance) {
						delete(s.known, key{t.Instance, t.ID})
						heap.Remove(h, i)
						continue
					}
					i++
				}
			}
			s.mu.Unlock()
		}
	}
}

// dueWait is a wait on the Clock whose firing counts as work (see
// Config.Work) from the moment it fires until it is received from c or
// dropped by stop.
type dueWait struct {
	clock Clock
	work  func(int)
	c     chan struct{}

	mu     sync.Mutex
	gen    int // the armed wait's generation: a stale firing is ignored
	cancel func() bool
}

func newDueWait(clock Clock, work func(int)) *dueWait {
	return &dueWait{clock: clock, work: work, c: make(chan struct{}, 1)}
}

// reset arms the wait for d from now, dropping any earlier one.
func (w *dueWait) reset(d time.Duration) {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	gen := w.gen
	w.cancel = w.clock.AfterFunc(d, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.gen != gen || w.cancel == nil {
			return
		}
		w.cancel = nil
		w.work(1)
		w.c <- struct{}{}
	})
}

// stop drops the armed wait and a firing not yet received.
func (w *dueWait) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	if w.cancel != nil {
		w.cancel()
		w.cancel = nil
	}
	select {
	case <-w.c:
		w.work(-1)
	default:
	}
}

// afterLoad says when to load next after a load that started at now.
func (s *Service) afterLoad(ctx context.Context, cut bool, err error, now time.Time, reloadEvery time.Duration) time.Time {
	switch {
	case err != nil && ctx.Err() != nil:
		return now.Add(reloadEvery) // stopping
	case err != nil:
		s.cfg.Logger.Warn("timers: reload failed; retrying", "err", err)
		return now.Add(time.Second)
	case cut:
		// Read on before the loaded timers run out: at the horizon at the
		// latest, earlier when it is far off. With Warm, the timers just
		// past the horizon must be read a lead ahead of it, or they would
		// be warmed late. Not sooner than minReloadGap: a backlog of
		// overdue timers whose fires are not yet committed reads the same
		// batch again until they are.
		s.mu.Lock()
		defer s.mu.Unlock()
		next := now.Add(reloadEvery)
		if edge := s.horizon.Add(-s.lead()); edge.Before(next) {
			next = edge
		}
		if gap := now.Add(minReloadGap); next.Before(gap) {
			next = gap
		}
		return next
	default:
		return now.Add(reloadEvery)
	}
}

// fireDue warms every timer due within WarmLead of now, fires every timer
// due at or before now, and returns when it has next to act.
func (s *Service) fireDue(now time.Time) time.Time {
	var warm, fire []persistence.Timer
	s.mu.Lock()
	for len(s.cold) > 0 && !s.nextOf(s.cold[0]).After(now) {
		t := heap.Pop(&s.cold).(persistence.Timer)
		heap.Push(&s.h, t)
		warm = append(warm, t)
	}
	for len(s.h) > 0 && !s.h[0].Due.After(now) {
		t := heap.Pop(&s.h).(persistence.Timer)
		k := key{t.Instance, t.ID}
		if e, ok := s.known[k]; ok && e.due.Equal(t.Due) {
			s.known[k] = entry{due: t.Due, fired: now}
		}
		fire = append(fire, t)
	}
	next := s.next()
	s.mu.Unlock()
	for _, t := range warm {
		s.cfg.Warm(t)
	}
	for _, t := range fire {
		s.cfg.Fire(t)
	}
	return next
}

type timerHeap []persistence.Timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].Due.Before(h[j].Due) }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(persistence.Timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}
