package postgres_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
)

// A schema made by a release that had only migration 0001 upgrades on Open,
// and its rows read as before, with the new fields empty.
func TestMigrateFromFirstSchema(t *testing.T) {
	url := testutil.PostgresURL(t)
	core, err := os.ReadFile(filepath.Join("migrations", "0001_core.sql"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(bg, url)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE SCHEMA norn`,
		`SET search_path TO norn`,
		string(core),
		`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`,
		`INSERT INTO schema_migrations (version, applied_at) VALUES (1, 1)`,
		`INSERT INTO instances (id, workflow, status, input, lease_owner, lease_epoch, lease_expires, restarts, history_len, created_at, updated_at)
			VALUES ('old', 'wf', 'running', '\x7b7d', 'node', 3, 0, 2, 2, 1, 1)`,
		`INSERT INTO history (instance_id, seq, kind, name, ref, payload, at) VALUES ('old', 0, 'started', 'wf', '', '\x7b7d', 1)`,
		`INSERT INTO history (instance_id, seq, kind, name, ref, payload, at) VALUES ('old', 1, 'activity', 'charge', 'a1', NULL, 2)`,
		`INSERT INTO messages (msg_id, channel, target, sender, payload, metadata, published_at)
			VALUES ('m1', '', 'old', 'someone', '\x31', '{"k":"v"}', 5)`,
	} {
		if _, err := conn.Exec(bg, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	conn.Close(bg)

	st := openURL(t, url, postgres.Options{})
	in, err := st.Instance(bg, "old")
	if err != nil || in.Workflow != "wf" || in.Restarts != 2 || in.HistoryLen != 2 || in.LeaseEpoch != 3 || in.RecentRestarts != nil {
		t.Fatalf("old instance = %+v, %v", in, err)
	}
	h, err := st.History(bg, "old", 0)
	if err != nil || len(h) != 2 || h[1].Name != "charge" || h[1].Digest != "" {
		t.Fatalf("old history = %+v, %v", h, err)
	}
	ms, err := st.Mailbox(bg, "old", 0)
	if err != nil || len(ms) != 1 || ms[0].ID != "m1" || ms[0].Type != "" || ms[0].Metadata["k"] != "v" || string(ms[0].Payload) != "1" {
		t.Fatalf("old mailbox = %+v, %v", ms, err)
	}

	// The new columns and table work on the old rows.
	restart := time.Unix(0, time.Now().UnixNano())
	res, err := st.Apply(bg, persistence.Step{Instance: "old", Epoch: 3, IncRestarts: true, RestartLog: []time.Time{restart},
		History: []persistence.Event{{Seq: 2, Kind: "activity", Digest: "d"}},
		Send:    []persistence.NewMessage{{ID: "m2", Target: "old", Type: "T", Dedupe: true}},
		Emit:    []persistence.OutboxEvent{{ID: "ev", Instance: "old", Type: "E"}}})
	if err != nil || len(res.Duplicates) != 0 {
		t.Fatalf("step on old instance = %+v, %v", res, err)
	}
	in, _ = st.Instance(bg, "old")
	if in.Restarts != 3 || len(in.RecentRestarts) != 1 || !in.RecentRestarts[0].Equal(restart) {
		t.Fatalf("old instance after step = %+v", in)
	}
	if h, _ := st.History(bg, "old", 2); len(h) != 1 || h[0].Digest != "d" {
		t.Fatalf("history = %+v", h)
	}
	if ms, _ := st.Mailbox(bg, "old", 0); len(ms) != 2 || ms[1].Type != "T" {
		t.Fatalf("mailbox = %+v", ms)
	}
	if evs, err := st.ListOutbox(bg, "", "", 0); err != nil || len(evs) != 1 || evs[0].Instance != "old" || evs[0].Type != "E" {
		t.Fatalf("outbox = %+v, %v", evs, err)
	}
	var versions int
	// Every migration the driver ships is applied, not only the one after 0001.
	files, _ := filepath.Glob(filepath.Join("migrations", "*.sql"))
	if err := st.Pool().QueryRow(bg, `SELECT count(*) FROM schema_migrations`).Scan(&versions); err != nil || versions != len(files) {
		t.Fatalf("schema_migrations rows = %d, %v", versions, err)
	}
}

// A schema of release 0004 (before buckets) gets every instance's and
// timer's bucket filled in by Open, in several chunks, and bucket sets then
// select its old rows.
func TestMigrateFillsBuckets(t *testing.T) {
	const n = 1500 // more than one chunk
	url := testutil.PostgresURL(t)
	conn, err := pgx.Connect(bg, url)
	if err != nil {
		t.Fatal(err)
	}
	stmts := []string{`CREATE SCHEMA norn`, `SET search_path TO norn`,
		`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`}
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
		fmt.Sprintf(`INSERT INTO instances (id, workflow, status, history_len, created_at, updated_at)
			SELECT 'old-' || i, 'wf', 'running', 0, i, i FROM generate_series(0, %d) AS i`, n-1),
		fmt.Sprintf(`INSERT INTO timers (instance_id, timer_id, due) SELECT 'old-' || i, 'sleep', 1000 + i FROM generate_series(0, %d) AS i`, n-1),
		// Timers left behind by an instance that is gone.
		`INSERT INTO timers (instance_id, timer_id, due) VALUES ('gone', 'sleep', 1), ('gone', 'retry', 2)`)
	for _, q := range stmts {
		if _, err := conn.Exec(bg, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	conn.Close(bg)

	st := openURL(t, url, postgres.Options{})
	checkBuckets(t, st, n+2)
	b := persistence.BucketOf("old-7")
	var want []string
	for i := 0; i < n; i++ {
		if id := fmt.Sprintf("old-%d", i); persistence.BucketOf(id) == b {
			want = append(want, id)
		}
	}
	sort.Strings(want)
	ids, err := st.Runnable(bg, []int{b}, 0)
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
	ts, err := st.DueTimers(bg, time.Unix(0, 1e9), []int{b, persistence.BucketOf("gone")}, 0)
	var got []string
	for _, t := range ts {
		got = append(got, t.Instance)
	}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("due timers in buckets of old-7 and gone = %v, %v; want %v", got, err, want)
	}

	// Rows that a process of the old release writes meanwhile (bucket -1)
	// are filled in by the next Open.
	for _, q := range []string{`UPDATE instances SET bucket = -1 WHERE id IN ('old-1', 'old-2')`,
		`UPDATE timers SET bucket = -1 WHERE instance_id = 'old-3'`} {
		if _, err := st.Pool().Exec(bg, q); err != nil {
			t.Fatal(err)
		}
	}
	checkBuckets(t, openURL(t, url, postgres.Options{}), n+2)
}

// checkBuckets checks that every instance and timer in st's schema is in its
// instance's bucket, and that there are timers timers.
func checkBuckets(t *testing.T, st *postgres.Store, timers int) {
	t.Helper()
	for _, q := range []string{`SELECT id, bucket FROM instances`, `SELECT instance_id, bucket FROM timers`} {
		rows, _ := st.Pool().Query(bg, q)
		var id string
		var b int32
		_, err := pgx.ForEachRow(rows, []any{&id, &b}, func() error {
			if int(b) != persistence.BucketOf(id) {
				return fmt.Errorf("%s has bucket %d, want %d", id, b, persistence.BucketOf(id))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var got int
	if err := st.Pool().QueryRow(bg, `SELECT count(*) FROM timers`).Scan(&got); err != nil || got != timers {
		t.Fatalf("timers = %d, %v; want %d", got, err, timers)
	}
}

// A schema of release 0005 gets migration 0006 even when it already lists
// as many versions as this build has migrations (here from a build with
// later migrations): Open checks for each version, not a count.
// Events that ended before the migration count as ended at it.
func TestMigrateOutboxFinished(t *testing.T) {
	url := testutil.PostgresURL(t)
	conn, err := pgx.Connect(bg, url)
	if err != nil {
		t.Fatal(err)
	}
	stmts := []string{`CREATE SCHEMA norn`, `SET search_path TO norn`,
		`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`}
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
		if _, err := conn.Exec(bg, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	conn.Close(bg)

	before := time.Now().Add(-time.Minute) // the server's clock, which may differ a little
	st := openURL(t, url, postgres.Options{})
	recs, err := st.ListOutbox(bg, "", "", 0)
	if err != nil || len(recs) != 2 {
		t.Fatalf("outbox = %+v, %v", recs, err)
	}
	for _, r := range recs {
		switch r.ID {
		case "old-sent":
			if r.Finished.Before(before) || r.Finished.After(time.Now().Add(time.Minute)) {
				t.Errorf("old sent event finished at %v, want at the migration (about now)", r.Finished)
			}
		case "old-pending":
			if !r.Finished.IsZero() {
				t.Errorf("old pending event finished at %v", r.Finished)
			}
		}
	}
	if n, err := st.PruneOutbox(bg, before, 0); err != nil || n != 0 {
		t.Fatalf("prune before the migration = %d, %v", n, err)
	}
	if n, err := st.PruneOutbox(bg, time.Now().Add(time.Hour), 0); err != nil || n != 1 {
		t.Fatalf("prune after the migration = %d, %v; want 1", n, err)
	}
}

// Every step sets an instance's updated_at: an index holding it (as a key
// or in its predicate) would make every step's UPDATE a non-HOT update,
// which writes an entry into each of the table's indexes.
func TestNoInstanceIndexHoldsUpdatedAt(t *testing.T) {
	url := testutil.PostgresURL(t)
	openURL(t, url, postgres.Options{})
	conn, err := pgx.Connect(bg, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(bg)
	var indexes int
	var holding []string
	rows, err := conn.Query(bg, `SELECT i.indexrelid::regclass::text,
			EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attname = 'updated_at'
				AND (a.attnum = ANY (i.indkey) OR coalesce(pg_get_expr(i.indpred, i.indrelid), '') LIKE '%updated_at%'))
		FROM pg_index i WHERE i.indrelid = 'norn.instances'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		var holds bool
		if err := rows.Scan(&name, &holds); err != nil {
			t.Fatal(err)
		}
		indexes++
		if holds {
			holding = append(holding, name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if indexes == 0 || len(holding) > 0 {
		t.Fatalf("%d instance indexes; holding updated_at: %v", indexes, holding)
	}
	// One index of the live instances: each such index is one more entry
	// to write at every status change. The index by workflow and status
	// leaves running instances out: a spawn's running entry there would be
	// dead by its first park or its end.
	var live []string
	rows, err = conn.Query(bg, `SELECT i.indexrelid::regclass::text FROM pg_index i
		WHERE i.indrelid = 'norn.instances'::regclass AND pg_get_expr(i.indpred, i.indrelid) LIKE '%running%'
			AND pg_get_expr(i.indpred, i.indrelid) NOT LIKE '%<> ''running''%'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		live = append(live, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(live) != 1 || live[0] != "norn.instances_unsettled" {
		t.Errorf("indexes of the live instances = %v, want [norn.instances_unsettled]", live)
	}
	var pred string
	if err := conn.QueryRow(bg, `SELECT coalesce(pg_get_expr(i.indpred, i.indrelid), '') FROM pg_index i
		WHERE i.indexrelid = 'norn.instances_workflow_status_created'::regclass`).Scan(&pred); err != nil {
		t.Fatal(err)
	}
	if pred != "(status <> 'running'::text)" {
		t.Errorf("instances_workflow_status_created holds %q, want the instances that are not running", pred)
	}
}
