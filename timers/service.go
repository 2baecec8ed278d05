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

// Ownership says which instances this node owns. The cluster implements it;
// a single node owns everything (OwnAll).
type Ownership interface {
	Owns(instanceID string) bool
	// Changed is signalled (may be nil) when the set of owned keys changes.
	Changed() <-chan struct{}
}

// OwnAll is the ownership of a node that is alone.
type OwnAll struct{}

// Owns is always true.
func (OwnAll) Owns(string) bool { return true }

// Changed never fires.
func (OwnAll) Changed() <-chan struct{} { return nil }

// Config configures a Service.
type Config struct {
	// Source is where timers are loaded from. Required.
	Source Source
	// Fire is called (from the service's goroutine; it must not block) when a
	// timer is due. Required.
	Fire func(persistence.Timer)
	// Ownership filters the timers this node fires. Default OwnAll.
	Ownership Ownership
	// Horizon is how far ahead timers are held in memory. Default 1 minute.
	Horizon time.Duration
	// BatchLimit caps one reload query. Default 10,000.
	BatchLimit int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Service fires timers. Create with New, run with Run.
type Service struct {
	cfg     Config
	mu      sync.Mutex
	h       timerHeap
	known   map[key]time.Time
	kick    chan struct{}
	reload  chan struct{}
	horizon time.Time // timers due before it have been loaded
}

type key struct{ inst, id string }

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
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Service{cfg: cfg, known: map[key]time.Time{}, kick: make(chan struct{}, 1), reload: make(chan struct{}, 1)}, nil
}

// Schedule adds a timer that was just committed. Timers beyond the loaded
// horizon are left to the next reload.
func (s *Service) Schedule(t persistence.Timer) {
	s.mu.Lock()
	if s.horizon.IsZero() || t.Due.After(s.horizon) || !s.cfg.Ownership.Owns(t.Instance) {
		s.mu.Unlock()
		return
	}
	s.push(t)
	top := s.h[0].Due.Equal(t.Due)
	s.mu.Unlock()
	if top {
		s.poke(s.kick)
	}
}

// Reload asks for the store to be read again (after an ownership change or a
// gap in notifications).
func (s *Service) Reload() { s.poke(s.reload) }

// Pending is the number of timers held in memory.
func (s *Service) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.h)
}

func (s *Service) poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// push adds t unless it is already held with the same due time; caller holds mu.
func (s *Service) push(t persistence.Timer) {
	k := key{t.Instance, t.ID}
	if due, ok := s.known[k]; ok && due.Equal(t.Due) {
		return
	}
	s.known[k] = t.Due
	heap.Push(&s.h, t)
}

func (s *Service) load(ctx context.Context) error {
	now := time.Now()
	until := now.Add(s.cfg.Horizon)
	ts, err := s.cfg.Source.DueTimers(ctx, until, nil, s.cfg.BatchLimit)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range ts {
		if s.cfg.Ownership.Owns(t.Instance) {
			s.push(t)
		}
	}
	if len(ts) == s.cfg.BatchLimit {
		// More were due than one batch holds: the horizon ends at the last
		// one read, and the next reload continues from there.
		until = ts[len(ts)-1].Due
	}
	s.horizon = until
	return nil
}

// Run fires timers until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	wait := time.NewTimer(0)
	defer wait.Stop()
	reloadEvery := s.cfg.Horizon / 2
	nextReload := time.Time{}
	for {
		now := time.Now()
		if !now.Before(nextReload) {
			if err := s.load(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.cfg.Logger.Warn("timers: reload failed; retrying", "err", err)
				nextReload = now.Add(time.Second)
			} else {
				nextReload = now.Add(reloadEvery)
			}
		}
		due := s.fireDue(time.Now())
		next := nextReload
		if !due.IsZero() && due.Before(next) {
			next = due
		}
		wait.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return nil
		case <-wait.C:
		case <-s.kick:
			if !wait.Stop() {
				select {
				case <-wait.C:
				default:
				}
			}
		case <-s.reload:
			nextReload = time.Time{}
			s.mu.Lock()
			for i := 0; i < len(s.h); {
				if !s.cfg.Ownership.Owns(s.h[i].Instance) {
					delete(s.known, key{s.h[i].Instance, s.h[i].ID})
					heap.Remove(&s.h, i)
					continue
				}
				i++
			}
			s.mu.Unlock()
		case <-s.cfg.Ownership.Changed():
			s.poke(s.reload)
		}
	}
}

// fireDue fires every timer due at or before now and returns the next due time.
func (s *Service) fireDue(now time.Time) time.Time {
	var fire []persistence.Timer
	s.mu.Lock()
	for len(s.h) > 0 && !s.h[0].Due.After(now) {
		t := heap.Pop(&s.h).(persistence.Timer)
		k := key{t.Instance, t.ID}
		if due, ok := s.known[k]; ok && due.Equal(t.Due) {
			delete(s.known, k)
		}
		fire = append(fire, t)
	}
	var next time.Time
	if len(s.h) > 0 {
		next = s.h[0].Due
	}
	s.mu.Unlock()
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
