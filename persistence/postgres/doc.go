// Package postgres is Norn's store for shared, multi-node deployments: a
// persistence.Store on PostgreSQL through pgx/v5, with the same semantics as
// the embedded SQLite driver (both pass persistence/storetest).
//
//	st, err := postgres.Open(ctx, "postgres://norn:secret@db:5432/norn", postgres.Options{})
//	if err != nil { ... }
//	defer st.Close()
//
//	// Wake-ups from other nodes, so that nobody polls the store.
//	go st.Listen(ctx, func(ids []string) {
//		if ids == nil { /* rescan: notifications may have been lost */ }
//		for _, id := range ids { /* wake the activation of id */ }
//	})
//
// # Schema
//
// Open creates a schema (Options.Schema, default "norn") and applies the
// embedded migrations in it, recording them in schema_migrations. It takes a
// transaction-scoped advisory lock first, so any number of processes may open
// one database at once. Tables: instances, history (instance_id, seq),
// messages (an identity column gives the store-wide arrival order),
// subscriptions, timers and message_ids (the IDs of Dedupe messages). Times are BIGINT nanoseconds since the Unix epoch
// (0 for none): exact round trips, and a timer never fires a fraction of a
// microsecond early because its time was truncated. IDs and channel names use
// the "C" collation, so List orders by bytes as SQLite does. Instances and
// timers carry their bucket (persistence.BucketOf of the instance ID) in an
// indexed column, so that a cluster node reads the runnable instances and due
// timers of its own buckets only; Open fills in the buckets of rows written
// before the column existed.
//
// # Group commit
//
// Apply queues its step for one of Options.Writers writer goroutines (2 by
// default). A writer takes every step queued while it was busy (up to
// Options.MaxBatch) and sends them to the server as one pipeline: BEGIN, the
// steps, COMMIT — one round trip and one commit for the whole batch. Each
// step's conditions (the lease epoch, the history sequence, a message still
// being there, ...) are checked inside its own statements, which raise an
// error when they fail. A step that may fail in the normal course of things
// (a creation that does more than insert its instance and events, a
// subscription, a claim, a message that must be delivered or is
// deduplicated) runs between SAVEPOINT and RELEASE: when it fails the
// pipeline stops there, the writer rolls back to the step's savepoint,
// settles it (with the error persistence.Step specifies) and sends the rest
// of the batch. The other steps of a batch of several give their instance
// inserts and updates to one statement each, from arrays, before their
// other statements, and their events to one after them. Any of those steps
// failing (an ID taken, a lost lease, a lost lock conflict) takes the
// transaction with it: the writer runs the batch again with every step in a
// savepoint and nothing merged, and, unless an ID was taken, the next few
// batches too.
// Writers run in parallel on their own connections; steps in a batch are
// ordered by instance ID so batches lock rows in the same order.
//
// A step that loses a lock conflict with another transaction (a deadlock, or
// a message that another transaction is consuming) is rolled back alone and
// tried again in the writer's next transaction. A transaction that finds the
// server's lock table full ("out of shared memory": it is shared by all
// connections, see docs/operations.md) is rolled back whole, and its steps
// run again in transactions of half as many.
//
// # Concurrency between processes
//
// Every write to an instance is an UPDATE conditional on its lease epoch, so
// a writer that lost its lease fails with persistence.ErrFenced however the
// transactions interleave. Consuming deletes the message and checks that a
// row went, so one message never reaches two consumers. Subscribing takes an
// exclusive advisory lock on the channel and publishing a shared one, so two
// transactions cannot subscribe one channel in two modes. Sending to an
// instance takes a shared advisory lock on it and ending an instance an
// exclusive one, and a broadcast locks the subscription rows it copies to,
// so no message lands in the mailbox of an instance that ended meanwhile.
// A batch takes all its advisory locks first, in one global order, and locks
// instances in ID order, so batches do not deadlock one another.
//
// Lease times come from the server's clock, read when the statement runs
// (clock_timestamp()): AcquireLease, RenewLeases, a Create with
// Step.LeaseTTL and Runnable's test of expiry never use the client's, so
// nodes whose clocks disagree still agree on when a lease expires. A lease
// is taken or renewed after the row lock is granted, so waiting for the lock
// does not shorten it.
//
// A Dedupe message first inserts its ID into message_ids, whose primary key
// settles races: an insert of an ID that another transaction inserted waits
// for that transaction, and takes the ID only if it rolled back. A used ID
// fails that statement like any other check; the writer then rolls the step
// back to its savepoint and applies it again without the message, in the
// same pipeline, so only steps with duplicates pay a second pass.
//
// # Wake-ups
//
// After each commit, a notifier goroutine sends pg_notify on the channel
// "<schema>_wake" with the IDs of the instances the batch woke: mailbox
// recipients (StepResult.Woken), created instances and, from RequestCancel,
// instances asked to cancel. IDs are JSON, split to fit PostgreSQL's payload
// limit, coalesced across batches under load, and replaced by a single
// "rescan" when there are too many. Store.Listen (persistence.Notifier)
// listens on a connection of its own and reconnects on its own.
//
// A listener also holds a shared advisory lock on its connection, which
// the server drops with the connection. A store sends no notifications while
// no other store's listener holds that lock (it looks at most four times a
// second): with one process on the database, they would cost a transaction
// per batch and wake no one. A look that found no one is trusted for a
// quarter of a second, and only by a store with a listener of its own; a
// listener that finds another one when it connects (whose store may still
// trust such a look) rescans half a second later rather than at once.
//
// Statements are prepared by name on every pooled connection and batches are
// pipelined, so the driver needs a direct connection or a session-mode
// pooler, not a transaction-mode one. The group-commit transactions use
// each statement's generic plan, planned once per connection, and the
// store analyses a table of its own that has grown far past the server's
// statistics of it, so that those plans follow the table. Its connections
// run with jit off unless the URL sets jit (its statements are short).
package postgres
