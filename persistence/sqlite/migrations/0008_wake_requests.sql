-- Wake-ups that a client process (one that runs no instances, such as the
-- norn command) asks the nodes sharing the file to act on: SQLite has no
-- notifications between processes, so nodes poll this table from the last
-- sequence number they saw. Rows are deleted after a few minutes.
CREATE TABLE wake_requests (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
