package persistence

import (
	"context"
	"time"
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

// InstanceCount is the number of instances of one workflow in one status.
type InstanceCount struct {
	Workflow string
	Status   Status
	Count    int
}

// StatsReader is the part of Store that summarises its contents (both
// drivers do; a store that cannot returns ErrUnsupported). Each call counts rows, so its cost grows with the
// number of live instances, timers and waiting messages: callers cache it
// rather than call it for every request.
type StatsReader interface {
	Stats(ctx context.Context) (Stats, error)
}
