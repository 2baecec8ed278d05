-- When an outgoing event's delivery ended (status sent, invalid or
-- expired), in Unix nanoseconds; 0 while it is pending. PruneOutbox deletes
-- ended events by it. Events that ended before this migration left no
-- record of when: they count as ended now, so that they are kept for a
-- whole retention period after the upgrade.
ALTER TABLE outbox ADD COLUMN finished_at INTEGER NOT NULL DEFAULT 0;
UPDATE outbox SET finished_at = unixepoch() * 1000000000 WHERE status <> 'pending';
-- Ended events, oldest first, for PruneOutbox. PruneOutbox's WHERE repeats
-- the predicate word for word, which is what lets SQLite use a partial
-- index; pending events, which the relayers write most, stay out of it.
CREATE INDEX outbox_finished ON outbox(finished_at) WHERE status <> 'pending';
