package persistence

import (
	"context"
	"fmt"
	"time"
)

// Limits of PurgeInstances batches.
const (
	// DefaultPurgeLimit is the batch PurgeInstances deletes when given no
	// Limit: small enough that one transaction holds the store's writer
	// (SQLite) or its row locks (PostgreSQL) for a few milliseconds only.
	DefaultPurgeLimit = 100
	// MaxPurgeLimit bounds one batch; a larger Limit is read as it.
	MaxPurgeLimit = 1000
)

// PurgeFilter selects ended instances for Purger's methods. Only ended
// instances (completed, failed, cancelled) are ever selected, whatever the
// filter says: a live one is never purged.
type PurgeFilter struct {
	// Before is required: instances whose UpdatedAt, which for an ended
	// instance is when it ended, is before it.
	Before time.Time
	// Workflow, if set, selects that workflow's instances only.
	Workflow string
	// Statuses, if set, selects instances in any of these; each must be a
	// terminal status (an *InvalidError otherwise). Empty means all three.
	Statuses []Status
	// Buckets selects instances by BucketOf(ID), as Runnable's buckets
	// do: nil means every bucket, an empty non-nil slice none.
	Buckets []int
	// Limit bounds the instances one PurgeInstances call deletes; <= 0
	// means DefaultPurgeLimit, more than MaxPurgeLimit is read as
	// MaxPurgeLimit. CountPurgeable ignores it.
	Limit int
}

// Purger is the part of Store that deletes ended instances for good, so
// that a store's size follows the work in flight and what is kept for
// inspection rather than everything ever run. Both drivers implement it.
type Purger interface {
	// PurgeInstances deletes up to f's Limit of the ended instances f
	// selects, in one transaction, and returns how many went; while that
	// equals the limit, more may be left. Which of the selected instances
	// a batch takes is up to the driver (both read an index by status and
	// creation time: no index holds the time of each instance's last
	// step, which every step would rewrite). With each
	// instance go its history, the messages still addressed to it, its
	// timers and subscriptions (an ended instance normally has none left),
	// and its outgoing events whose delivery ended (sent, invalid or
	// expired). Its pending outgoing events are kept: they are still owed
	// to the world, and the relayers deliver them as if the instance were
	// there (PruneOutbox deletes them once delivered). Dedupe message IDs
	// are not tied to an instance: PruneMessageIDs forgets them.
	//
	// A purged instance reads as ErrNotFound. Its children are not
	// purged with it and keep working: the Down message a child sends its
	// parent when it ends is dropped, as mail to any missing instance is,
	// and a send by PID to the purged parent fails with ErrNotFound
	// rather than ErrInstanceDone. A child that ended is purged on its own
	// account, when it is old enough.
	PurgeInstances(ctx context.Context, f PurgeFilter) (int, error)
	// CountPurgeable counts the ended instances f selects (ignoring its
	// Limit): what purging with f until nothing is left would delete, as
	// things stand.
	CountPurgeable(ctx context.Context, f PurgeFilter) (int, error)
}

// EndedStatuses are the statuses f selects: its Statuses, or every
// terminal status if it names none. Call it after Validate.
func (f *PurgeFilter) EndedStatuses() []Status {
	if len(f.Statuses) > 0 {
		return f.Statuses
	}
	return []Status{StatusCompleted, StatusFailed, StatusCancelled}
}

// BatchLimit is the batch PurgeInstances deletes for f's Limit.
func (f *PurgeFilter) BatchLimit() int {
	switch {
	case f.Limit <= 0:
		return DefaultPurgeLimit
	case f.Limit > MaxPurgeLimit:
		return MaxPurgeLimit
	}
	return f.Limit
}

// Validate checks f as the drivers require it: a cut-off, terminal
// statuses only, a valid workflow name and valid buckets.
func (f *PurgeFilter) Validate() error {
	if f.Before.IsZero() {
		return &InvalidError{Field: "Before", Reason: "a cut-off time is required"}
	}
	for i, st := range f.Statuses {
		if !st.Terminal() {
			return &InvalidError{Field: fieldName("Statuses", i, ""),
				Reason: fmt.Sprintf("%s is not a terminal status (completed, failed, cancelled); only ended instances are purged", excerpt(string(st)))}
		}
	}
	var v validator
	v.id("Workflow", -1, "", f.Workflow)
	if v.err != nil {
		return v.err
	}
	for i, b := range f.Buckets {
		if b < 0 || b >= NumBuckets {
			return &InvalidError{Field: fieldName("Buckets", i, ""), Reason: fmt.Sprintf("%d is not in [0, %d)", b, NumBuckets)}
		}
	}
	return nil
}
