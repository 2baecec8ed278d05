package persistence

import (
	"context"
	"fmt"
)

// MaxQueueClaim is the most consumers one ClaimQueue call serves.
const MaxQueueClaim = 1000

// QueueClaimer is the part of Store through which a node's fetcher hands
// the messages waiting in a competing channel's queue to the consumers it
// hosts that are waiting for one: one statement serves them all, instead
// of a mailbox read and a claim per consumer. Both drivers implement it.
type QueueClaimer interface {
	// ClaimQueue moves the oldest messages waiting in channel's queue into
	// the mailboxes of consumers, at most one each, in one transaction:
	// the oldest to the first consumer (in the order given) that may take
	// one, the next to the next, until the consumers or the queue run
	// out. A consumer may take one only if it is subscribed to channel in
	// the competing mode, has not ended, and owner holds its lease, live
	// by the store's clock (see AcquireLease); the others are skipped.
	// With types, only messages stored under one of those type names are
	// claimed: a message stored without a type is left, since only its
	// payload tells whether a typed receive takes it.
	//
	// A claimed message is then in its consumer's own mailbox, as one
	// moved by Step.Claim is: the consumer takes it with a later step
	// (Consume), and it goes back to the queue if the consumer
	// unsubscribes from channel or ends first. Concurrent claims, by any
	// process and by Step.Claim or Step.Consume, never move or take the
	// same message. consumers must be distinct instance IDs, at most
	// MaxQueueClaim of them (an *InvalidError otherwise).
	ClaimQueue(ctx context.Context, owner, channel string, types, consumers []string) (QueueClaim, error)

	// SingleWriter reports whether the store commits every write on one
	// writer, in turns, while reads run beside it (SQLite): there a
	// ClaimQueue that moves a message is a turn of the writer on its own,
	// while a mailbox read costs next to none and its consume claims the
	// message in the same write. A node's fetcher then claims ahead only
	// for consumers meeting on a backlog (see the actor package).
	SingleWriter() bool
}

// QueueClaim is what one ClaimQueue moved.
type QueueClaim struct {
	// Messages are the moved messages in arrival order, each with Target
	// set to its consumer.
	Messages []Message
	// More reports that the queue held messages this claim did not move,
	// as its transaction saw it: of other types, stored without a type,
	// held by a concurrent claim or consume, or more than there were
	// consumers. A consumer that got nothing need not read the queue
	// itself when More is false.
	More bool
}

// ValidateQueueClaim checks the arguments of ClaimQueue, as every driver
// does first.
func ValidateQueueClaim(owner, channel string, types, consumers []string) error {
	for _, f := range [][2]string{{"owner", owner}, {"channel", channel}} {
		if f[1] == "" {
			return &InvalidError{Field: f[0], Reason: "empty"}
		}
		if err := ValidateID(f[0], f[1]); err != nil {
			return err
		}
	}
	if len(consumers) > MaxQueueClaim {
		return &InvalidError{Field: "consumers", Reason: fmt.Sprintf("%d consumers, at most %d", len(consumers), MaxQueueClaim)}
	}
	seen := make(map[string]bool, len(consumers))
	for _, id := range consumers {
		if id == "" {
			return &InvalidError{Field: "consumers", Reason: "empty consumer ID"}
		}
		if err := ValidateID("consumer", id); err != nil {
			return err
		}
		if seen[id] {
			return &InvalidError{Field: "consumers", Reason: "consumer named twice: " + excerpt(id)}
		}
		seen[id] = true
	}
	for _, t := range types {
		if t == "" {
			return &InvalidError{Field: "types", Reason: "empty type name"}
		}
	}
	return nil
}
