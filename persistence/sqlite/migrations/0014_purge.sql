-- Ended instances by when they ended, for PurgeInstances: a purge reads
-- the oldest entries of this index only, however many live or recently
-- ended instances the table holds. An instance enters it once, at its end
-- (no step changes an ended instance). PurgeInstances' WHERE repeats the
-- predicate word for word (SQLite's condition for using a partial index).
CREATE INDEX instances_ended ON instances(updated_at) WHERE status = 'completed' OR status = 'failed' OR status = 'cancelled';
-- Delivered outgoing events by instance, so that purging an instance finds
-- its delivered events without scanning the outbox. Pending events, which
-- every emit adds and the relayers rewrite, stay out of it.
CREATE INDEX outbox_instance_done ON outbox(instance) WHERE status <> 'pending';
