package persistence

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nornlabs/norn/norntype"
)

// CommitInfo describes one transaction a driver committed (or failed to)
// on behalf of Apply: with group commit, one transaction carries the steps
// of many concurrent Apply calls.
type CommitInfo struct {
	// Driver names the store: "sqlite" or "postgres".
	Driver string
	// Steps is how many writes the transaction carried: Apply's steps (the
	// SQLite driver's other writes, such as lease renewals, share its
	// group commits and are counted too).
	Steps int
	// Duration is how long the transaction took, from its start until its
	// commit came back: the share of Apply's latency spent in the store.
	Duration time.Duration
	// Err is set when the transaction itself failed (no connection, a
	// failed begin or commit, a timeout), so that none of its steps
	// committed. A step that the store rejected on its own (a lost lease,
	// a message already consumed) is not a failed transaction.
	Err error
}

// CommitObserver learns of every transaction a driver commits for Apply,
// for metrics. The drivers take one in their options. ObserveCommit is
// called on the driver's writer goroutine, after the steps' callers were
// answered: it must be quick and must not call the store.
type CommitObserver interface {
	ObserveCommit(CommitInfo)
}

// Stats is a summary of what a store holds, for metrics.
type Stats struct {
	// Instances counts the instances that have not ended, by workflow and
	// status (running, waiting, compensating).
	Instances []InstanceCount
	// Timers is the number of pending timers.
	Timers int
	// Mailbox is the number of messages waiting in instances' mailboxes
	// (addressed to an instance); Queued the number waiting in channels'
	// queues for a competing consumer.
	Mailbox, Queued int
	// MaxMailbox is the most messages addressed to any one instance.
	MaxMailbox int
}

// InstanceCount is the number of instances of one workflow in one status
// (norntype.InstanceCount).
type InstanceCount = norntype.InstanceCount

// StatsReader is the part of Store that summarises its contents (both
// drivers do; a store that cannot returns ErrUnsupported). Each call counts rows, so its cost grows with the
// number of live instances, timers and waiting messages: callers cache it
// rather than call it for every request.
type StatsReader interface {
	Stats(ctx context.Context) (Stats, error)
}

// CommitWatcher is the part of Store through which metrics learn of the
// transactions a store commits, however the store was opened (storeurl,
// a wrapper): the drivers' Options.Commits is set only by whoever calls
// Open. Both drivers implement it.
type CommitWatcher interface {
	// ObserveCommits adds o to the store's commit observers, beside
	// Options.Commits: from then on o learns of every transaction (see
	// CommitObserver). The returned function removes o; calling it again
	// does nothing.
	ObserveCommits(o CommitObserver) (remove func())
}

// CommitObservers is the set of observers a driver notifies of its
// commits, for its ObserveCommits. The zero value is empty and ready. It is
// safe for concurrent use; Notify takes no lock, since it runs on every
// commit.
type CommitObservers struct {
	mu   sync.Mutex // serialises Add and removals
	list atomic.Pointer[[]*observerEntry]
}

// observerEntry gives each Add its own identity, so that adding one
// observer twice and removing one leaves the other.
type observerEntry struct{ o CommitObserver }

// Add adds o; the returned function removes it.
func (c *CommitObservers) Add(o CommitObserver) (remove func()) {
	e := &observerEntry{o}
	c.mu.Lock()
	defer c.mu.Unlock()
	var next []*observerEntry
	if cur := c.list.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, e)
	c.list.Store(&next)
	var once sync.Once
	return func() { once.Do(func() { c.remove(e) }) }
}

func (c *CommitObservers) remove(e *observerEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.list.Load()
	if cur == nil {
		return
	}
	next := make([]*observerEntry, 0, len(*cur))
	for _, x := range *cur {
		if x != e {
			next = append(next, x)
		}
	}
	c.list.Store(&next)
}

// Notify reports ci to every observer added.
func (c *CommitObservers) Notify(ci CommitInfo) {
	if cur := c.list.Load(); cur != nil {
		for _, e := range *cur {
			e.o.ObserveCommit(ci)
		}
	}
}
