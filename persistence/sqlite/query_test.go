package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/querysql"
	"github.com/nornlabs/norn/persistence/internal/rowcodec"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// Every filter combination that ListInstances answers from an index reads
// each branch from that index's range, in order: no scan of the table, and
// no sort of what a branch reads (only of the branches' merged pages,
// whose rows are then read by primary key).
func TestListInstancesPlans(t *testing.T) {
	path := filepath.Join(t.TempDir(), "norn.db")
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	at := time.Unix(1700000000, 0)
	after := &persistence.InstanceKey{CreatedAt: at, ID: "x"}
	two := []persistence.Status{persistence.StatusRunning, persistence.StatusFailed}
	one := []persistence.Status{persistence.StatusFailed}
	for _, c := range []struct {
		q     persistence.InstanceQuery
		index string
	}{
		{persistence.InstanceQuery{}, querysql.IndexCreated},
		{persistence.InstanceQuery{After: after, CreatedAfter: at.Add(-time.Hour), CreatedBefore: at.Add(time.Hour)}, querysql.IndexCreated},
		{persistence.InstanceQuery{CreatedAfter: at.Add(-time.Hour), CreatedBefore: at}, querysql.IndexCreated},
		{persistence.InstanceQuery{After: after, UpdatedAfter: at, Input: map[string]string{"a.b": "1"}}, querysql.IndexCreated},
		{persistence.InstanceQuery{Statuses: one, After: after}, querysql.IndexStatusCreated},
		{persistence.InstanceQuery{Statuses: two, After: after, CreatedBefore: at.Add(time.Hour)}, querysql.IndexStatusCreated},
		{persistence.InstanceQuery{Statuses: two, After: after, CreatedAfter: at.Add(-time.Hour)}, querysql.IndexStatusCreated},
		{persistence.InstanceQuery{Workflow: "w", After: after}, querysql.IndexWorkflowCreated},
		{persistence.InstanceQuery{Workflow: "w", Statuses: one, After: after}, querysql.IndexWorkflowCreated},
		{persistence.InstanceQuery{Workflow: "w", Statuses: two, CreatedAfter: at, Input: map[string]string{"a": "1"}}, querysql.IndexWorkflowCreated},
		{persistence.InstanceQuery{Parent: "p", After: after}, querysql.IndexParentCreated},
		{persistence.InstanceQuery{Parent: "p", Workflow: "w", Statuses: two, After: after}, querysql.IndexParentCreated},
	} {
		stmt, args := querysql.Instances(sqlite.Dialect(), rowcodec.InstanceColumns, c.q)
		plan := sqlite.QueryPlan(t, db, stmt, args...)
		text := strings.Join(plan, "\n")
		searches := 0
		for _, line := range plan {
			switch {
			case strings.HasPrefix(line, "SEARCH instances USING INDEX "+c.index+" "),
				strings.HasPrefix(line, "SEARCH instances USING COVERING INDEX "+c.index+" "),
				line == "SCAN instances USING INDEX "+c.index:
				searches++
				if c.q.After != nil && !strings.Contains(line, "(created_at,id)<(?,?)") {
					t.Errorf("%+v: the page position is not an index bound:\n%s", c.q, text)
				}
				if !c.q.CreatedAfter.IsZero() && !strings.Contains(line, "created_at>") {
					t.Errorf("%+v: CreatedAfter is not an index bound:\n%s", c.q, text)
				}
			case line == "SEARCH instances USING INDEX sqlite_autoindex_instances_1 (id=?)":
				// The page's rows, by primary key, after the branches' keys.
			case strings.Contains(line, "instances"):
				t.Errorf("%+v: reads instances other than through %s:\n%s", c.q, c.index, text)
			}
		}
		branches := max(1, len(c.q.Statuses))
		if c.q.Workflow != "" && len(c.q.Statuses) == 0 {
			branches = len(persistence.Statuses())
		}
		if c.q.Parent != "" {
			branches = 1
		}
		if searches != branches {
			t.Errorf("%+v: %d index reads, want %d:\n%s", c.q, searches, branches, text)
		}
		if branches == 1 && strings.Contains(text, "TEMP B-TREE") {
			t.Errorf("%+v: sorts:\n%s", c.q, text)
		}
	}
}
