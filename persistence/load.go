package persistence

import "context"

// Loader is the part of a Store that reads what an activation starts from
// (the instance, the first events of its run, its mailbox) in one round
// trip. The actor package uses it, where a store has it, to wake a
// passivated instance; otherwise it makes the three reads one by one. The
// PostgreSQL driver implements it: each read is a round trip to the
// server, and waking many instances at once spent most of its time in
// them.
type Loader interface {
	// Load reads instance id, the first historyLimit events of its current
	// run (all of them if it has fewer) and the first mailboxLimit
	// messages of its mailbox (as Mailbox reads them), all as of one
	// moment. An unknown ID fails with ErrNotFound.
	Load(ctx context.Context, id string, historyLimit, mailboxLimit int) (Loaded, error)
}

// Loaded is what Loader.Load read.
type Loaded struct {
	Instance Instance
	History  []Event
	Mailbox  []Message
}

// Snapshot is what Store.Snapshot reads: an instance whole, as of one
// moment.
type Snapshot struct {
	Instance Instance
	// History is the current run's, in order.
	History []Event
	// Subscriptions are ordered by channel.
	Subscriptions []Subscription
	// MailboxDepth counts the messages Mailbox would return, up to
	// MaxMailboxDepth: a competing consumer's mailbox includes its
	// channels' queues, which may be long.
	MailboxDepth int
}

// MaxMailboxDepth is the most Snapshot counts of a mailbox.
const MaxMailboxDepth = 1000
