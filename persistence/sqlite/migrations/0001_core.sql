CREATE TABLE instances (
    id            TEXT PRIMARY KEY,
    workflow      TEXT NOT NULL,
    status        TEXT NOT NULL,
    input         BLOB,
    output        BLOB,
    error         TEXT NOT NULL DEFAULT '',
    parent        TEXT NOT NULL DEFAULT '',
    lease_owner   TEXT,
    lease_epoch   INTEGER NOT NULL DEFAULT 0,
    lease_expires INTEGER NOT NULL DEFAULT 0,
    cancel_reason TEXT NOT NULL DEFAULT '',
    restarts      INTEGER NOT NULL DEFAULT 0,
    run           INTEGER NOT NULL DEFAULT 0,
    history_len   INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE INDEX instances_status ON instances(status) WHERE status IN ('running', 'waiting', 'compensating');
CREATE INDEX instances_lease_owner ON instances(lease_owner) WHERE lease_owner IS NOT NULL;

CREATE TABLE history (
    instance_id TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    name        TEXT NOT NULL DEFAULT '',
    ref         TEXT NOT NULL DEFAULT '',
    payload     BLOB,
    error       TEXT NOT NULL DEFAULT '',
    at          INTEGER NOT NULL,
    PRIMARY KEY (instance_id, seq)
) WITHOUT ROWID;

CREATE TABLE messages (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    msg_id       TEXT NOT NULL,
    channel      TEXT NOT NULL DEFAULT '',
    target       TEXT,
    sender       TEXT NOT NULL DEFAULT '',
    payload      BLOB,
    metadata     TEXT,
    published_at INTEGER NOT NULL
);
CREATE INDEX messages_target ON messages(target, seq) WHERE target IS NOT NULL;
CREATE INDEX messages_queue ON messages(channel, seq) WHERE target IS NULL;

CREATE TABLE subscriptions (
    instance_id TEXT NOT NULL,
    channel     TEXT NOT NULL,
    mode        TEXT NOT NULL,
    PRIMARY KEY (instance_id, channel)
) WITHOUT ROWID;
CREATE INDEX subscriptions_channel ON subscriptions(channel, mode);

CREATE TABLE timers (
    instance_id TEXT NOT NULL,
    timer_id    TEXT NOT NULL,
    due         INTEGER NOT NULL,
    PRIMARY KEY (instance_id, timer_id)
) WITHOUT ROWID;
CREATE INDEX timers_due ON timers(due);
