-- Queued messages (no target) by publish time, for PruneQueue: without it
-- every prune would scan the whole queue inside the single writer's
-- transaction, holding up every step meanwhile.
CREATE INDEX messages_queue_age ON messages(published_at) WHERE target IS NULL;
