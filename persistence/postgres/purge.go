package postgres

import (
	"context"
	"fmt"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/querysql"
)

// purgeWhere selects the instances of a purge filter: $1 the cut-off, $2
// the workflow (with one), $3 the statuses, $4 the buckets (with a bucket
// set). No index holds updated_at (every step changes it, and an indexed
// updated_at would make every step's update a non-HOT one), but an
// instance ends after it was created, so those that ended before the
// cut-off are among those created before it: the query reads them from
// instances_workflow_status_created (see purgeIDs) and checks each one's
// end. The status list repeats the terminal statuses so
// that a live instance is never selected, whatever $3 holds.
func purgeWhere(f *persistence.PurgeFilter) string {
	q := `status IN ('completed', 'failed', 'cancelled') AND status = ANY($3::text[])
		AND created_at < $1::bigint AND updated_at < $1::bigint`
	if f.Workflow != "" {
		q += ` AND workflow = $2::text`
	} else {
		q += ` AND $2::text = ''`
	}
	if f.Buckets != nil {
		q += ` AND bucket = ANY($4::integer[])`
	} else {
		q += ` AND $4::integer[] IS NULL`
	}
	return q
}

// purgeSQL deletes one batch ($5 instances at most) with every row tied to
// them, in one statement and so one transaction. SKIP LOCKED: an instance
// another purge is deleting is left to it. The instances' delivered
// outgoing events go (their pending ones stay, still owed); see
// persistence.Purger.
func purgeSQL(f *persistence.PurgeFilter) string {
	cte, sel := purgeIDs(f, " LIMIT $5::bigint FOR UPDATE SKIP LOCKED")
	with := "WITH "
	if cte != "" {
		with, sel = "WITH RECURSIVE "+cte+", ", sel+" LIMIT $5::bigint"
	}
	return with + `v AS (` + sel + `),
	h AS (DELETE FROM history WHERE instance_id IN (SELECT id FROM v)),
	m AS (DELETE FROM messages WHERE target IN (SELECT id FROM v)),
	t AS (DELETE FROM timers WHERE instance_id IN (SELECT id FROM v)),
	s AS (DELETE FROM subscriptions WHERE instance_id IN (SELECT id FROM v)),
	o AS (DELETE FROM outbox WHERE status <> 'pending' AND instance IN (SELECT id FROM v))
	DELETE FROM instances WHERE id IN (SELECT id FROM v)`
}

// purgeIDs selects the IDs of the instances a purge filter selects; tail
// follows each index range read (a limit and lock, or nothing). With a
// workflow that is its range of instances_workflow_status_created; without
// one, the ranges of every workflow in the store (querysql.Workflows finds
// them) and each status asked for. cte, if not empty, is the recursive
// common table expression sel reads.
func purgeIDs(f *persistence.PurgeFilter, tail string) (cte, sel string) {
	if f.Workflow != "" {
		return "", `SELECT id FROM instances WHERE ` + purgeWhere(f) + tail
	}
	return querysql.Workflows, `SELECT i.id FROM wf CROSS JOIN unnest($3::text[]) AS st(s)
		CROSS JOIN LATERAL (SELECT id FROM instances WHERE workflow = wf.name AND status = st.s AND ` + purgeWhere(f) + tail + `) AS i
		WHERE wf.name IS NOT NULL`
}

// purgeArgs are purgeWhere's arguments for f.
func purgeArgs(f *persistence.PurgeFilter) []any {
	statuses := f.EndedStatuses()
	names := make([]string, len(statuses))
	for i, st := range statuses {
		names[i] = string(st)
	}
	var buckets []int32
	if f.Buckets != nil {
		buckets = bucketArray(f.Buckets)
	}
	return []any{f.Before.UnixNano(), f.Workflow, names, buckets}
}

// PurgeInstances deletes a batch of the ended instances f selects, with
// their rows (see persistence.Purger).
func (s *Store) PurgeInstances(ctx context.Context, f persistence.PurgeFilter) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	if f.Buckets != nil && len(f.Buckets) == 0 {
		return 0, nil
	}
	args := append(purgeArgs(&f), int64(f.BatchLimit()))
	var n int
	err := s.retry(ctx, func() error {
		tag, err := s.pool.Exec(ctx, purgeSQL(&f), args...)
		if err != nil {
			return fmt.Errorf("postgres: purge instances: %w", err)
		}
		n = int(tag.RowsAffected())
		return nil
	})
	return n, err
}

// CountPurgeable counts the ended instances f selects.
func (s *Store) CountPurgeable(ctx context.Context, f persistence.PurgeFilter) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	if f.Buckets != nil && len(f.Buckets) == 0 {
		return 0, nil
	}
	if s.isClosed() {
		return 0, persistence.ErrStoreClosed
	}
	var n int64
	cte, sel := purgeIDs(&f, "")
	if cte != "" {
		cte = "WITH RECURSIVE " + cte + " "
	}
	if err := s.pool.QueryRow(ctx, cte+`SELECT count(*) FROM (`+sel+`) AS c`, purgeArgs(&f)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: count purgeable instances: %w", err)
	}
	return int(n), nil
}
