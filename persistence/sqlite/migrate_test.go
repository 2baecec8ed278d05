package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
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
		`INSERT INTO subscriptions (instance_id, channel, mode) VALUES ('old', 'news', 'broadcast')`,
		`INSERT INTO timers (instance_id, timer_id, due) VALUES ('old', 't1', 9)`,
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
	// An old instance holds what it held before the migration: its end
	// deletes its subscriptions and timers.
	if _, err := st.Apply(ctx, persistence.Step{Instance: "old", Epoch: 3, Status: persistence.StatusCompleted,
		History: []persistence.Event{{Seq: 3, Kind: "completed"}}}); err != nil {
		t.Fatal(err)
	}
	if subs, err := st.Subscriptions(ctx, "old"); err != nil || len(subs) != 0 {
		t.Fatalf("subscriptions of the ended old instance = %+v, %v", subs, err)
	}
	if ts, err := st.DueTimers(ctx, time.Now(), nil, 0); err != nil || len(ts) != 0 {
		t.Fatalf("timers of the ended old instance = %+v, %v", ts, err)
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

// A database of release 0004 (before buckets) gets every instance's and
// timer's bucket filled in by Open, in several chunks, and bucket sets then
// select its old rows.
func TestMigrateFillsBuckets(t *testing.T) {
	const n = 1500 // more than one chunk
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	stmts := []string{`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`}
	files, _ := filepath.Glob(filepath.Join("migrations", "*.sql"))
	for i, f := range files {
		if filepath.Base(f) >= "0005" {
			break
		}
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, string(body), fmt.Sprintf(`INSERT INTO schema_migrations (version, applied_at) VALUES (%d, 1)`, i+1))
	}
	stmts = append(stmts,
		fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < %d)
			INSERT INTO instances (id, workflow, status, history_len, created_at, updated_at)
			SELECT 'old-' || i, 'wf', 'running', 0, i, i FROM n`, n-1),
		fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < %d)
			INSERT INTO timers (instance_id, timer_id, due) SELECT 'old-' || i, 'sleep', 1000 + i FROM n`, n-1),
		// Timers left behind by an instance that is gone.
		`INSERT INTO timers (instance_id, timer_id, due) VALUES ('gone', 'sleep', 1), ('gone', 'retry', 2)`)
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkBuckets(t, path, n+2)
	// The old rows are in their buckets.
	b := persistence.BucketOf("old-7")
	var want []string
	for i := 0; i < n; i++ {
		if id := fmt.Sprintf("old-%d", i); persistence.BucketOf(id) == b {
			want = append(want, id)
		}
	}
	sort.Strings(want)
	ids, err := st.Runnable(ctx, []int{b}, 0)
	sort.Strings(ids)
	if err != nil || fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("runnable in bucket %d = %v, %v; want %v", b, ids, err, want)
	}
	set := map[int]bool{b: true, persistence.BucketOf("gone"): true}
	want = []string{"gone", "gone"}
	for i := 0; i < n; i++ {
		if id := fmt.Sprintf("old-%d", i); set[persistence.BucketOf(id)] {
			want = append(want, id)
		}
	}
	ts, err := st.DueTimers(ctx, time.Unix(0, 1e9), []int{b, persistence.BucketOf("gone")}, 0)
	var got []string
	for _, t := range ts {
		got = append(got, t.Instance)
	}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("due timers in buckets of old-7 and gone = %v, %v; want %v", got, err, want)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// Rows that a process of the old release writes meanwhile (bucket -1)
	// are filled in by the next Open.
	db, err = sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{`UPDATE instances SET bucket = -1 WHERE id IN ('old-1', 'old-2')`, `UPDATE timers SET bucket = -1 WHERE instance_id = 'old-3'`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	st, err = sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	checkBuckets(t, path, n+2)
}

// checkBuckets checks that every instance and timer in the database at
// path is in its instance's bucket, and that there are timers timers.
func checkBuckets(t *testing.T, path string, timers int) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{`SELECT id, bucket FROM instances`, `SELECT instance_id, bucket FROM timers`} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			var b int
			if err := rows.Scan(&id, &b); err != nil {
				t.Fatal(err)
			}
			if b != persistence.BucketOf(id) {
				t.Fatalf("%s: %s has bucket %d, want %d", q, id, b, persistence.BucketOf(id))
			}
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			t.Fatal(err)
		}
	}
	var got int
	if err := db.QueryRow(`SELECT count(*) FROM timers`).Scan(&got); err != nil || got != timers {
		t.Fatalf("timers = %d, %v; want %d", got, err, timers)
	}
}

// A database of release 0005 gets migration 0006 even when it already
// lists as many versions as this build has migrations (here from a build
// with later migrations): Open checks for each version, not a
// count. Events that ended before the migration count as ended at it.
func TestMigrateOutboxFinished(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	stmts := []string{`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`}
	files, _ := filepath.Glob(filepath.Join("migrations", "*.sql"))
	sort.Strings(files)
	for i, f := range files {
		if filepath.Base(f) >= "0006" {
			break
		}
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, string(body), fmt.Sprintf(`INSERT INTO schema_migrations (version, applied_at) VALUES (%d, 1)`, i+1))
	}
	// Versions of later migrations, as many as this build has in all.
	for i := range files {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO schema_migrations (version, applied_at) VALUES (%d, 1)`, 1000+i))
	}
	stmts = append(stmts,
		`INSERT INTO outbox (id, type, created_at, status, attempts, next_attempt) VALUES ('old-sent', 't', 1, 'sent', 1, 0)`,
		`INSERT INTO outbox (id, type, created_at, status, attempts, next_attempt) VALUES ('old-pending', 't', 2, 'pending', 0, 2)`)
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Truncate(time.Second) // the migration reads whole seconds
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recs, err := st.ListOutbox(ctx, "", "", 0)
	if err != nil || len(recs) != 2 {
		t.Fatalf("outbox = %+v, %v", recs, err)
	}
	for _, r := range recs {
		switch r.ID {
		case "old-sent":
			if r.Finished.Before(before) || r.Finished.After(time.Now()) {
				t.Errorf("old sent event finished at %v, want at the migration (after %v)", r.Finished, before)
			}
		case "old-pending":
			if !r.Finished.IsZero() {
				t.Errorf("old pending event finished at %v", r.Finished)
			}
		}
	}
	// Kept for now; pruned once the cut-off passes the migration.
	if n, err := st.PruneOutbox(ctx, before, 0); err != nil || n != 0 {
		t.Fatalf("prune before the migration = %d, %v", n, err)
	}
	if n, err := st.PruneOutbox(ctx, time.Now().Add(time.Second), 0); err != nil || n != 1 {
		t.Fatalf("prune after the migration = %d, %v; want 1", n, err)
	}
}

// Every step sets an instance's updated_at: an index holding it would be
// rewritten on every step. The instance indexes hold only columns that
// change at activation, passivation and the end.
func TestNoInstanceIndexHoldsUpdatedAt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "norn.db")
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT il.name, ii.name FROM pragma_index_list('instances') il, pragma_index_info(il.name) ii`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var index, column string
		if err := rows.Scan(&index, &column); err != nil {
			t.Fatal(err)
		}
		n++
		if column == "updated_at" {
			t.Errorf("index %s holds updated_at", index)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no instance index read")
	}
	// One index of the live instances: each such index is one more entry
	// to rewrite at every status change.
	var live []string
	rows, err = db.Query(`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'instances' AND sql LIKE '%running%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		live = append(live, name)
	}
	if len(live) != 1 || live[0] != "instances_unsettled" {
		t.Errorf("indexes of the live instances = %v, want [instances_unsettled]", live)
	}
}
