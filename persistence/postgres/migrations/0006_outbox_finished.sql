-- When an outgoing event's delivery ended (status sent, invalid or
-- expired), in Unix nanoseconds; 0 while it is pending. PruneOutbox deletes
-- ended events by it. Events that ended before this migration left no
-- record of when: they count as ended now, so that they are kept for a
-- whole retention period after the upgrade.
ALTER TABLE outbox ADD COLUMN finished_at BIGINT NOT NULL DEFAULT 0;
UPDATE outbox SET finished_at = (extract(epoch FROM now()) * 1000000000)::bigint WHERE status <> 'pending';
-- Ended events, oldest first, for PruneOutbox; pending events, which the
-- relayers write most, stay out of it.
CREATE INDEX outbox_finished ON outbox (finished_at) WHERE status <> 'pending';
