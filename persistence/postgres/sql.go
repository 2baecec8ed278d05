package postgres

// The driver's fixed statements. Each is prepared under its key on every
// connection of the pool (see Store.prepare) and executed by that name, so
// that a step costs no parse or plan on the server and a failed statement in
// a pipelined batch does not evict anything from pgx's statement cache.
//
// Statements whose name starts with "chk_" are checks: they raise SQLSTATE
// NR001 (through norn_check, see the migrations) when their condition fails,
// which aborts the rest of a pipelined batch at that step.

import (
	"strconv"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/querysql"
	"github.com/nornlabs/norn/persistence/internal/rowcodec"
)

const terminalSQL = `('completed', 'failed', 'cancelled')`

const instanceCols = rowcodec.InstanceColumns

// serverNowNS is the database server's clock in Unix nanoseconds when the
// expression is evaluated: clock_timestamp(), not the transaction's start.
// Lease times come from it, so that nodes agree on them whatever their own
// clocks say, and a lease runs from when its row is written, after any wait
// for a connection or a lock.
const serverNowNS = `(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint`

// checkCode is the SQLSTATE norn_check raises.
const checkCode = "NR001"

// Messages of norn_check, saying which condition failed.
const (
	checkExists   = "exists"   // Create found the ID taken
	checkUpdate   = "update"   // conditional instance update matched nothing
	checkGone     = "gone"     // consumed message is gone
	checkMode     = "mode"     // channel mode conflict; detail is the existing mode
	checkNotFound = "notfound" // MustDeliver target missing
	checkDone     = "done"     // MustDeliver target ended; detail is its status
	checkTimer    = "timer"    // fired timer is gone
	checkUsed     = "used"     // Dedupe message ID used before; detail is the ID
	checkConflict = "conflict" // CreateMany ID of another workflow; detail is ID, unit separator, workflow
)

const (
	sqlBegin      = "norn_begin"
	sqlCommit     = "norn_commit"
	sqlRollback   = "norn_rollback"
	sqlSavepoint  = "norn_savepoint"
	sqlRelease    = "norn_release"
	sqlRollbackTo = "norn_rollback_to"
	// The savepoint of a transactional step's function (see txRun).
	sqlFnSavepoint  = "norn_fn_savepoint"
	sqlFnRelease    = "norn_fn_release"
	sqlFnRollbackTo = "norn_fn_rollback_to"
	sqlFnLockWait   = "norn_fn_lock_wait"
	sqlStepLockWait = "norn_step_lock_wait"
	sqlGenericPlans = "norn_generic_plans"
	sqlWritePlans   = "norn_write_plans"

	sqlInsertInstance = "norn_insert_instance"
	sqlUpdateInstance = "norn_update_instance"
	sqlInstance       = "norn_instance"
	sqlInstanceState  = "norn_instance_state"
	sqlInsertEvent    = "norn_insert_event"
	sqlUpdateMany     = "norn_update_many"
	sqlCreateMerged   = "norn_create_merged"
	sqlDropMailboxes  = "norn_drop_mailboxes"
	sqlEndInstances   = "norn_end_instances"
	sqlInsertEvents   = "norn_insert_events"
	sqlCreateMany     = "norn_create_many"
	sqlCreateConflict = "norn_create_conflict"
	sqlResetHistory   = "norn_reset_history"
	sqlConsume        = "norn_consume"
	sqlConsumeNowait  = "norn_consume_nowait"
	sqlLocks          = "norn_locks"
	sqlSubscribeCheck = "norn_subscribe_check"
	sqlSubscribe      = "norn_subscribe"
	sqlUnsubscribe    = "norn_unsubscribe"
	sqlDirectCheck    = "norn_direct_check"
	sqlTargetCheck    = "norn_target_check"
	sqlUseMessageID   = "norn_use_message_id"
	sqlSendDirect     = "norn_send_direct"
	sqlPublishSubs    = "norn_publish_subs"
	sqlPublish        = "norn_publish"
	sqlPublishMany    = "norn_publish_many"
	sqlPublishHand    = "norn_publish_hand"
	sqlPublishSystem  = "norn_publish_system"
	sqlQueue          = "norn_queue"
	sqlCancelTimer    = "norn_cancel_timer"
	sqlFireTimer      = "norn_fire_timer"
	sqlAddTimer       = "norn_add_timer"
	sqlEndInstance    = "norn_end_instance"
	sqlDropMailbox    = "norn_drop_mailbox"
	sqlClaim          = "norn_claim"
	sqlUnclaim        = "norn_unclaim"
	sqlNotify         = "norn_notify"
	sqlListening      = "norn_listening"
	sqlAsyncCommit    = "norn_async_commit"
	sqlEmit           = "norn_emit"

	sqlAcquireLease  = "norn_acquire_lease"
	sqlRenewLeases   = "norn_renew_leases"
	sqlReleaseLeases = "norn_release_leases"
	sqlReleaseTurn   = "norn_release_turn"
	sqlCancel        = "norn_cancel"
	sqlStatus        = "norn_status"
	sqlPruneIDs      = "norn_prune_message_ids"
	sqlPruneQueue    = "norn_prune_queue"
	sqlClaimOutbox   = "norn_claim_outbox"
	sqlFinishOutbox  = "norn_finish_outbox"
	sqlOutboxClaimer = "norn_outbox_claimer"
	sqlReleaseOutbox = "norn_release_outbox"
	sqlPruneOutbox   = "norn_prune_outbox"
	sqlClaimQueue    = "norn_claim_queue"

	sqlHistory       = "norn_history"
	sqlHistoryFirst  = "norn_history_first"
	sqlBeginSnapshot = "norn_begin_snapshot"
	sqlRunnable      = "norn_runnable"
	sqlRunnableIn    = "norn_runnable_in"
	sqlMailbox       = "norn_mailbox"
	sqlMailboxDepth  = "norn_mailbox_depth"
	sqlSubscriptions = "norn_subscriptions"
	sqlChannelStats  = "norn_channel_stats"
	sqlDueTimers     = "norn_due_timers"
	sqlDueTimersIn   = "norn_due_timers_in"
)

// runnableSQL is Runnable's query; $1 is the limit, and bucket the
// condition on instance i's bucket ("" for every bucket). It reads three
// sources, none of which grows with the instances parked in the store:
//   - instances_unsettled: running, compensating, or waiting under a
//     lease or with a cancel request (its predicate is repeated here),
//     read whole and kept to the buckets asked for: it holds what is
//     active in the cluster, not the parked or ended instances;
//   - the distinct targets of waiting messages, one index probe each (a
//     loose scan of messages_target: a backlog of many messages to one
//     instance costs one probe);
//   - the subscribers, in competing mode, of channels with queued messages
//     (a loose scan of messages_queue).
//
// The last two take at most $1 instances each, so a broadcast that left
// mail for a million parked instances costs a pass $1 of them.
func runnableSQL(bucket string) string {
	free := `(i.lease_owner IS NULL OR i.lease_expires < (SELECT ns FROM now))` + bucket
	return `WITH RECURSIVE now(ns) AS (SELECT ` + serverNowNS + `),
	mail(id) AS (
		SELECT min(target) FROM messages WHERE target IS NOT NULL
		UNION ALL
		SELECT (SELECT min(target) FROM messages WHERE target > mail.id) FROM mail WHERE mail.id IS NOT NULL
	),
	queued(channel) AS (
		SELECT min(channel) FROM messages WHERE target IS NULL
		UNION ALL
		SELECT (SELECT min(channel) FROM messages WHERE target IS NULL AND channel > queued.channel)
		FROM queued WHERE queued.channel IS NOT NULL
	)
	SELECT id FROM (
		SELECT i.id, i.updated_at FROM instances i
		WHERE ` + unsettled + ` AND ` + free + `
		UNION
		(SELECT i.id, i.updated_at FROM mail JOIN instances i ON i.id = mail.id
		WHERE i.status = 'waiting' AND ` + free + ` LIMIT $1::bigint)
		UNION
		(SELECT i.id, i.updated_at FROM queued
			JOIN subscriptions s ON s.channel = queued.channel AND s.mode = 'competing'
			JOIN instances i ON i.id = s.instance_id
		WHERE i.status = 'waiting' AND ` + free + ` LIMIT $1::bigint)
	) r ORDER BY updated_at LIMIT $1::bigint`
}

// publishCTEs are the common part of sqlPublish and sqlPublishHand, whose
// parameter key is where the competing subscribers named start (see
// competingWindow): the channel's mode, the subscribers to wake, the
// broadcast ones locked, the mode check, and a copy for each broadcast
// subscriber.
//
// Every subscriber of a channel has its mode (subscribing checks it), so
// one subscriber tells it (m): the check and the choice between copies and
// the queue read one index entry, however many subscribers there are.
// (ORDER BY mode keeps m on subscriptions_channel: with LIMIT 1 alone, a
// channel that statistics show as common makes a scan of the table look
// as cheap.)
// Only a broadcast reads them all (bc, which runs only for a broadcast
// channel). A queued message needs one consumer to take it, so comp names
// at most persistence.MaxQueuedSubscribers competing subscribers: a
// publish to a channel with hundreds of consumers reads and returns as
// few rows as one with eight.
func publishCTEs(key string) string {
	return `WITH m AS (SELECT mode FROM subscriptions WHERE channel = $2::text ORDER BY mode LIMIT 1),
		bc AS (SELECT instance_id FROM subscriptions WHERE channel = $2::text AND mode = 'broadcast'
			AND EXISTS (SELECT 1 FROM m WHERE mode = 'broadcast') ORDER BY instance_id FOR KEY SHARE),
		comp AS (` + competingWindow("$2::text", key, "<=") + `),
		subs AS (SELECT instance_id, 'broadcast' AS mode FROM bc UNION ALL SELECT instance_id, 'competing' FROM comp),
		chk AS (SELECT norn_check(NOT EXISTS (SELECT 1 FROM m WHERE mode = 'direct'), '` + checkMode + `', 'direct') AS ok),
		copies AS (
			INSERT INTO messages (msg_id, channel, target, sender, payload, metadata, published_at, type)
			SELECT $1::text, $2::text, instance_id, $3::text, $4::bytea, $5::jsonb, $6::bigint, $7::text
			FROM bc ORDER BY instance_id)`
}

// competingWindow selects the competing subscribers of channel that a
// message queued there names: all of them up to MaxQueuedSubscribers, else
// that many, the first after key in ID order and then, wrapping, from the
// start (a range read of subscriptions_competing either way). The drivers
// move key on with each message (package rotate), so that the messages
// name every subscriber in turn. upTo is the comparison of the wrapped
// part: "<=" names key itself, "<" leaves it out.
func competingWindow(channel, key, upTo string) string {
	sel := `SELECT instance_id FROM subscriptions WHERE channel = ` + channel + ` AND mode = 'competing' AND instance_id `
	return `(` + sel + `> ` + key + ` ORDER BY instance_id LIMIT ` + maxQueuedSubs + `)
			UNION ALL (` + sel + upTo + ` ` + key + ` ORDER BY instance_id LIMIT ` + maxQueuedSubs + `)
			LIMIT ` + maxQueuedSubs
}

// requeuedSubs is competingWindow for a message given back to the queue of
// channel r.channel by instance $1, as an array: the subscribers after $1,
// so that what each instance gives back names others. except leaves $1
// out.
func requeuedSubs(except bool) string { return requeuedSubsOf("$1::text", except) }

// requeuedSubsOf is requeuedSubs for the instance key.
func requeuedSubsOf(key string, except bool) string {
	upTo := "<="
	if except {
		upTo = "<"
	}
	return `COALESCE((SELECT array_agg(x.instance_id) FROM (` + competingWindow("r.channel", key, upTo) + `) x), '{}')`
}

var maxQueuedSubs = strconv.Itoa(persistence.MaxQueuedSubscribers)

// publishQueues is the condition on which a publish queues its message:
// no broadcast subscriber, and not a system channel nobody subscribes to.
// It reads chk, so that publishing on a direct channel, which passes the
// rest, fails.
const publishQueues = `WHERE NOT EXISTS (SELECT 1 FROM m WHERE mode = 'broadcast')
				AND NOT (NOT EXISTS (SELECT 1 FROM m) AND starts_with($2::text, '` + persistence.SystemChannelPrefix + `'))
				AND (SELECT ok FROM chk)`

// unsettled is the condition of the index instances_unsettled.
const unsettled = querysql.Unsettled

// ownerLeases locks the instances whose lease $1 holds, in ID order, and
// returns their IDs as one array, read once (an InitPlan); the update then
// finds each by its primary key. Joining the locked rows back to the table
// instead left the plan to the statistics, which a store whose instances
// had all ended estimates at one lease per owner: the plan then re-ran the
// lock for every leased instance, and renewing thousands of leases took
// seconds while the steps of those instances waited. A row whose lease
// moved to another owner while the lock waited is rechecked and left out.
// The leases are read from instances_unsettled (no index holds the lease
// owner: see migration 0018), so a renewal reads the instances that are
// active in the cluster, never the parked or ended ones.
const ownerLeases = `(SELECT COALESCE(array_agg(id), '{}') FROM (
			SELECT id FROM instances WHERE lease_owner = $1::text AND ` + unsettled + ` ORDER BY id FOR UPDATE) l)::text[]`

// mailboxSQL reads an instance's mailbox: $1 instance, $2 limit. Each
// queue the instance consumes is read by its own index range (LATERAL): a
// join ordered across them would sort the whole queue. The range reads the
// queue's index, as in claimQueueSQL.
const mailboxSQL = `SELECT seq, msg_id, channel, COALESCE(target, ''), sender, type, payload, metadata, published_at FROM (
			(SELECT seq, msg_id, channel, target, sender, type, payload, metadata, published_at FROM messages WHERE target = $1::text
				ORDER BY seq LIMIT $2::bigint)
			UNION ALL
			(SELECT m.seq, m.msg_id, m.channel, m.target, m.sender, m.type, m.payload, m.metadata, m.published_at
				FROM subscriptions s CROSS JOIN LATERAL (
					SELECT * FROM messages q WHERE q.channel >= s.channel AND q.channel <= s.channel AND q.target IS NULL
						ORDER BY q.channel, q.seq LIMIT $2::bigint) m
				WHERE s.instance_id = $1::text AND s.mode = 'competing' ORDER BY m.seq LIMIT $2::bigint)
		) x ORDER BY seq LIMIT $2::bigint`

var statements = map[string]string{
	sqlClaimQueue: claimQueueSQL,
	sqlBegin:      `BEGIN`,
	sqlCommit:     `COMMIT`,
	sqlRollback:   `ROLLBACK`,
	sqlSavepoint:  `SAVEPOINT step`,
	sqlRelease:    `RELEASE SAVEPOINT step`,
	sqlRollbackTo: `ROLLBACK TO SAVEPOINT step`,

	sqlFnSavepoint:  `SAVEPOINT fn`,
	sqlFnRelease:    `RELEASE SAVEPOINT fn`,
	sqlFnRollbackTo: `ROLLBACK TO SAVEPOINT fn`,
	// A function sharing its transaction gives up a lock wait early (see
	// txRun); steps wait as long as they must.
	sqlFnLockWait:   `SET LOCAL lock_timeout = '100ms'`,
	sqlStepLockWait: `SET LOCAL lock_timeout = 0`,
	// A write transaction plans its statements once per connection. Left to
	// choose, the server re-plans a statement at every call when its
	// generic plan looks costlier than a plan for the values at hand, as a
	// publish does once a channel holds most subscriptions (the generic
	// estimate assumes it may copy the message to all of them): planning
	// the publish then cost 330 µs at each call, more than running it, and
	// every end publishes its Down. The write statements key on one
	// instance, message or channel and are checked to stay bounded under
	// generic plans (see publishplan_test.go and queueplan_test.go).
	sqlGenericPlans: `SET LOCAL plan_cache_mode = force_generic_plan`,
	// A write transaction's settings: generic plans (see sqlGenericPlans),
	// and no hash or merge joins. Its statements look rows up by key, from
	// arrays sorted by instance ID, and a nested loop over the array takes
	// their row locks in that order, the order in which lease renewals and
	// other batches take them. A plan made from the statistics of a new
	// store (a table of ten pages) hashed the array and read the whole
	// instances table instead, at every batch, and locked rows in the
	// table's order: batches deadlocked with lease renewals until the
	// server broke the cycle after deadlock_timeout.
	sqlWritePlans: `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
		set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`,

	// $1 id, $2 workflow, $3 status, $4 input, $5 parent, $6 lease owner,
	// $7 lease epoch, $8 lease expires, $9 now, $10 restart log, $11 lease
	// TTL in nanoseconds (if positive, the lease expires that long after
	// the server's now instead of at $8), $12 bucket, $13 history length
	// (the events the creating step appends, when it does nothing else).
	sqlInsertInstance: `WITH ins AS (
		INSERT INTO instances (id, workflow, status, input, parent, lease_owner, lease_epoch, lease_expires, restart_log,
			run, history_len, created_at, updated_at, bucket)
		VALUES ($1::text, $2::text, $3::text, $4::bytea, $5::text, NULLIF($6::text, ''), $7::bigint,
			CASE WHEN $11::bigint > 0 THEN ` + serverNowNS + ` + $11::bigint ELSE $8::bigint END, $10::text,
			0, $13::bigint, $9::bigint, $9::bigint, $12::integer)
		ON CONFLICT (id) DO NOTHING RETURNING 1)
		SELECT norn_check(EXISTS (SELECT 1 FROM ins), '` + checkExists + `', '')`,

	// $1 reset history, $2 events appended, $3 new status or '', $4 set
	// output and error, $5 output, $6 error, $7 release the lease, $8 count
	// a restart, $9 now, $10 id, $11 epoch, $12 expected history length or -1,
	// $13 new restart log or NULL to keep it, $14 the owner taking the lease
	// or '' (Step.TakeLease), $15 its TTL in nanoseconds, $16 reopen an
	// ended instance (Step.Reopen) instead of updating a live one, $17 set
	// waits to $18 (Step.SetWaits).
	sqlUpdateInstance: `WITH u AS (
		UPDATE instances SET
			history_len = CASE WHEN $1::boolean THEN $2::bigint ELSE history_len + $2::bigint END,
			run = run + CASE WHEN $1::boolean THEN 1 ELSE 0 END,
			status = COALESCE(NULLIF($3::text, ''), CASE WHEN $14::text <> '' AND status = 'waiting' THEN 'running' ELSE status END),
			output = CASE WHEN $4::boolean THEN $5::bytea ELSE output END,
			error = CASE WHEN $4::boolean THEN $6::text ELSE error END,
			lease_owner = CASE WHEN $7::boolean THEN NULL WHEN $14::text <> '' THEN $14::text ELSE lease_owner END,
			lease_expires = CASE WHEN $7::boolean THEN 0 WHEN $14::text <> '' THEN ` + serverNowNS + ` + $15::bigint ELSE lease_expires END,
			lease_epoch = lease_epoch + CASE WHEN $14::text <> '' THEN 1 ELSE 0 END,
			restarts = restarts + CASE WHEN $8::boolean THEN 1 ELSE 0 END,
			restart_log = COALESCE($13::text, restart_log),
			cancel_reason = CASE WHEN $16::boolean THEN '' ELSE cancel_reason END,
			waits = CASE WHEN $17::boolean THEN $18::bytea WHEN $16::boolean OR $3::text IN ` + terminalSQL + ` THEN NULL ELSE waits END,
			updated_at = $9::bigint
		WHERE id = $10::text AND lease_epoch = $11::bigint AND ($12::bigint < 0 OR history_len = $12::bigint)
			AND (status IN ` + terminalSQL + `) = $16::boolean
			AND ($14::text = '' OR lease_owner IS NULL OR lease_owner = $14::text OR lease_expires < ` + serverNowNS + `)
		RETURNING 1)
		SELECT norn_check(EXISTS (SELECT 1 FROM u), '` + checkUpdate + `', '')`,

	sqlInstance:      `SELECT ` + instanceCols + ` FROM instances WHERE id = $1::text`,
	sqlInstanceState: `SELECT status, lease_epoch, history_len FROM instances WHERE id = $1::text`,

	sqlInsertEvent: `INSERT INTO history (instance_id, seq, kind, name, ref, payload, error, at, digest)
		VALUES ($1::text, $2::bigint, $3::text, $4::text, $5::text, $6::bytea, $7::text, $8::bigint, $9::text)`,
	sqlResetHistory: `DELETE FROM history WHERE instance_id = $1::text`,

	// Merged creations (see mergeWrites), one row per step: $1 ids, $2
	// workflows, $3 statuses, $4 inputs, $5 parents, $6 lease owners, $7
	// epochs, $8 lease expiry, $9 restart logs, $10 lease TTLs (if
	// positive, the lease expires that long after the server's now instead
	// of at $8), $11 buckets, $12 history lengths; $13 now. Each row is what
	// sqlInsertInstance inserts. A plain insert, not ON CONFLICT (whose
	// speculative insertion costs more): an ID taken fails the statement,
	// as it should (see mergeWrites).
	sqlCreateMerged: `INSERT INTO instances (id, workflow, status, input, parent, lease_owner, lease_epoch, lease_expires, restart_log,
			run, history_len, created_at, updated_at, bucket)
		SELECT v.id, v.wf, v.st, v.input, v.parent, NULLIF(v.owner, ''), v.epoch,
			CASE WHEN v.ttl > 0 THEN ` + serverNowNS + ` + v.ttl ELSE v.expires END,
			v.restarts, 0, v.hlen, $13::bigint, $13::bigint, v.bucket
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::text[], $7::bigint[], $8::bigint[],
			$9::text[], $10::bigint[], $11::integer[], $12::bigint[])
			AS v(id, wf, st, input, parent, owner, epoch, expires, restarts, ttl, bucket, hlen)`,
	// Merged updates (see mergeWrites), one row per step: $1 ids, $2
	// events appended, $3 new status or '', $4 set output and error to $5
	// and $6, $7 give up the lease, $8 epochs, $9 expected history lengths
	// (-1: none), $10 set waits to $11; $12 now, $13 how many rows must
	// match. Each row is what sqlUpdateInstance does for a step that takes
	// no lease, reopens nothing, resets no history and counts no restart.
	sqlUpdateMany: `WITH u AS (
		UPDATE instances i SET history_len = i.history_len + v.added,
			status = COALESCE(NULLIF(v.status, ''), i.status),
			output = CASE WHEN v.set_output THEN v.output ELSE i.output END,
			error = CASE WHEN v.set_output THEN v.error ELSE i.error END,
			lease_owner = CASE WHEN v.release THEN NULL ELSE i.lease_owner END,
			lease_expires = CASE WHEN v.release THEN 0 ELSE i.lease_expires END,
			waits = CASE WHEN v.set_waits THEN v.waits WHEN v.status IN ` + terminalSQL + ` THEN NULL ELSE i.waits END,
			updated_at = $12::bigint
		FROM unnest($1::text[], $2::bigint[], $3::text[], $4::boolean[], $5::bytea[], $6::text[], $7::boolean[],
			$8::bigint[], $9::bigint[], $10::boolean[], $11::bytea[])
			AS v(id, added, status, set_output, output, error, release, epoch, expect, set_waits, waits)
		WHERE i.id = v.id AND i.lease_epoch = v.epoch AND (v.expect < 0 OR i.history_len = v.expect)
			AND i.status NOT IN ` + terminalSQL + `
		RETURNING 1)
		SELECT norn_check((SELECT count(*) FROM u) = $13::bigint, '` + checkUpdate + `', '')`,
	sqlInsertEvents: `INSERT INTO history (instance_id, seq, kind, name, ref, payload, error, at, digest)
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[], $8::bigint[], $9::text[])`,

	// Step.CreateMany: every instance with one insert, every first event
	// of those inserted (not of those whose ID was taken) with another,
	// in one statement. It returns the IDs inserted. Instances $1 ID, $2
	// workflow, $3 status, $4 input, $5 parent, $6 lease owner or '', $7
	// lease epoch, $8 lease expires, $9 restart log, $10 history length,
	// $11 bucket; $12 now, $13 lease TTL in nanoseconds (if positive, a
	// leased instance's lease expires that long after the server's now
	// instead of at $8); events $14 instance, $15 seq, $16 kind, $17 name,
	// $18 ref, $19 payload, $20 error, $21 at, $22 digest. The rows go in
	// ID order, the order in which concurrent batches lock them.
	sqlCreateMany: `WITH ins AS (
		INSERT INTO instances (id, workflow, status, input, parent, lease_owner, lease_epoch, lease_expires, restart_log,
			run, history_len, created_at, updated_at, bucket)
		SELECT u.id, u.wf, u.st, u.input, u.parent, NULLIF(u.owner, ''), u.epoch,
			CASE WHEN $13::bigint > 0 AND u.owner <> '' THEN ` + serverNowNS + ` + $13::bigint ELSE u.expires END,
			u.restarts, 0, u.hlen, $12::bigint, $12::bigint, u.bucket
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::text[], $7::bigint[], $8::bigint[],
			$9::text[], $10::bigint[], $11::integer[]) AS u(id, wf, st, input, parent, owner, epoch, expires, restarts, hlen, bucket)
		ORDER BY u.id COLLATE "C"
		ON CONFLICT (id) DO NOTHING RETURNING id),
	hist AS (
		INSERT INTO history (instance_id, seq, kind, name, ref, payload, error, at, digest)
		SELECT e.inst, e.seq, e.kind, e.name, e.ref, e.payload, e.err, e.at, e.digest
		FROM unnest($14::text[], $15::bigint[], $16::text[], $17::text[], $18::text[], $19::bytea[], $20::text[], $21::bigint[],
			$22::text[]) AS e(inst, seq, kind, name, ref, payload, err, at, digest)
		WHERE e.inst IN (SELECT id FROM ins))
	SELECT id FROM ins`,
	// After sqlCreateMany, in the same transaction: an ID of $1 that an
	// instance of another workflow than the one of $2 at its position
	// holds fails the step. (A separate statement: sqlCreateMany's own
	// snapshot may predate an instance whose insert it waited for.)
	sqlCreateConflict: `SELECT norn_check(false, '` + checkConflict + `', i.id || chr(31) || i.workflow)
		FROM instances i JOIN unnest($1::text[], $2::text[]) AS u(id, wf) ON i.id = u.id
		WHERE i.workflow <> u.wf LIMIT 1`,

	// Consuming waits for a concurrent consumer of the same message to end
	// (then finds it gone, or takes it if that consumer rolled back). The
	// first attempt of a step does not wait: a locked message fails the step
	// with lock_not_available, and the writer retries it in its next
	// transaction, after its own locks are released, which avoids deadlocks
	// between batches that consume the same competing messages.
	// $1 seq, $2 instance: a message still queued, or in the instance's
	// own mailbox (not one that another consumer claimed meanwhile).
	sqlConsume: `WITH d AS (DELETE FROM messages WHERE seq = $1::bigint AND (target IS NULL OR target = $2::text) RETURNING 1)
		SELECT norn_check(EXISTS (SELECT 1 FROM d), '` + checkGone + `', '')`,
	sqlConsumeNowait: `WITH d AS (DELETE FROM messages WHERE seq = (SELECT seq FROM messages WHERE seq = $1::bigint FOR UPDATE NOWAIT)
			AND (target IS NULL OR target = $2::text) RETURNING 1)
		SELECT norn_check(EXISTS (SELECT 1 FROM d), '` + checkGone + `', '')`,

	// A batch's transaction-scoped advisory locks, in the order given:
	// $1 lock spaces, $2 keys, $3 exclusive (else shared).
	sqlLocks: `SELECT CASE WHEN x THEN pg_advisory_xact_lock(s, k)::text ELSE pg_advisory_xact_lock_shared(s, k)::text END
		FROM unnest($1::integer[], $2::integer[], $3::boolean[]) AS l(s, k, x)`,

	// $1 channel, $2 subscribing instance, $3 requested mode. A channel's
	// subscribers share one mode (this check keeps it so), so one other
	// subscriber tells it: looking for one of another mode would walk past
	// every subscriber of the same mode, a cost that grows with them.
	// ORDER BY mode keeps it on subscriptions_channel (see publishCTEs).
	sqlSubscribeCheck: `SELECT norn_check(m IS NULL OR m = $3::text, '` + checkMode + `', COALESCE(m, '')) FROM (SELECT (
		SELECT mode FROM subscriptions WHERE channel = $1::text AND instance_id <> $2::text ORDER BY mode LIMIT 1) AS m) x`,
	sqlSubscribe: `INSERT INTO subscriptions (instance_id, channel, mode) VALUES ($1::text, $2::text, $3::text)
		ON CONFLICT (instance_id, channel) DO UPDATE SET mode = excluded.mode`,
	sqlUnsubscribe: `DELETE FROM subscriptions WHERE instance_id = $1::text AND channel = $2::text`,

	// $1 channel: a direct send conflicts with broadcast or competing
	// subscribers (one subscriber tells the channel's mode, as above).
	sqlDirectCheck: `SELECT norn_check(m IS NULL OR m = 'direct', '` + checkMode + `', COALESCE(m, '')) FROM (SELECT (
		SELECT mode FROM subscriptions WHERE channel = $1::text ORDER BY mode LIMIT 1) AS m) x`,
	// $1 target: MustDeliver.
	sqlTargetCheck: `SELECT norn_check(s IS NOT NULL AND s NOT IN ` + terminalSQL + `,
		CASE WHEN s IS NULL THEN '` + checkNotFound + `' ELSE '` + checkDone + `' END, COALESCE(s, '')) FROM (SELECT (
		SELECT status FROM instances WHERE id = $1::text) AS s) x`,
	// $1 message ID, $2 now. A Dedupe message's ID: taken, or the message
	// is a duplicate. The insert waits for a transaction that inserted the
	// same ID and has not ended, and then takes the ID if that one rolled
	// back, so of concurrent duplicates in any processes exactly one wins.
	sqlUseMessageID: `WITH u AS (INSERT INTO message_ids (msg_id, created_at) VALUES ($1::text, $2::bigint)
			ON CONFLICT (msg_id) DO NOTHING RETURNING 1)
		SELECT norn_check(EXISTS (SELECT 1 FROM u), '` + checkUsed + `', $1::text)`,
	// $1 msg id, $2 channel, $3 target, $4 sender, $5 payload, $6 metadata,
	// $7 published at, $8 type.
	sqlSendDirect: `INSERT INTO messages (msg_id, channel, target, sender, payload, metadata, published_at, type)
		SELECT $1::text, $2::text, $3::text, $4::text, $5::bytea, $6::jsonb, $7::bigint, $8::text
		WHERE EXISTS (SELECT 1 FROM instances WHERE id = $3::text AND status NOT IN ` + terminalSQL + `)`,
	// $1 channel, $2 key: the subscribers to wake (of a competing channel,
	// those competingWindow names after key); publishing on a direct
	// channel conflicts.
	sqlPublishSubs: `WITH m AS (SELECT mode FROM subscriptions WHERE channel = $1::text ORDER BY mode LIMIT 1)
		(SELECT instance_id, norn_check(mode <> 'direct', '` + checkMode + `', mode), mode
			FROM subscriptions WHERE channel = $1::text AND EXISTS (SELECT 1 FROM m WHERE mode <> 'competing') ORDER BY instance_id)
		UNION ALL
		(SELECT instance_id, true, 'competing' FROM (` + competingWindow("$1::text", "$2::text", "<=") + `) w
			WHERE EXISTS (SELECT 1 FROM m WHERE mode = 'competing'))`,
	// $1 msg id, $2 channel, $3 sender, $4 payload, $5 metadata, $6 published
	// at, $7 type, $8 key (see competingWindow). A copy per broadcast subscriber; otherwise (competing, or nobody
	// subscribed yet) one message in the channel's queue. The subscription
	// rows are locked (KEY SHARE, in ID order) against a subscriber that
	// unsubscribes or ends meanwhile: its step waits for this one, then
	// drops the copy with its mailbox; or this one waits for it and skips it.
	//
	// It also checks the channel's mode (a direct channel cannot be
	// published on) and returns the subscribers, to wake, so that a
	// publish is one statement: chk raises if the channel is direct, and
	// the queue's insert, which a direct channel reaches, reads it. The
	// inserts are in the same statement, so a failed check undoes them.
	//
	// A broadcast locks the subscription rows it copies to (bc, in ID
	// order), and copies to the rows it locked; competing subscriptions
	// are only read, for the wake-ups: a queued message lands in no
	// mailbox, and locking them made every publish write a row lock (a
	// multixact, with concurrent publishers) on each consumer's
	// subscription. bc's scan runs only when m found a broadcast
	// subscriber, so a publish to a channel of another mode (or none, as
	// the Down every end publishes) reads at most MaxQueuedSubscribers of
	// them.
	sqlPublish: publishCTEs("$8::text") + `,
		queued AS (
			INSERT INTO messages (msg_id, channel, target, sender, payload, metadata, published_at, type)
			SELECT $1::text, $2::text, NULL, $3::text, $4::bytea, $5::jsonb, $6::bigint, $7::text
			` + publishQueues + `)
		SELECT s.instance_id, s.mode FROM subs s CROSS JOIN chk WHERE chk.ok`,
	// sqlPublish with a consumer to hand the message to (NewMessage.HandTo):
	// $8 the consumer, $9 the owner that must hold its lease, $10 key. hand is the
	// consumer if it may take the message by ClaimQueue's rules, its
	// subscription row locked as claimQueueSQL locks it; the message is
	// then inserted into its mailbox, claimed, instead of the queue. Each
	// row also says where the message went: its seq and the consumer, or
	// NULLs if it was queued.
	sqlPublishHand: publishCTEs("$10::text") + `,
		hand AS MATERIALIZED (
			SELECT s.instance_id FROM subscriptions s
			JOIN instances i ON i.id = s.instance_id AND i.lease_owner = $9::text AND i.lease_expires > ` + serverNowNS + `
				AND i.status NOT IN ` + terminalSQL + `
			WHERE s.instance_id = $8::text AND s.channel = $2::text AND s.mode = 'competing'
			FOR KEY SHARE OF s),
		queued AS (
			INSERT INTO messages (msg_id, channel, target, sender, payload, metadata, published_at, type, claimed)
			SELECT $1::text, $2::text, h.instance_id, $3::text, $4::bytea, $5::jsonb, $6::bigint, $7::text, h.instance_id IS NOT NULL
			FROM (SELECT 1) AS one LEFT JOIN hand h ON true
			` + publishQueues + `
			RETURNING seq, target)
		SELECT s.instance_id, s.mode, q.seq, q.target FROM subs s CROSS JOIN chk
		LEFT JOIN queued q ON q.target IS NOT NULL WHERE chk.ok`,
	// sqlPublish for a run of messages on one channel, in one statement:
	// $1 channel, then arrays of $2 msg ids, $3 senders, $4 payloads, $5
	// metadata (JSON text or NULL), $6 published at, $7 types. Copies and
	// queued messages are inserted in the run's order, so that their seqs
	// keep it.
	sqlPublishMany: `WITH subs AS (
			SELECT instance_id, mode FROM subscriptions WHERE channel = $1::text AND mode = 'broadcast'
			ORDER BY instance_id FOR KEY SHARE),
		m AS (
			SELECT * FROM unnest($2::text[], $3::text[], $4::bytea[], $5::text[], $6::bigint[], $7::text[])
				WITH ORDINALITY AS m(id, sender, payload, meta, at, typ, ord)),
		copies AS (
			INSERT INTO messages (msg_id, channel, target, sender, payload, metadata, published_at, type)
			SELECT m.id, $1::text, s.instance_id, m.sender, m.payload, m.meta::jsonb, m.at, m.typ
			FROM m CROSS JOIN subs s WHERE s.mode = 'broadcast' ORDER BY m.ord, s.instance_id)
		INSERT INTO messages (msg_id, channel, target, sender, payload, metadata, published_at, type)
		SELECT m.id, $1::text, NULL, m.sender, m.payload, m.meta::jsonb, m.at, m.typ FROM m
		WHERE NOT EXISTS (SELECT 1 FROM subs WHERE mode = 'broadcast')
			AND NOT (NOT EXISTS (SELECT 1 FROM subscriptions WHERE channel = $1::text)
				AND starts_with($1::text, '` + persistence.SystemChannelPrefix + `'))
		ORDER BY m.ord`,
	// sqlPublish for messages on system channels, one per channel, in one
	// statement (see mergeWrites): arrays of $1 msg ids, $2 channels, $3
	// senders, $4 payloads, $5 metadata (JSON text or NULL), $6 published
	// at, $7 types. A copy per broadcast subscriber, its row locked as
	// sqlPublish locks it; nothing is queued, as sqlPublish queues nothing
	// on a system channel nobody subscribes to. Any other subscriber (a
	// competing or direct channel) fails the check: the batch then runs
	// again with each publish in its own sqlPublish. It returns each
	// subscriber copied to, with its channel, to wake.
	sqlPublishSystem: `WITH m AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::bigint[], $7::text[])
				WITH ORDINALITY AS m(id, channel, sender, payload, meta, at, typ, ord)),
		subs AS (
			SELECT channel, instance_id, norn_check(mode = 'broadcast', '` + checkMode + `', mode) AS ok
			FROM subscriptions WHERE channel = ANY($2::text[]) ORDER BY channel, instance_id FOR KEY SHARE),
		copies AS (
			INSERT INTO messages (msg_id, channel, target, sender, payload, metadata, published_at, type)
			SELECT m.id, m.channel, s.instance_id, m.sender, m.payload, m.meta::jsonb, m.at, m.typ
			FROM m JOIN subs s ON s.channel = m.channel ORDER BY m.ord, s.instance_id)
		SELECT channel, instance_id FROM subs`,
	// Same arguments as sqlPublish, for a message with no channel.
	sqlQueue: `INSERT INTO messages (msg_id, channel, target, sender, payload, metadata, published_at, type)
		VALUES ($1::text, $2::text, NULL, $3::text, $4::bytea, $5::jsonb, $6::bigint, $7::text)`,

	sqlCancelTimer: `DELETE FROM timers WHERE instance_id = $1::text AND timer_id = $2::text`,
	sqlFireTimer: `WITH d AS (DELETE FROM timers WHERE instance_id = $1::text AND timer_id = $2::text RETURNING 1)
		SELECT norn_check(EXISTS (SELECT 1 FROM d), '` + checkTimer + `', '')`,
	// $1 instance, $2 timer, $3 due, $4 the instance's bucket.
	sqlAddTimer: `INSERT INTO timers (instance_id, timer_id, due, bucket) VALUES ($1::text, $2::text, $3::bigint, $4::integer)
		ON CONFLICT (instance_id, timer_id) DO UPDATE SET due = excluded.due, bucket = excluded.bucket`,
	// Ending an instance: two statements, so that the second (its own
	// snapshot) sees the broadcast copies of publishers that the first
	// waited for.
	// $1 the instance that ended: its subscriptions and timers go. Deleting
	// a subscription waits for a broadcast that is copying to it (the copy
	// locks the row), so the next statement, sqlDropMailbox, sees the copy.
	sqlEndInstance: `WITH s AS (DELETE FROM subscriptions WHERE instance_id = $1::text)
		DELETE FROM timers WHERE instance_id = $1::text`,
	// sqlEndInstance for the instances $1, at the start of the batch (see
	// mergeWrites): before any of its publishes locks subscription rows.
	sqlEndInstances: `WITH s AS (DELETE FROM subscriptions WHERE instance_id = ANY($1::text[]))
		DELETE FROM timers WHERE instance_id = ANY($1::text[])`,
	// $1 the instance that ended: its mail goes, and what it claimed goes
	// back to its queues, in one statement. It returns, as sqlUnclaim does,
	// each returned message's channel and type with competing subscribers
	// of its channel, to wake.
	sqlDropMailbox: `WITH d AS (DELETE FROM messages WHERE target = $1::text AND NOT claimed),
		r AS (UPDATE messages SET target = NULL, claimed = false WHERE target = $1::text AND claimed RETURNING channel, type)
		SELECT r.channel, r.type, ` + requeuedSubs(true) + ` FROM r`,
	// Merged drops of ended instances' mail (see mergeWrites):
	// sqlDropMailbox for the instances $1, each returned message with the
	// instance that had claimed it. Each instance's subscriptions were
	// deleted before, at the start of the batch (sqlEndInstances) or in
	// its step (sqlEndInstance): a broadcast publish holds its subscribers'
	// rows (FOR KEY SHARE), so that delete may wait for one to commit, and
	// this statement, with a snapshot taken after the wait, drops the copy
	// it left. (Deleting the subscriptions here as well, at the end of the
	// transaction, had batches that ended instances and published wait for
	// one another until the server broke the deadlock: a batch then held
	// the rows its own publishes had locked.)
	sqlDropMailboxes: `WITH d AS (DELETE FROM messages WHERE target = ANY($1::text[]) AND NOT claimed),
		r AS (UPDATE messages m SET target = NULL, claimed = false FROM unnest($1::text[]) AS o(owner)
			WHERE m.target = o.owner AND m.claimed RETURNING o.owner, m.channel, m.type)
		SELECT r.owner, r.channel, r.type, ` + requeuedSubsOf("r.owner", true) + ` FROM r`,
	// $1 instance, $2 seqs: the queued messages to move into its mailbox.
	// A message another transaction is consuming or claiming is skipped,
	// not waited for: a claim is best effort.
	sqlClaim: `WITH c AS (UPDATE messages SET target = $1::text, claimed = true WHERE seq IN (
			SELECT seq FROM messages WHERE seq = ANY($2::bigint[]) AND target IS NULL FOR UPDATE SKIP LOCKED)
		RETURNING seq)
		SELECT seq FROM c`,
	// $1 instance, $2 channel ('' for all): its claimed messages go back to
	// their queues; each with competing subscribers of its channel, to wake
	// (see requeuedSubs).
	sqlUnclaim: `WITH r AS (UPDATE messages SET target = NULL, claimed = false
			WHERE target = $1::text AND claimed AND ($2::text = '' OR channel = $2::text) RETURNING channel, type)
		SELECT r.channel, r.type, ` + requeuedSubs(false) + ` FROM r`,
	// $1 id, $2 instance, $3 type, $4 data, $5 time: due at once. An ID
	// already in the outbox is the same event emitted again (a step retried
	// after its commit was not acknowledged): the first stays. The insert
	// waits for a transaction that inserted the same ID and has not ended,
	// so of concurrent emits in any processes exactly one is kept.
	sqlEmit: `INSERT INTO outbox (id, instance, type, data, created_at, status, next_attempt)
		VALUES ($1::text, $2::text, $3::text, $4::bytea, $5::bigint, 'pending', $5::bigint) ON CONFLICT (id) DO NOTHING`,
	sqlNotify: `SELECT pg_notify($1::text, $2::text)`,
	// $1 lock space, $2 key, $3 this store's own listeners' backends:
	// whether another store's wake-up listener holds its advisory lock
	// (see othersListening). Advisory locks of two int4 keys show in
	// pg_locks as classid, objid and objsubid 2.
	sqlListening: `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = $1::integer::oid AND objid = $2::integer::oid AND objsubid = 2
		AND NOT (pid = ANY($3::integer[])))`,
	sqlAsyncCommit: `SET LOCAL synchronous_commit = off`,

	// $1 id, $2 owner, $3 TTL in nanoseconds, $4 now (the caller's, for
	// updated_at only). The row is locked (l) before the new expiry is
	// computed, so that a wait for the lock does not shorten the lease.
	sqlAcquireLease: `UPDATE instances i SET lease_owner = $2::text, lease_epoch = i.lease_epoch + 1,
		lease_expires = ` + serverNowNS + ` + $3::bigint,
		status = CASE WHEN i.status = 'waiting' THEN 'running' ELSE i.status END, updated_at = $4::bigint
		FROM (SELECT id AS locked FROM instances WHERE id = $1::text FOR UPDATE) l
		WHERE i.id = l.locked AND i.status NOT IN ` + terminalSQL + `
			AND (i.lease_owner IS NULL OR i.lease_owner = $2::text OR i.lease_expires < ` + serverNowNS + `)
		RETURNING ` + instanceCols,
	// $1 owner, $2 TTL in nanoseconds. Leases are locked in ID order, the
	// order in which the writer's batches lock instances, so that renewing
	// cannot deadlock with a batch; and before the new expiry is computed.
	sqlRenewLeases: `UPDATE instances SET lease_expires = ` + serverNowNS + ` + $2::bigint
		WHERE id = ANY(` + ownerLeases + `)
		RETURNING id`,
	// $1 lock space, $2 the owner's hash: releasers of one owner's leases
	// take turns (see ReleaseLeases).
	sqlReleaseTurn: `SELECT pg_advisory_xact_lock($1::integer, $2::integer)`,
	// A new epoch fences whoever still runs under a released lease.
	sqlReleaseLeases: `UPDATE instances SET lease_owner = NULL, lease_expires = 0, lease_epoch = lease_epoch + 1,
			status = CASE WHEN status = 'waiting' THEN 'running' ELSE status END
		WHERE id = ANY(` + ownerLeases + `)`,
	sqlCancel: `UPDATE instances SET cancel_reason = $2::text, updated_at = $3::bigint
		WHERE id = $1::text AND cancel_reason = '' AND status NOT IN ` + terminalSQL,
	sqlStatus: `SELECT status FROM instances WHERE id = $1::text`,
	// $1 before, $2 chunk size. In chunks, so that one prune of a long
	// backlog does not hold row locks on all of it until it commits.
	sqlPruneIDs: `DELETE FROM message_ids WHERE msg_id IN (
		SELECT msg_id FROM message_ids WHERE created_at < $1::bigint LIMIT $2::bigint)`,
	// $1 before, $2 chunk size. SKIP LOCKED: a message a consumer's step
	// is taking right now is left to it (or to the next prune) rather than
	// waited for, so pruning never queues behind writers nor deadlocks
	// with a batch that locks several messages.
	sqlPruneQueue: `DELETE FROM messages WHERE seq IN (
		SELECT seq FROM messages WHERE target IS NULL AND published_at < $1::bigint LIMIT $2::bigint FOR UPDATE SKIP LOCKED)`,

	// $1 owner, $2 claim expiry, $3 now, $4 limit. The oldest due events
	// that no live claim holds, from the head of outbox_due. SKIP LOCKED:
	// rows a concurrent claim has locked are left to it rather than waited
	// for; a row that one committed after this statement's snapshot is
	// checked again once locked (READ COMMITTED), and dropped as claimed.
	// So concurrent claimers, in any processes, never share an event.
	sqlClaimOutbox: `WITH c AS MATERIALIZED (
			SELECT id FROM outbox
			WHERE status = 'pending' AND next_attempt <= $3::bigint AND (claimer IS NULL OR claim_expires <= $3::bigint)
			ORDER BY next_attempt, id LIMIT $4::bigint
			FOR UPDATE SKIP LOCKED),
		u AS (UPDATE outbox o SET claimer = $1::text, claim_expires = $2::bigint FROM c WHERE o.id = c.id RETURNING o.*)
		SELECT ` + rowcodec.OutboxColumns + ` FROM u ORDER BY next_attempt, id`,
	// $1 id, $2 owner, $3 status, $4 next attempt, $5 error, $6 now: when
	// delivery ended, unless it goes on (pending).
	sqlFinishOutbox: `UPDATE outbox SET status = $3::text, next_attempt = $4::bigint, error = $5::text, attempts = attempts + 1,
		claimer = NULL, claim_expires = 0, finished_at = CASE WHEN $3::text = 'pending' THEN 0 ELSE $6::bigint END
		WHERE id = $1::text AND claimer = $2::text`,
	sqlOutboxClaimer: `SELECT COALESCE(claimer, ''), claim_expires FROM outbox WHERE id = $1::text`,
	// $1 owner, $2 IDs. Locked in ID order, as the claims of other
	// relayers lock the rows they take, so that no two deadlock; then
	// updated by key, as ownerLeases explains.
	sqlReleaseOutbox: `UPDATE outbox SET claimer = NULL, claim_expires = 0
		WHERE id = ANY((SELECT COALESCE(array_agg(id), '{}') FROM (
			SELECT id FROM outbox WHERE id = ANY($2::text[]) AND claimer = $1::text AND status = 'pending' ORDER BY id FOR UPDATE) l)::text[])`,
	// $1 before, $2 limit. The oldest ended events, by outbox_finished.
	// SKIP LOCKED: rows that a concurrent prune holds are left to it.
	sqlPruneOutbox: `DELETE FROM outbox WHERE id IN (
		SELECT id FROM outbox WHERE status <> 'pending' AND finished_at < $1::bigint
		ORDER BY finished_at LIMIT $2::bigint FOR UPDATE SKIP LOCKED)`,

	sqlHistory: `SELECT seq, kind, name, ref, payload, error, digest, at FROM history
		WHERE instance_id = $1::text AND seq >= $2::bigint ORDER BY seq`,
	// $1 instance, $2 limit: the first events of its run (Load).
	sqlHistoryFirst: `SELECT seq, kind, name, ref, payload, error, digest, at FROM history
		WHERE instance_id = $1::text ORDER BY seq LIMIT $2::bigint`,
	sqlBeginSnapshot: `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`,
	// $1 limit. The server's clock, read once (InitPlan), decides which
	// leases expired.
	sqlRunnable: runnableSQL(""),
	// $1 limit, $2 buckets.
	sqlRunnableIn: runnableSQL(" AND i.bucket = ANY($2::integer[])"),
	sqlMailbox:    mailboxSQL,
	// $1 instance, $2 limit: how many messages sqlMailbox would return.
	sqlMailboxDepth:  `SELECT count(*)::bigint FROM (` + mailboxSQL + `) d`,
	sqlSubscriptions: `SELECT channel, mode FROM subscriptions WHERE instance_id = $1::text ORDER BY channel`,
	sqlChannelStats: `SELECT channel, MAX(mode), SUM(subs)::bigint, SUM(waiting)::bigint, COALESCE(MIN(oldest), 0)::bigint FROM (
			SELECT channel, mode, COUNT(*) AS subs, 0 AS waiting, NULL::bigint AS oldest FROM subscriptions GROUP BY channel, mode
			UNION ALL
			SELECT channel, '' AS mode, 0, COUNT(*), MIN(published_at) FROM messages WHERE channel <> '' GROUP BY channel
		) x GROUP BY channel ORDER BY channel`,
	sqlDueTimers:   `SELECT instance_id, timer_id, due FROM timers WHERE due < $1::bigint ORDER BY due LIMIT $2::bigint`,
	sqlDueTimersIn: `SELECT instance_id, timer_id, due FROM timers WHERE bucket = ANY($3::integer[]) AND due < $1::bigint ORDER BY due LIMIT $2::bigint`,
}
