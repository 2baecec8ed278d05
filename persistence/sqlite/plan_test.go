package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// explain returns the opcodes of q's program on the writer connection.
func explain(t *testing.T, st *Store, q string, args ...any) []string {
	t.Helper()
	rows, err := st.w.Query("EXPLAIN "+q, args...)
	if err != nil {
		t.Fatalf("explain %.60s: %v", q, err)
	}
	defer rows.Close()
	var ops []string
	for rows.Next() {
		var addr, p1, p2, p3, p5 int64
		var op string
		var p4, comment any
		if err := rows.Scan(&addr, &op, &p1, &p2, &p3, &p4, &p5, &comment); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, op)
	}
	return ops
}

// The writes that create an instance, change its status or append to it
// build no temporary table: SQLite builds one, on every execution, for an
// IN list of three or more constants, in a statement or in the predicate
// of a partial index the statement must maintain.
func TestInstanceWritesBuildNoTemporaryTable(t *testing.T) {
	st, err := Open(context.Background(), filepath.Join(t.TempDir(), "norn.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, q := range []string{
		`INSERT INTO instances (id, workflow, status, input, created_at, updated_at, bucket) VALUES ('a', 'wf', 'running', x'', 1, 1, 3)`,
		`UPDATE instances SET status = 'completed', lease_owner = NULL WHERE id = 'a' AND ` + liveSQL,
		`UPDATE instances SET status = 'running' WHERE id = 'a' AND ` + liveSQL,
		`UPDATE instances SET history_len = history_len + 1 WHERE id = 'a' AND ` + liveSQL,
	} {
		for _, op := range explain(t, st, q) {
			if op == "OpenEphemeral" {
				t.Errorf("%s: builds a temporary table", strings.Join(strings.Fields(q), " "))
				break
			}
		}
	}
}

// Runnable reads no instance by status (the waiting ones are every
// parked instance): the instances it reads come from instances_unsettled,
// or are looked up by ID from the targets of waiting messages and the
// competing subscribers of queued channels.
func TestRunnableReadsNoParkedInstance(t *testing.T) {
	st, err := Open(context.Background(), filepath.Join(t.TempDir(), "norn.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, buckets := range [][]int{nil, {1, 5}} {
		plan := QueryPlan(t, st.r, runnableSQL(buckets), 0, 10)
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "SEARCH i USING INDEX instances_unsettled") && !strings.Contains(text, "SCAN i USING INDEX instances_unsettled") {
			t.Errorf("buckets %v: plan does not read instances_unsettled:\n%s", buckets, text)
		}
		for _, step := range plan {
			if strings.Contains(step, " i ") && !strings.Contains(step, "instances_unsettled") && !strings.Contains(step, "(id=?)") {
				t.Errorf("buckets %v: plan reads instances by %q:\n%s", buckets, step, text)
			}
		}
	}
}

// A purge batch reads the ended instances from an index by status and
// creation time, and sorts nothing, with or without a status, workflow and
// bucket filter; each of its deletes looks its rows up by an index rather
// than scanning a table.
func TestPurgeReadsByIndex(t *testing.T) {
	st, err := Open(context.Background(), filepath.Join(t.TempDir(), "norn.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	before := time.Now()
	for _, f := range []persistence.PurgeFilter{
		{Before: before},
		{Before: before, Statuses: []persistence.Status{persistence.StatusFailed}},
		{Before: before, Buckets: []int{1, 5}},
		{Before: before, Workflow: "wf", Statuses: []persistence.Status{persistence.StatusFailed, persistence.StatusCancelled}},
	} {
		plan := QueryPlan(t, st.r, purgeSelectSQL(&f), before.UnixNano(), f.Workflow, 10)
		want := "USING INDEX instances_status_created (status=? AND created_at<?)"
		if f.Workflow != "" {
			want = "USING INDEX instances_workflow_status_created (workflow=? AND status=? AND created_at<?)"
		}
		if len(plan) != 1 || !strings.Contains(plan[0], want) {
			t.Errorf("filter %+v: plan %q, want one step %q", f, plan, want)
		}
	}
	// Each delete finds its rows by instance ID: a key or index on it,
	// never a scan, and never an index that leads by status (every ended
	// instance).
	for _, d := range purgeDeletes {
		plan := QueryPlan(t, st.w, d.stmt, `["a"]`)
		if len(plan) == 0 || !strings.HasPrefix(plan[0], "SEARCH ") || strings.Contains(plan[0], "status") ||
			!strings.Contains(plan[0], "(instance_id=?)") && !strings.Contains(plan[0], "(target=?)") &&
				!strings.Contains(plan[0], "(instance=?)") && !strings.Contains(plan[0], "(id=?)") {
			t.Errorf("deleting %s: plan %q does not look rows up by instance", d.what, plan)
		}
	}
}
