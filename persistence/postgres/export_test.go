package postgres

import (
	"time"

	"github.com/nornlabs/norn/persistence"
)

// SetClockOffset makes st read the local clock d off, as a host whose clock
// is skewed would.
func SetClockOffset(st *Store, d time.Duration) { st.clockOffset.Store(int64(d)) }

// Dialect is the SQL dialect of ListInstances, for the plan tests.
var Dialect = dialect

// ModeCheckSQL are the statements that check a channel's mode before a
// subscribe and before a direct send.
var ModeCheckSQL = struct{ Subscribe, Direct string }{statements[sqlSubscribeCheck], statements[sqlDirectCheck]}

// QueuedTx is how many transactional steps wait for a writer.
func QueuedTx(st *Store) int { return len(st.txReqs) }

// RunnableSQL is Runnable's query for every bucket ($1 the limit).
var RunnableSQL = statements[sqlRunnable]

// QueueSQL are the statements that read a competing channel's queue: the
// node's claim and an instance's mailbox read.
var QueueSQL = struct{ Claim, Mailbox string }{claimQueueSQL, statements[sqlMailbox]}

// PublishSQL are the statements that publish on a channel: one message,
// and the subscribers of a run of messages.
var PublishSQL = struct{ One, RunSubs string }{statements[sqlPublish], statements[sqlPublishSubs]}

// LeaseSQL are the statements that renew and release all of an owner's
// leases.
var LeaseSQL = struct{ Renew, Release string }{statements[sqlRenewLeases], statements[sqlReleaseLeases]}

// PurgeSQL is a purge's statement for f, with its arguments.
func PurgeSQL(f persistence.PurgeFilter) (string, []any) {
	return purgeSQL(&f), append(purgeArgs(&f), int64(f.BatchLimit()))
}

// StatsInstancesSQL is the query of Stats' live instance counts.
const StatsInstancesSQL = sqlStatsInstances
