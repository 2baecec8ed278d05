-- Queued messages (no target) by publish time, for PruneQueue: without it
-- every prune would scan the whole queue.
CREATE INDEX messages_queue_age ON messages (published_at) WHERE target IS NULL;
