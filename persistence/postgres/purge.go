package postgres

import (
	"context"
	"fmt"

	"github.com/nornlabs/norn/persistence"
)

// purgeWhere selects the instances of a purge filter: $1 the cut-off, $2
// the workflow (” for any), $3 the statuses, $4 the buckets (NULL for
// every bucket). The status list repeats instances_ended's predicate
// (migration 0011), so that the index serves the cut-off scan.
const purgeWhere = `status IN ('completed', 'failed', 'cancelled') AND updated_at < $1::bigint
	AND status = ANY($3::text[]) AND ($2::text = '' OR workflow = $2::text)
	AND ($4::integer[] IS NULL OR bucket = ANY($4::integer[]))`

// sqlPurge deletes one batch ($5 instances at most) with every row tied to
// them, in one statement and so one transaction. SKIP LOCKED: an instance
// another purge is deleting is left to it. The instances' delivered
// outgoing events go (their pending ones stay, still owed); see
// persistence.Purger.
const sqlPurge = `WITH v AS (
		SELECT id FROM instances WHERE ` + purgeWhere + `
		ORDER BY updated_at LIMIT $5::bigint FOR UPDATE SKIP LOCKED),
	h AS (DELETE FROM history WHERE instance_id IN (SELECT id FROM v)),
	m AS (DELETE FROM messages WHERE target IN (SELECT id FROM v)),
	t AS (DELETE FROM timers WHERE instance_id IN (SELECT id FROM v)),
	s AS (DELETE FROM subscriptions WHERE instance_id IN (SELECT id FROM v)),
	o AS (DELETE FROM outbox WHERE status <> 'pending' AND instance IN (SELECT id FROM v))
	DELETE FROM instances WHERE id IN (SELECT id FROM v)`

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
		tag, err := s.pool.Exec(ctx, sqlPurge, args...)
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
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE `+purgeWhere, purgeArgs(&f)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: count purgeable instances: %w", err)
	}
	return int(n), nil
}
