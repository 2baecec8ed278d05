-- What an instance may have left behind when it ends, as bits: 1
-- subscriptions, 2 timers, 4 claimed messages. The steps that add one set
-- its bit, and the step that ends the instance deletes only what its bits
-- name; most instances hold one kind or none, and each clean-up statement
-- cost the one writer an index probe per ended instance. Rows from before
-- this column have every bit set: their clean-up is as before.
ALTER TABLE instances ADD COLUMN holds INTEGER NOT NULL DEFAULT 7;
