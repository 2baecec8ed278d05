package testutil

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// InterceptStore wraps a Store so that a test can watch calls into it and
// pause them at the moment a race needs (between a read and the decision
// taken on it). Set the hooks before the store is used; they run on the
// caller's goroutine and must be safe for concurrent calls. A nil hook is
// skipped. It hides the wrapped store's notifications (see Listen); every
// other call goes to the wrapped store.
type InterceptStore struct {
	persistence.Store

	BeforeApply   func(ctx context.Context, step persistence.Step)
	AfterApply    func(step persistence.Step, res persistence.StepResult, err error)
	BeforeAcquire func(id, owner string)
	AfterInstance func(id string, inst persistence.Instance, err error)
	AfterMailbox  func(id string, msgs []persistence.Message, err error)
	// AfterClaimQueue sees each ClaimQueue (a node's fetcher claiming
	// queued messages for its waiting consumers).
	AfterClaimQueue func(channel string, consumers []string, qc persistence.QueueClaim, err error)
	// AfterHistoryRange sees each HistoryRange read (an activation reads
	// its history from 0 as it loads).
	AfterHistoryRange func(id string, from int64, evs []persistence.Event, err error)
	BeforePrune       func(before time.Time)
	// BeforePruneQueue sees the cut-off of each PruneQueue call.
	BeforePruneQueue func(before time.Time)
	// BeforePurge sees the filter of each PurgeInstances call.
	BeforePurge func(f persistence.PurgeFilter)
}

// Apply implements persistence.Store.
func (s *InterceptStore) Apply(ctx context.Context, step persistence.Step) (persistence.StepResult, error) {
	if s.BeforeApply != nil {
		s.BeforeApply(ctx, step)
	}
	res, err := s.Store.Apply(ctx, step)
	if s.AfterApply != nil {
		s.AfterApply(step, res, err)
	}
	return res, err
}

// AcquireLease implements persistence.Store.
func (s *InterceptStore) AcquireLease(ctx context.Context, id, owner string, ttl time.Duration) (persistence.Instance, error) {
	if s.BeforeAcquire != nil {
		s.BeforeAcquire(id, owner)
	}
	return s.Store.AcquireLease(ctx, id, owner, ttl)
}

// Instance implements persistence.Store.
func (s *InterceptStore) Instance(ctx context.Context, id string) (persistence.Instance, error) {
	inst, err := s.Store.Instance(ctx, id)
	if s.AfterInstance != nil {
		s.AfterInstance(id, inst, err)
	}
	return inst, err
}

// Mailbox implements persistence.Store.
func (s *InterceptStore) Mailbox(ctx context.Context, id string, limit int) ([]persistence.Message, error) {
	msgs, err := s.Store.Mailbox(ctx, id, limit)
	if s.AfterMailbox != nil {
		s.AfterMailbox(id, msgs, err)
	}
	return msgs, err
}

// ClaimQueue implements persistence.Store.
func (s *InterceptStore) ClaimQueue(ctx context.Context, owner, channel string, types, consumers []string) (persistence.QueueClaim, error) {
	qc, err := s.Store.ClaimQueue(ctx, owner, channel, types, consumers)
	if s.AfterClaimQueue != nil {
		s.AfterClaimQueue(channel, consumers, qc, err)
	}
	return qc, err
}

// HistoryRange implements persistence.Store.
func (s *InterceptStore) HistoryRange(ctx context.Context, id string, from int64, limit int) ([]persistence.Event, error) {
	evs, err := s.Store.HistoryRange(ctx, id, from, limit)
	if s.AfterHistoryRange != nil {
		s.AfterHistoryRange(id, from, evs, err)
	}
	return evs, err
}

// PruneMessageIDs implements persistence.Store.
func (s *InterceptStore) PruneMessageIDs(ctx context.Context, before time.Time) (int, error) {
	if s.BeforePrune != nil {
		s.BeforePrune(before)
	}
	return s.Store.PruneMessageIDs(ctx, before)
}

// PruneQueue implements persistence.Store.
func (s *InterceptStore) PruneQueue(ctx context.Context, before time.Time) (int, error) {
	if s.BeforePruneQueue != nil {
		s.BeforePruneQueue(before)
	}
	return s.Store.PruneQueue(ctx, before)
}

// PurgeInstances implements persistence.Store.
func (s *InterceptStore) PurgeInstances(ctx context.Context, f persistence.PurgeFilter) (int, error) {
	if s.BeforePurge != nil {
		s.BeforePurge(f)
	}
	return s.Store.PurgeInstances(ctx, f)
}

// Listen hides the wrapped store's notifications: it returns
// persistence.ErrUnsupported, so that a System on an InterceptStore finds
// its work only through its own commits and its scans (wrap the store in a
// NotifyStore for notifications the test controls).
func (s *InterceptStore) Listen(context.Context, func(ids []string)) error {
	return persistence.ErrUnsupported
}

// NotifyStore makes a Store a persistence.Notifier whose notifications the
// test controls: it forwards the wrapped store's own notifications (if it
// has any) unless dropped, and lets the test inject notifications and
// gaps, as another process or a lost connection would cause.
type NotifyStore struct {
	persistence.Store
	inner persistence.Store // the store whose notifications are forwarded
	drop  atomic.Bool

	mu  sync.Mutex
	fns map[int]func([]string)
	n   int
}

// Notify wraps st; notifications come from inner when it supports
// persistence.Notifier (pass the unwrapped store when st is an
// InterceptStore), else only from the test.
func Notify(st, inner persistence.Store) *NotifyStore {
	return &NotifyStore{Store: st, inner: inner, fns: map[int]func([]string){}}
}

// Listen implements persistence.Notifier.
func (n *NotifyStore) Listen(ctx context.Context, fn func(ids []string)) error {
	n.mu.Lock()
	key := n.n
	n.n++
	n.fns[key] = fn
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.fns, key)
		n.mu.Unlock()
	}()
	err := n.inner.Listen(ctx, func(ids []string) {
		if ids != nil && n.drop.Load() {
			return
		}
		fn(ids)
	})
	if !errors.Is(err, persistence.ErrUnsupported) {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

// Listening reports how many listeners are registered.
func (n *NotifyStore) Listening() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.fns)
}

// Drop makes the wrapped store's notifications (not gaps) vanish while on,
// as if the connection that carried them had been lost.
func (n *NotifyStore) Drop(on bool) { n.drop.Store(on) }

// Notify hands ids to every listener, as a notification from another
// process would.
func (n *NotifyStore) Notify(ids ...string) { n.each(ids) }

// Gap tells every listener that notifications may have been lost (fn(nil)),
// as a driver does after a reconnect.
func (n *NotifyStore) Gap() { n.each(nil) }

func (n *NotifyStore) each(ids []string) {
	n.mu.Lock()
	fns := make([]func([]string), 0, len(n.fns))
	for _, fn := range n.fns {
		fns = append(fns, fn)
	}
	n.mu.Unlock()
	for _, fn := range fns {
		fn(ids)
	}
}
