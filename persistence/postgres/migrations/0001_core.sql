-- Norn's core schema for PostgreSQL. It mirrors the SQLite driver's schema:
-- times are BIGINT nanoseconds since the Unix epoch (0 means "none"), so that
-- they round-trip exactly; identifiers use the "C" collation so that ordering
-- by ID is byte order, as in SQLite, whatever the database's collation.

CREATE TABLE instances (
    id            TEXT COLLATE "C" PRIMARY KEY,
    workflow      TEXT COLLATE "C" NOT NULL,
    status        TEXT NOT NULL,
    input         BYTEA,
    output        BYTEA,
    error         TEXT NOT NULL DEFAULT '',
    parent        TEXT COLLATE "C" NOT NULL DEFAULT '',
    lease_owner   TEXT COLLATE "C",
    lease_epoch   BIGINT NOT NULL DEFAULT 0,
    lease_expires BIGINT NOT NULL DEFAULT 0,
    cancel_reason TEXT NOT NULL DEFAULT '',
    restarts      BIGINT NOT NULL DEFAULT 0,
    run           BIGINT NOT NULL DEFAULT 0,
    history_len   BIGINT NOT NULL DEFAULT 0,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);
CREATE INDEX instances_status ON instances (status) WHERE status IN ('running', 'waiting', 'compensating');
CREATE INDEX instances_lease_owner ON instances (lease_owner) WHERE lease_owner IS NOT NULL;

CREATE TABLE history (
    instance_id TEXT COLLATE "C" NOT NULL,
    seq         BIGINT NOT NULL,
    kind        TEXT NOT NULL,
    name        TEXT NOT NULL DEFAULT '',
    ref         TEXT NOT NULL DEFAULT '',
    payload     BYTEA,
    error       TEXT NOT NULL DEFAULT '',
    at          BIGINT NOT NULL,
    PRIMARY KEY (instance_id, seq)
);

-- seq is the store-wide arrival order. It is assigned when a row is inserted,
-- not when its transaction commits, so concurrent transactions may commit
-- seqs out of order; each sender's own messages are still in order.
CREATE TABLE messages (
    seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    msg_id       TEXT NOT NULL,
    channel      TEXT COLLATE "C" NOT NULL DEFAULT '',
    target       TEXT COLLATE "C",
    sender       TEXT NOT NULL DEFAULT '',
    payload      BYTEA,
    metadata     JSONB,
    published_at BIGINT NOT NULL
);
CREATE INDEX messages_target ON messages (target, seq) WHERE target IS NOT NULL;
CREATE INDEX messages_queue ON messages (channel, seq) WHERE target IS NULL;

CREATE TABLE subscriptions (
    instance_id TEXT COLLATE "C" NOT NULL,
    channel     TEXT COLLATE "C" NOT NULL,
    mode        TEXT NOT NULL CHECK (mode IN ('broadcast', 'competing', 'direct')),
    PRIMARY KEY (instance_id, channel)
);
CREATE INDEX subscriptions_channel ON subscriptions (channel, mode);

CREATE TABLE timers (
    instance_id TEXT COLLATE "C" NOT NULL,
    timer_id    TEXT COLLATE "C" NOT NULL,
    due         BIGINT NOT NULL,
    PRIMARY KEY (instance_id, timer_id)
);
CREATE INDEX timers_due ON timers (due);

-- norn_check raises SQLSTATE NR001 with the given message and detail unless
-- ok is true. Steps use it to turn a failed condition (a fenced update, a
-- message already consumed, ...) into an error inside the statement itself,
-- so that a pipelined batch stops at the failing step.
CREATE FUNCTION norn_check(ok boolean, what text, detail text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION USING ERRCODE = 'NR001', MESSAGE = what, DETAIL = detail;
    END IF;
    RETURN true;
END
$$;
