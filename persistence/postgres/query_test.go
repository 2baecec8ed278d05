package postgres_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/querysql"
	"github.com/nornlabs/norn/persistence/internal/rowcodec"
	"github.com/nornlabs/norn/persistence/postgres"
)

// Over a table large enough that the planner's choice matters, every
// filter combination that ListInstances answers from an index reads each
// branch through an index, never the whole table, and uses that filter's
// index. (PostgreSQL's estimates decide each branch's plan: where it
// expects few rows it reads them through a bitmap and sorts them, and
// where a filter selects a large share of the table it may read the
// creation-time index in order and filter as it goes; a bitmap may also
// combine the filter's index with another. All stay bounded.)
func TestListInstancesPlans(t *testing.T) {
	conn := schemaConn(t)
	// 200,000 instances over ten workflows, nine in ten of them completed
	// (a status filter selects few of the rest), a tenth of them children
	// of a thousand parents.
	if _, err := conn.Exec(bg, `INSERT INTO instances (id, workflow, status, input, parent, created_at, updated_at, bucket)
		SELECT 'i-' || g, 'wf-' || (g % 10), CASE g % 50 WHEN 0 THEN 'running' WHEN 1 THEN 'failed' WHEN 2 THEN 'waiting'
				WHEN 3 THEN 'compensating' WHEN 4 THEN 'cancelled' ELSE 'completed' END,
			convert_to('{"n":' || g || '}', 'UTF8'), CASE WHEN g % 10 = 3 THEN 'p-' || (g % 1000) ELSE '' END,
			1700000000000000000 + g * 1000000000::bigint, 1700000000000000000 + g * 1000000000::bigint, g % 1024
		FROM generate_series(1, 200000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(bg, `ANALYZE instances`); err != nil {
		t.Fatal(err)
	}
	at := time.Unix(0, 1700000000000000000+100000*int64(time.Second))
	after := &persistence.InstanceKey{CreatedAt: at, ID: "i-100000"}
	two := []persistence.Status{persistence.StatusRunning, persistence.StatusFailed}
	one := []persistence.Status{persistence.StatusFailed}
	var workflows []string // the store's, as ListInstances reads them
	for i := range 10 {
		workflows = append(workflows, fmt.Sprintf("wf-%d", i))
	}
	for _, c := range []struct {
		q     persistence.InstanceQuery
		index string
	}{
		{persistence.InstanceQuery{}, querysql.IndexWorkflowCreated},
		{persistence.InstanceQuery{After: after, CreatedAfter: at.Add(-time.Hour)}, querysql.IndexWorkflowCreated},
		{persistence.InstanceQuery{After: after, UpdatedAfter: at.Add(-time.Hour), Input: map[string]string{"n": "1"}}, querysql.IndexWorkflowCreated},
		{persistence.InstanceQuery{Statuses: one, After: after}, querysql.IndexWorkflowCreated},
		{persistence.InstanceQuery{Statuses: two, After: after, CreatedBefore: at.Add(time.Hour)}, querysql.IndexWorkflowCreated},
		{persistence.InstanceQuery{Workflow: "wf-3", After: after}, querysql.IndexWorkflowCreated},
		{persistence.InstanceQuery{Workflow: "wf-3", Statuses: one, After: after}, querysql.IndexWorkflowCreated},
		{persistence.InstanceQuery{Workflow: "wf-3", Statuses: two, CreatedAfter: at, Input: map[string]string{"n": "1"}}, querysql.IndexWorkflowCreated},
		{persistence.InstanceQuery{Parent: "p-3", After: after}, querysql.IndexParentCreated},
		{persistence.InstanceQuery{Parent: "p-3", Workflow: "wf-3", Statuses: two}, querysql.IndexParentCreated},
	} {
		// ListInstances runs the generic plan; the plan for the values at
		// hand must be as bounded.
		for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
			if _, err := conn.Exec(bg, "SET plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			checkListPlan(t, conn, c.q, c.index, workflows, mode)
		}
	}
	if _, err := conn.Exec(bg, "RESET plan_cache_mode"); err != nil {
		t.Fatal(err)
	}

	// The other queries by status without a workflow read the same index
	// workflow by workflow, a range of one workflow at a time and never
	// the table's 200,000 rows: a purge of 100 (run, then rolled back; a
	// bitmap may read a workflow's whole range of about 9,000 ended
	// instances) and the live counts (12,000 live instances, 400 per
	// workflow and status).
	purge, purgeArgs := postgres.PurgeSQL(persistence.PurgeFilter{Before: at, Limit: 100})
	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{
		{"purge", purge, purgeArgs},
		{"live counts", postgres.StatsInstancesSQL, nil},
	} {
		// Generic plans too: the retention loop purges again and again.
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			tx, err := conn.Begin(bg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(bg, "SET LOCAL plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			plan := explainPrepared(t, tx, "(ANALYZE, FORMAT JSON)", c.sql, c.args)
			_ = tx.Rollback(bg)
			read := maxRowsHandled(plan)
			seq := regexp.MustCompile(`"Node Type": "Seq Scan",[^}]*"Relation Name": "instances"`).MatchString(plan)
			if read > 20000 || seq || !strings.Contains(plan, querysql.IndexWorkflowCreated) {
				t.Errorf("%s (%s): a plan node handled %d rows; want at most 20,000, read from %s:\n%s",
					c.name, mode, read, querysql.IndexWorkflowCreated, plan)
			}
		}
	}
}

// The mode checks of a subscribe and of a direct send read one subscriber
// of the channel, however many it has: a broadcast channel joined by
// 20,000 instances must not cost each new subscriber a walk past all the
// others (nor every direct send on a channel with many direct
// subscribers).
func TestModeChecksReadOneSubscriber(t *testing.T) {
	conn := schemaConn(t)
	// Another channel's rows first: a scan of the table meets them.
	if _, err := conn.Exec(bg, `INSERT INTO subscriptions (instance_id, channel, mode)
		SELECT 'o-' || g, 'other', 'broadcast' FROM generate_series(1, 4000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(bg, `INSERT INTO subscriptions (instance_id, channel, mode)
		SELECT 'i-' || g, CASE WHEN g % 2 = 0 THEN 'news' ELSE 'calls' END, CASE WHEN g % 2 = 0 THEN 'broadcast' ELSE 'direct' END
		FROM generate_series(1, 4000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(bg, `ANALYZE subscriptions`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{
		{"subscribe", postgres.ModeCheckSQL.Subscribe, []any{"news", "i-new", "broadcast"}},
		{"direct send", postgres.ModeCheckSQL.Direct, []any{"calls"}},
	} {
		var plan string
		if err := conn.QueryRow(bg, "EXPLAIN (ANALYZE, FORMAT JSON) "+c.sql, c.args...).Scan(&plan); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		read := maxRowsHandled(plan)
		if read > 1 {
			t.Errorf("%s: a plan node handled %d rows for a check that needs one subscriber:\n%s", c.name, read, plan)
		}
	}
}

// The recovery pass (Runnable) costs what needs an activation, not the
// parked instances: over 100,000 passivated instances, all subscribed to
// one broadcast channel, no plan node handles more rows than the few
// instances that need one, and those are found: running without a lease,
// waiting under a lease that ran out, waiting with a cancel request, with
// mail (a backlog of many messages counts once), and a competing
// subscriber of a channel with queued messages.
func TestRunnableReadsNoParkedInstance(t *testing.T) {
	url := testutil.PostgresURL(t)
	st := openURL(t, url, postgres.Options{})
	conn, err := pgx.Connect(bg, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(bg) })
	if _, err := conn.Exec(bg, `SET search_path TO norn`); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO instances (id, workflow, status, created_at, updated_at, bucket)
			SELECT 'p-' || g, 'wf', 'waiting', g, g, g % 1024 FROM generate_series(1, 100000) g`,
		`INSERT INTO subscriptions (instance_id, channel, mode) SELECT 'p-' || g, 'news', 'broadcast' FROM generate_series(1, 100000) g`,
		`INSERT INTO instances (id, workflow, status, lease_owner, lease_epoch, lease_expires, cancel_reason, created_at, updated_at, bucket) VALUES
			('running', 'wf', 'running', NULL, 1, 0, '', 1, 1, 1),
			('expired', 'wf', 'waiting', 'gone', 1, 1, '', 1, 1, 1),
			('held', 'wf', 'waiting', 'live', 1, 9000000000000000000, '', 1, 1, 1),
			('cancel', 'wf', 'waiting', NULL, 1, 0, 'why', 1, 1, 1),
			('mail', 'wf', 'waiting', NULL, 1, 0, '', 1, 1, 1),
			('consumer', 'wf', 'waiting', NULL, 1, 0, '', 1, 1, 1)`,
		`INSERT INTO subscriptions (instance_id, channel, mode) VALUES ('consumer', 'jobs', 'competing')`,
		`INSERT INTO messages (msg_id, target, published_at) SELECT 'm-' || g, 'mail', 1 FROM generate_series(1, 1000) g`,
		`INSERT INTO messages (msg_id, target, published_at) VALUES ('h', 'held', 1)`,
		`INSERT INTO messages (msg_id, channel, published_at) SELECT 'j-' || g, 'jobs', 1 FROM generate_series(1, 1000) g`,
		`ANALYZE`,
	} {
		if _, err := conn.Exec(bg, q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	ids, err := st.Runnable(bg, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if want := "[cancel consumer expired mail running]"; fmt.Sprint(ids) != want {
		t.Errorf("runnable = %v, want %s", ids, want)
	}
	var plan string
	if err := conn.QueryRow(bg, "EXPLAIN (ANALYZE, FORMAT JSON) "+postgres.RunnableSQL, int64(1000)).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	read := maxRowsHandled(plan)
	if read > 10 {
		t.Errorf("a plan node handled %d rows, for 5 instances to find:\n%s", read, plan)
	}
}

// schemaConn connects to a new migrated database, with Norn's schema as
// search_path, for tests that write rows and read plans themselves.
func schemaConn(t *testing.T) *pgx.Conn {
	t.Helper()
	url := testutil.PostgresURL(t)
	openURL(t, url, postgres.Options{}) // migrates
	conn, err := pgx.Connect(bg, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(bg) })
	if _, err := conn.Exec(bg, `SET search_path = norn`); err != nil {
		t.Fatal(err)
	}
	return conn
}

// An input filter works in a query the server would run in parallel:
// norn_input_json opens a subtransaction to catch a bad input, which a
// parallel query refuses, so the function must keep such queries serial.
func TestInputFilterUnderParallelPlans(t *testing.T) {
	conn := schemaConn(t)
	if _, err := conn.Exec(bg, `INSERT INTO instances (id, workflow, status, input, created_at, updated_at)
		SELECT 'i-' || g, 'wf', 'completed', CASE WHEN g % 7 = 0 THEN '\xff'::bytea ELSE convert_to('{"n":' || (g % 10) || '}', 'UTF8') END, g, g
		FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	for _, set := range []string{"parallel_setup_cost = 0", "parallel_tuple_cost = 0", "min_parallel_table_scan_size = 0",
		"min_parallel_index_scan_size = 0", "max_parallel_workers_per_gather = 2", "enable_indexscan = off", "enable_bitmapscan = off"} {
		if _, err := conn.Exec(bg, "SET "+set); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := conn.QueryRow(bg, `SELECT count(*) FROM instances WHERE norn_input_json(input) #>> '{n}' = '3'`).Scan(&n); err != nil {
		t.Fatalf("input filter: %v", err)
	}
	if want := 20000/10 - 20000/70; n < want-1 || n > want+1 {
		t.Errorf("input filter matched %d instances, want about %d", n, want)
	}
}

// The driver's connections run without JIT compilation (unless the URL
// turns it on): its statements are short, and compiling one would take
// longer than running it.
func TestConnectionsRunWithoutJIT(t *testing.T) {
	st := openURL(t, testutil.PostgresURL(t), postgres.Options{})
	var jit string
	if err := st.Pool().QueryRow(bg, `SHOW jit`).Scan(&jit); err != nil {
		t.Fatal(err)
	}
	if jit != "off" {
		t.Errorf("jit = %s on the store's connections, want off", jit)
	}
}

// maxRowsHandled is the most rows any node of a JSON EXPLAIN ANALYZE plan
// returned or dropped (by its filter or an index recheck), per loop.
func maxRowsHandled(plan string) int {
	read := 0
	for _, key := range []string{`"Actual Rows": `, `"Rows Removed by Filter": `, `"Rows Removed by Index Recheck": `} {
		for _, part := range strings.Split(plan, key)[1:] {
			var n int
			if _, err := fmt.Sscan(strings.TrimLeft(part, " "), &n); err == nil {
				read = max(read, n)
			}
		}
	}
	return read
}

// checkListPlan checks that ListInstances' statement for q reads each of
// its branches through an index, and nothing by a sequential scan.
func checkListPlan(t *testing.T, conn *pgx.Conn, q persistence.InstanceQuery, index string, workflows []string, mode string) {
	t.Helper()
	stmt, args := querysql.Instances(postgres.Dialect(), rowcodec.InstanceColumns, q, workflows...)
	text := explainPrepared(t, conn, "", stmt, args)
	scans := strings.Count(text, "Index Scan Backward using ") + strings.Count(text, "Index Only Scan Backward using ") +
		strings.Count(text, "Bitmap Heap Scan on ")
	uses := strings.Contains(text, " "+index+" ")
	branches := max(1, len(q.Statuses))
	if q.Parent == "" && len(q.Statuses) == 0 {
		branches = len(persistence.Statuses())
	}
	if q.Parent != "" {
		branches = 1
	}
	if q.Parent == "" && q.Workflow == "" {
		branches *= len(workflows) // one range per workflow and status
	}
	if strings.Contains(text, "Seq Scan") || scans != branches || !uses {
		t.Errorf("%+v (%s): %d branches read through an index, want %d, using %s, and no sequential scan:\n%s",
			q, mode, scans, branches, index, text)
	}
	// A page reads about the page from each range: the running instances
	// (4,000 of them, out of index by workflow and status) are read from
	// the index of unsettled instances by workflow, newest first, not all
	// read and sorted. (A filter on the rows' other columns may read
	// whole ranges.)
	if q.Input != nil || !q.UpdatedAfter.IsZero() || !q.UpdatedBefore.IsZero() {
		return
	}
	if read := maxRowsHandled(explainPrepared(t, conn, "(ANALYZE, FORMAT JSON)", stmt, args)); read > 1000 {
		t.Errorf("%+v (%s): a plan node handled %d rows, want at most 1,000\n%s", q, mode, read, explainPrepared(t, conn, "(ANALYZE)", stmt, args))
	}
}

// explainPrepared prepares stmt and explains (with options, such as
// "(ANALYZE, FORMAT JSON)") its execution with args: unlike EXPLAIN of a
// statement with parameters, which plans it for their values, EXPLAIN
// EXECUTE follows plan_cache_mode, so that a test can see the generic
// plan that a statement run again and again ends up with.
func explainPrepared(t *testing.T, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, options, stmt string, args []any) string {
	t.Helper()
	if _, err := db.Exec(bg, "PREPARE explained AS "+stmt); err != nil {
		t.Fatalf("prepare: %v\n%s", err, stmt)
	}
	defer func() {
		if _, err := db.Exec(bg, "DEALLOCATE explained"); err != nil {
			t.Fatal(err)
		}
	}()
	vals := make([]string, len(args))
	for i, a := range args {
		vals[i] = sqlLiteral(t, a)
	}
	exec := "EXECUTE explained"
	if len(vals) > 0 {
		exec += "(" + strings.Join(vals, ", ") + ")"
	}
	rows, err := db.Query(bg, "EXPLAIN "+options+" "+exec)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, stmt)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, stmt)
	}
	return strings.Join(plan, "\n")
}

// sqlLiteral writes a statement argument as SQL.
func sqlLiteral(t *testing.T, v any) string {
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	switch v := v.(type) {
	case int64:
		return fmt.Sprint(v)
	case string:
		return quote(v)
	case []byte:
		return fmt.Sprintf("'\\x%x'::bytea", v)
	case []string:
		if v == nil {
			return "NULL::text[]"
		}
		q := make([]string, len(v))
		for i, s := range v {
			q[i] = quote(s)
		}
		return "ARRAY[" + strings.Join(q, ", ") + "]::text[]"
	case []int32:
		if v == nil {
			return "NULL::integer[]"
		}
		return "ARRAY[" + strings.Trim(strings.Join(strings.Fields(fmt.Sprint(v)), ", "), "[]") + "]::integer[]"
	}
	t.Fatalf("no SQL literal for %T", v)
	return ""
}
