package sqlite

import (
	"context"
	"fmt"

	"github.com/nornlabs/norn/persistence"
)

var _ persistence.StatsReader = (*Store)(nil)

// Stats counts the live instances by workflow and status (through the
// partial index on live statuses, so ended instances cost nothing), the
// pending timers and the waiting messages.
func (s *Store) Stats(ctx context.Context) (persistence.Stats, error) {
	var st persistence.Stats
	rows, err := s.r.QueryContext(ctx, sqlStatsInstances)
	if err != nil {
		return st, fmt.Errorf("sqlite: stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c persistence.InstanceCount
		if err := rows.Scan(&c.Workflow, &c.Status, &c.Count); err != nil {
			return st, fmt.Errorf("sqlite: stats: %w", err)
		}
		st.Instances = append(st.Instances, c)
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("sqlite: stats: %w", err)
	}
	if err := s.r.QueryRowContext(ctx, sqlStatsCounts).Scan(&st.Timers, &st.Mailbox, &st.Queued, &st.MaxMailbox); err != nil {
		return st, fmt.Errorf("sqlite: stats: %w", err)
	}
	return st, nil
}

const (
	sqlStatsInstances = `SELECT workflow, status, COUNT(*) FROM instances
		WHERE ` + livePredicate + ` GROUP BY workflow, status ORDER BY workflow, status`
	sqlStatsCounts = `SELECT (SELECT COUNT(*) FROM timers),
		(SELECT COUNT(*) FROM messages WHERE target IS NOT NULL),
		(SELECT COUNT(*) FROM messages WHERE target IS NULL),
		(SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM messages WHERE target IS NOT NULL GROUP BY target))`
)

// CountInstances counts the instances by workflow and status. The GROUP BY
// reads the index instances_workflow_status_created, which covers both
// columns in that order, so no row of the table is read and no sort is
// needed.
func (s *Store) CountInstances(ctx context.Context) ([]persistence.InstanceCount, error) {
	rows, err := s.r.QueryContext(ctx, sqlCountInstances)
	if err != nil {
		return nil, fmt.Errorf("sqlite: count instances: %w", err)
	}
	defer rows.Close()
	var out []persistence.InstanceCount
	for rows.Next() {
		var c persistence.InstanceCount
		if err := rows.Scan(&c.Workflow, &c.Status, &c.Count); err != nil {
			return nil, fmt.Errorf("sqlite: count instances: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: count instances: %w", err)
	}
	return out, nil
}

const sqlCountInstances = `SELECT workflow, status, COUNT(*) FROM instances INDEXED BY instances_workflow_status_created
	GROUP BY workflow, status ORDER BY workflow, status`
