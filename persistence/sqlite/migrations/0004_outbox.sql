-- The outbox: outgoing events that steps emitted (Step.Emit), waiting for a
-- relayer to deliver them. Times are Unix nanoseconds, 0 for none.
-- created_at is the event's time (OutboxEvent.At), next_attempt the
-- earliest next delivery attempt. While one relayer sends an event, claimer
-- holds it until claim_expires; a relayer that dies loses it then.
-- A rowid table rather than WITHOUT ROWID: data is an encoded event of any
-- size, and wide rows make a clustered B-tree slow to search.
CREATE TABLE outbox (
    id            TEXT PRIMARY KEY,
    instance      TEXT NOT NULL DEFAULT '',
    type          TEXT NOT NULL DEFAULT '',
    data          BLOB,
    created_at    INTEGER NOT NULL,
    status        TEXT NOT NULL DEFAULT 'pending',
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_attempt  INTEGER NOT NULL,
    error         TEXT NOT NULL DEFAULT '',
    claimer       TEXT,
    claim_expires INTEGER NOT NULL DEFAULT 0
);
-- Pending events by when they are due, for ClaimOutbox: a claim reads the
-- head of this index only, and delivered events leave it, so claiming costs
-- the same however many sent events the table keeps.
CREATE INDEX outbox_due ON outbox(next_attempt, id) WHERE status = 'pending';
-- Events by status, oldest first, for ListOutbox's pages.
CREATE INDEX outbox_status ON outbox(status, created_at, id);
