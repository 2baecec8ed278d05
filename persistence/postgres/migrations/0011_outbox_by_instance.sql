-- Delivered outgoing events by instance, so that purging an instance
-- (PurgeInstances) finds its delivered events without scanning the outbox.
-- Pending events, which every emit adds and the relayers rewrite, stay out
-- of it; the columns it reads never change once an event is delivered, and
-- the status it filters on is in the outbox's other indexes already (no
-- update that was HOT stops being so).
CREATE INDEX outbox_instance_done ON outbox (instance) WHERE status <> 'pending';
