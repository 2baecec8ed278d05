package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// A database made by a release that had only migration 0001 upgrades on
// Open, and its rows read as before, with the new fields empty.
func TestMigrateFromFirstSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	core, err := os.ReadFile(filepath.Join("migrations", "0001_core.sql"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixNano()
	for _, q := range []string{
		string(core),
		`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`,
		`INSERT INTO schema_migrations (version, applied_at) VALUES (1, 1)`,
		`INSERT INTO instances (id, workflow, status, input, lease_owner, lease_epoch, lease_expires, restarts, history_len, created_at, updated_at)
			VALUES ('old', 'wf', 'running', x'7b7d', 'node', 3, 0, 2, 2, 1, 1)`,
		`INSERT INTO history (instance_id, seq, kind, name, ref, payload, at) VALUES ('old', 0, 'started', 'wf', '', x'7b7d', 1)`,
		`INSERT INTO history (instance_id, seq, kind, name, ref, payload, at) VALUES ('old', 1, 'activity', 'charge', 'a1', NULL, 2)`,
		`INSERT INTO messages (msg_id, channel, target, sender, payload, metadata, published_at)
			VALUES ('m1', '', 'old', 'someone', x'31', '{"k":"v"}', 5)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	in, err := st.Instance(ctx, "old")
	if err != nil || in.Workflow != "wf" || in.Restarts != 2 || in.HistoryLen != 2 || in.LeaseEpoch != 3 || in.RecentRestarts != nil {
		t.Fatalf("old instance = %+v, %v", in, err)
	}
	h, err := st.History(ctx, "old", 0)
	if err != nil || len(h) != 2 || h[1].Name != "charge" || h[1].Digest != "" {
		t.Fatalf("old history = %+v, %v", h, err)
	}
	ms, err := st.Mailbox(ctx, "old", 0)
	if err != nil || len(ms) != 1 || ms[0].ID != "m1" || ms[0].Type != "" || ms[0].Metadata["k"] != "v" || string(ms[0].Payload) != "1" {
		t.Fatalf("old mailbox = %+v, %v", ms, err)
	}

	// The new columns and table work on the old rows.
	restart := time.Unix(0, now)
	res, err := st.Apply(ctx, persistence.Step{Instance: "old", Epoch: 3, IncRestarts: true, RestartLog: []time.Time{restart},
		History: []persistence.Event{{Seq: 2, Kind: "activity", Digest: "d"}},
		Send:    []persistence.NewMessage{{ID: "m2", Target: "old", Type: "T", Dedupe: true}},
		Emit:    []persistence.OutboxEvent{{ID: "ev", Instance: "old", Type: "E"}}})
	if err != nil || len(res.Duplicates) != 0 {
		t.Fatalf("step on old instance = %+v, %v", res, err)
	}
	in, _ = st.Instance(ctx, "old")
	if in.Restarts != 3 || len(in.RecentRestarts) != 1 || !in.RecentRestarts[0].Equal(restart) {
		t.Fatalf("old instance after step = %+v", in)
	}
	if h, _ := st.History(ctx, "old", 2); len(h) != 1 || h[0].Digest != "d" {
		t.Fatalf("history = %+v", h)
	}
	if ms, _ := st.Mailbox(ctx, "old", 0); len(ms) != 2 || ms[1].Type != "T" {
		t.Fatalf("mailbox = %+v", ms)
	}
	if evs, err := st.ListOutbox(ctx, "", "", 0); err != nil || len(evs) != 1 || evs[0].Instance != "old" || evs[0].Type != "E" {
		t.Fatalf("outbox = %+v, %v", evs, err)
	}
	var versions int
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Every migration the driver ships is applied, not only the one after 0001.
	files, _ := filepath.Glob(filepath.Join("migrations", "*.sql"))
	if err := db.QueryRow(`SELECT count(*) FROM schema_migrations`).Scan(&versions); err != nil || versions != len(files) {
		t.Fatalf("schema_migrations rows = %d, %v", versions, err)
	}
	// Opening again finds nothing to do.
	st2, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st2.Close()
}
