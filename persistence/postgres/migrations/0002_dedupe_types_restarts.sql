-- Event digests, message type names, restart logs and the table of used
-- message IDs. New columns have constant defaults, so adding them rewrites
-- no table, and rows written before this migration read as "no digest",
-- "no type" and "no recent restarts".

ALTER TABLE history ADD COLUMN digest TEXT NOT NULL DEFAULT '';

ALTER TABLE messages ADD COLUMN type TEXT NOT NULL DEFAULT '';

-- Unix nanoseconds, oldest first, separated by commas (see rowcodec).
ALTER TABLE instances ADD COLUMN restart_log TEXT NOT NULL DEFAULT '';

-- IDs of messages sent with NewMessage.Dedupe: the primary key is what makes
-- a second message with one ID a duplicate, also between transactions of
-- different processes (the second insert waits for the first to commit or
-- roll back). created_at is when the ID was first used, for PruneMessageIDs.
CREATE TABLE message_ids (
    msg_id     TEXT COLLATE "C" PRIMARY KEY,
    created_at BIGINT NOT NULL
);
CREATE INDEX message_ids_created ON message_ids (created_at);
