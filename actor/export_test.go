package actor

import (
	"context"
	"sync/atomic"
	"time"
)

// IsStopping reports whether Stop has begun, so that tests can fire events
// between the start of a shutdown and the moment a start looks at it.
func (s *System) IsStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// ParkWatch is a Hooks that also hears each activation that is about to
// park in a receive, having found nothing in its mailbox (or, a new
// instance, knowing it empty): the one race point no store wrapper can
// reach (see parkWatcher). Pass it as Config.Hooks; set its function with
// OnPark at any time.
type ParkWatch struct {
	inner  Hooks
	fn     atomic.Pointer[func(id string)]
	gather atomic.Pointer[func()]
}

// OnGather makes fn be called, on the goroutine of the consumer leading a
// fetch, each time a gather starts to wait for the other consumers.
func (p *ParkWatch) OnGather(fn func()) { p.gather.Store(&fn) }

func (p *ParkWatch) inGather() {
	if fn := p.gather.Load(); fn != nil {
		(*fn)()
	}
}

// WatchParks wraps inner (nil: no other hooks).
func WatchParks(inner Hooks) *ParkWatch { return &ParkWatch{inner: inner} }

// OnPark makes fn be called, on the activation's goroutine, before each
// park in a receive.
func (p *ParkWatch) OnPark(fn func(id string)) { p.fn.Store(&fn) }

// Observe implements Hooks.
func (p *ParkWatch) Observe(ctx context.Context, e HookEvent) {
	if p.inner != nil {
		p.inner.Observe(ctx, e)
	}
}

func (p *ParkWatch) beforePark(id string) {
	if fn := p.fn.Load(); fn != nil {
		(*fn)(id)
	}
}

// StopActivation stops the live activation of id as a lost lease does,
// leaving the instance as it is; it reports whether there was one.
func (s *System) StopActivation(id string) bool {
	s.mu.Lock()
	a := s.acts[id]
	s.mu.Unlock()
	return a != nil && a.leaseLost()
}

// Waiters is how many Await calls wait for id's end on this node.
func (s *System) Waiters(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters[id])
}

// Starting is how many instances this node is about to activate: queued
// for an activator, or loading.
func (s *System) Starting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts.Len()
}

// FetchByClaims makes the fetchers serve every competing receive they may
// by a claim (claims: the way on a store with several writers), or, on a
// single-writer store, by mailbox reads but on a backlog.
func (s *System) FetchByClaims(claims bool) {
	s.fetchers.mu.Lock()
	s.fetchers.reads = !claims
	s.fetchers.mu.Unlock()
}

// FetchWaiting is how many asks wait at the fetcher of channel ch.
func (s *System) FetchWaiting(ch string) int {
	s.fetchers.mu.Lock()
	defer s.fetchers.mu.Unlock()
	if cf := s.fetchers.by[ch]; cf != nil {
		return len(cf.pending)
	}
	return 0
}

// FlushFetchedAt is how many messages a consumer fed by claims takes
// before it commits them.
const FlushFetchedAt = flushFetchedAt

// GatherFor makes every gather of the node's fetchers wait up to d for
// the consumers it expects, whatever the last claim took, so that a test
// of how claims batch does not depend on the machine's speed. Call it
// before the consumers start.
func (s *System) GatherFor(d time.Duration) {
	s.fetchers.mu.Lock()
	s.fetchers.waitFor = d
	s.fetchers.mu.Unlock()
}
