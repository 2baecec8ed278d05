package sqlite

import (
	"database/sql"
	"sync"
	"testing"

	"github.com/nornlabs/norn/persistence"
)

// Dialect is the SQL dialect of ListInstances, for the plan tests.
var Dialect = dialect

// CommitLog records the size of every commit (Options.Commits).
type CommitLog struct {
	mu    sync.Mutex
	steps []int
}

func (l *CommitLog) ObserveCommit(ci persistence.CommitInfo) {
	l.mu.Lock()
	l.steps = append(l.steps, ci.Steps)
	l.mu.Unlock()
}

// Sizes lists the commits' step counts so far, oldest first.
func (l *CommitLog) Sizes() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.steps...)
}

// QueryPlan returns the detail lines of EXPLAIN QUERY PLAN of q.
func QueryPlan(tb testing.TB, db *sql.DB, q string, args ...any) []string {
	tb.Helper()
	rows, err := db.Query("EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		tb.Fatalf("query plan of %.60s: %v", q, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			tb.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return plan
}
