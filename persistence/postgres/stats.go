package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/querysql"
)

var _ persistence.StatsReader = (*Store)(nil)

// Stats counts the live instances by workflow and status (one range of
// instances_workflow_status_created per workflow and live status, and the
// running ones from instances_unsettled, so ended instances cost nothing),
// the pending timers and the waiting messages.
func (s *Store) Stats(ctx context.Context) (persistence.Stats, error) {
	var st persistence.Stats
	counts, err := s.instanceCounts(ctx, sqlStatsInstances)
	if err != nil {
		return st, fmt.Errorf("postgres: stats: %w", err)
	}
	st.Instances = counts
	var timers, mailbox, queued, maxMailbox int64
	if err := s.pool.QueryRow(ctx, sqlStatsCounts).Scan(&timers, &mailbox, &queued, &maxMailbox); err != nil {
		return st, fmt.Errorf("postgres: stats: %w", err)
	}
	st.Timers, st.Mailbox, st.Queued, st.MaxMailbox = int(timers), int(mailbox), int(queued), int(maxMailbox)
	return st, nil
}

const (
	// Each status is a literal: instances_workflow_status_created leaves
	// running instances out (they are counted from instances_unsettled),
	// and a partial index is used only where constants imply its
	// condition.
	sqlStatsInstances = `WITH RECURSIVE ` + querysql.Workflows + `
		SELECT wf.name, c.s, c.n FROM wf CROSS JOIN LATERAL (
			SELECT 'compensating' AS s, COUNT(*) AS n FROM instances WHERE workflow = wf.name AND status = 'compensating'
			UNION ALL SELECT 'running', COUNT(*) FROM instances WHERE workflow = wf.name AND status = 'running'
			UNION ALL SELECT 'waiting', COUNT(*) FROM instances WHERE workflow = wf.name AND status = 'waiting') AS c
		WHERE wf.name IS NOT NULL AND c.n > 0 ORDER BY wf.name, c.s`
	sqlStatsCounts = `SELECT (SELECT COUNT(*) FROM timers),
		(SELECT COUNT(*) FROM messages WHERE target IS NOT NULL),
		(SELECT COUNT(*) FROM messages WHERE target IS NULL),
		(SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM messages WHERE target IS NOT NULL GROUP BY target) AS m)`
)

// CountInstances counts the instances by workflow and status, from the
// index instances_workflow_status_created (an index-only scan once the
// table is vacuumed).
func (s *Store) CountInstances(ctx context.Context) ([]persistence.InstanceCount, error) {
	out, err := s.instanceCounts(ctx, sqlCountInstances)
	if err != nil {
		return nil, fmt.Errorf("postgres: count instances: %w", err)
	}
	return out, nil
}

// instanceCounts runs a query of (workflow, status, count) rows.
func (s *Store) instanceCounts(ctx context.Context, query string) ([]persistence.InstanceCount, error) {
	rows, _ := s.pool.Query(ctx, query)
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (persistence.InstanceCount, error) {
		var c persistence.InstanceCount
		var status string
		var n int64
		err := row.Scan(&c.Workflow, &status, &n)
		c.Status, c.Count = persistence.Status(status), int(n)
		return c, err
	})
}

const sqlCountInstances = `SELECT workflow, status, COUNT(*) FROM instances GROUP BY workflow, status ORDER BY workflow, status`
