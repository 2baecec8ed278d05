package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nornlabs/norn/persistence"
)

// endedPredicate is word for word the predicate of the partial index
// instances_ended (migration 0014): SQLite uses a partial index only for a
// query that repeats its predicate.
const endedPredicate = `(status = 'completed' OR status = 'failed' OR status = 'cancelled')`

// purgeWhere is the condition that selects f's instances, with the cut-off
// as ?1 and the workflow (if any) as ?2. Statuses and buckets are
// validated constants and integers, written into the text.
func purgeWhere(f *persistence.PurgeFilter) string {
	var b strings.Builder
	b.WriteString(endedPredicate + ` AND updated_at < ?1`)
	if len(f.Statuses) > 0 {
		b.WriteString(` AND status IN (`)
		for i, st := range f.Statuses {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`'` + string(st) + `'`)
		}
		b.WriteByte(')')
	}
	if f.Workflow != "" {
		b.WriteString(` AND workflow = ?2`)
	}
	b.WriteString(bucketFilter(f.Buckets))
	return b.String()
}

// purgeArgs are purgeWhere's arguments.
func purgeArgs(f *persistence.PurgeFilter) []any {
	if f.Workflow == "" {
		return []any{f.Before.UnixNano()}
	}
	return []any{f.Before.UnixNano(), f.Workflow}
}

// purgeDeletes delete an instance's rows, the instances named by ?1 (a
// JSON array of IDs); the instances' own rows go last. They run in the
// write transaction that selected the instances as ended, and SQLite has
// one writer: nothing can have changed them in between. (A status
// condition here would lead SQLite to read the status index, every ended
// instance, rather than the primary key.)
var purgeDeletes = []struct{ what, stmt string }{
	{"history", `DELETE FROM history WHERE instance_id IN (SELECT value FROM json_each(?1))`},
	{"mail", `DELETE FROM messages WHERE target IN (SELECT value FROM json_each(?1))`},
	{"timers", `DELETE FROM timers WHERE instance_id IN (SELECT value FROM json_each(?1))`},
	{"subscriptions", `DELETE FROM subscriptions WHERE instance_id IN (SELECT value FROM json_each(?1))`},
	// The WHERE repeats outbox_instance_done's predicate word for word.
	{"outgoing events", `DELETE FROM outbox WHERE status <> 'pending' AND instance IN (SELECT value FROM json_each(?1))`},
	{"instances", `DELETE FROM instances WHERE id IN (SELECT value FROM json_each(?1))`},
}

// PurgeInstances deletes a batch of the ended instances f selects, with
// their rows, in one write request (see persistence.Purger).
func (s *Store) PurgeInstances(ctx context.Context, f persistence.PurgeFilter) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	if f.Buckets != nil && len(f.Buckets) == 0 {
		return 0, nil
	}
	sel := purgeSelectSQL(&f)
	// ?3 is the highest placeholder, so the statement takes three
	// arguments whether or not ?2 appears.
	args := []any{f.Before.UnixNano(), f.Workflow, f.BatchLimit()}
	var n int64
	err := s.write(ctx, false, func(tx *sql.Tx) error {
		n = 0
		ids, err := purgeVictims(tx, sel, args)
		if err != nil || len(ids) == 0 {
			return err
		}
		list, err := json.Marshal(ids)
		if err != nil {
			return fmt.Errorf("sqlite: purge instances: %w", err)
		}
		for _, d := range purgeDeletes {
			r, err := tx.Exec(d.stmt, string(list))
			if err != nil {
				return fmt.Errorf("sqlite: purge instances: delete %s: %w", d.what, err)
			}
			if d.what == "instances" {
				if n, err = r.RowsAffected(); err != nil {
					return fmt.Errorf("sqlite: purge instances: %w", err)
				}
			}
		}
		return nil
	})
	return int(n), err
}

// purgeSelectSQL reads a batch's IDs: ?1 the cut-off, ?2 the workflow, ?3
// the limit.
// INDEXED BY: without statistics SQLite prefers the status index (one
// range per ended status, then a sort of every ended instance), which
// reads the whole history of the store to delete a batch.
func purgeSelectSQL(f *persistence.PurgeFilter) string {
	return `SELECT id FROM instances INDEXED BY instances_ended WHERE ` + purgeWhere(f) + ` ORDER BY updated_at LIMIT ?3`
}

// purgeVictims reads the IDs a purge batch deletes, in its transaction.
func purgeVictims(tx *sql.Tx, sel string, args []any) ([]string, error) {
	rows, err := tx.Query(sel, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: purge instances: select: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqlite: purge instances: select: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: purge instances: select: %w", err)
	}
	return ids, nil
}

// CountPurgeable counts the ended instances f selects.
func (s *Store) CountPurgeable(ctx context.Context, f persistence.PurgeFilter) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	if f.Buckets != nil && len(f.Buckets) == 0 {
		return 0, nil
	}
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM instances INDEXED BY instances_ended WHERE `+purgeWhere(&f), purgeArgs(&f)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: count purgeable instances: %w", err)
	}
	return n, nil
}
