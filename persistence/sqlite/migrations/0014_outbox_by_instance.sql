-- Delivered outgoing events by instance, so that purging an instance
-- (PurgeInstances) finds its delivered events without scanning the outbox.
-- Pending events, which every emit adds and the relayers rewrite, stay out
-- of it; the columns it reads never change once an event is delivered.
-- PurgeInstances' WHERE repeats the predicate word for word (SQLite's
-- condition for using a partial index).
CREATE INDEX outbox_instance_done ON outbox(instance) WHERE status <> 'pending';
