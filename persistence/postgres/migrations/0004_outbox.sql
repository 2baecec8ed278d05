-- The outbox: outgoing events that steps emitted (Step.Emit), waiting for a
-- relayer to deliver them. As in the SQLite driver, times are BIGINT Unix
-- nanoseconds (0 for none) and IDs sort in byte order. created_at is the
-- event's time (OutboxEvent.At), next_attempt the earliest next delivery
-- attempt. While one relayer sends an event, claimer holds it until
-- claim_expires; a relayer that dies loses it then.
CREATE TABLE outbox (
    id            TEXT COLLATE "C" PRIMARY KEY,
    instance      TEXT COLLATE "C" NOT NULL DEFAULT '',
    type          TEXT NOT NULL DEFAULT '',
    data          BYTEA,
    created_at    BIGINT NOT NULL,
    status        TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'invalid', 'expired')),
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_attempt  BIGINT NOT NULL,
    error         TEXT NOT NULL DEFAULT '',
    claimer       TEXT COLLATE "C",
    claim_expires BIGINT NOT NULL DEFAULT 0
);
-- Pending events by when they are due, for ClaimOutbox: a claim reads the
-- head of this index only, and delivered events leave it, so claiming costs
-- the same however many sent events the table keeps.
CREATE INDEX outbox_due ON outbox (next_attempt, id) WHERE status = 'pending';
-- Events by status, oldest first, for ListOutbox's pages.
CREATE INDEX outbox_status ON outbox (status, created_at, id);
