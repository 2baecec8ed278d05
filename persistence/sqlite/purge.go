package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nornlabs/norn/persistence"
)

// purgeWhere is the condition that selects f's instances, with the cut-off
// as ?1 and the workflow (if any) as ?2, read from an index of instances
// by status and creation time: instances_workflow_status_created with a
// workflow, else instances_status_created. No index holds updated_at
// (every step changes it), but an instance ends after it was created, so
// those that ended before the cut-off are among those created before it:
// the scan reads the ended instances created before the cut-off, one
// status after the other, and checks each one's end. Those it passes over
// (created before the cut-off, ended after it) are the long-lived ones,
// few in most stores. Statuses and buckets are validated constants and
// integers, written into the text.
func purgeWhere(f *persistence.PurgeFilter) string {
	var b strings.Builder
	if f.Workflow != "" {
		b.WriteString(`INDEXED BY instances_workflow_status_created WHERE workflow = ?2 AND `)
	} else {
		b.WriteString(`INDEXED BY instances_status_created WHERE `)
	}
	b.WriteString(`status IN (`)
	for i, st := range f.EndedStatuses() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`'` + string(st) + `'`)
	}
	b.WriteString(`) AND created_at < ?1 AND updated_at < ?1`)
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
	// Look on the read pool first: a node's retention loop finds nothing
	// to purge most of the time, and that must cost no write transaction
	// (the one writer's time, an fsync).
	var found int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM (`+sel+`)`, f.Before.UnixNano(), f.Workflow, 1).Scan(&found); err != nil {
		return 0, fmt.Errorf("sqlite: purge instances: %w", err)
	}
	if found == 0 {
		return 0, nil
	}
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
// the limit. No ORDER BY: in index order (by status, then creation) the
// scan stops at the limit, where any other order would read and sort
// every candidate first.
func purgeSelectSQL(f *persistence.PurgeFilter) string {
	return `SELECT id FROM instances ` + purgeWhere(f) + ` LIMIT ?3`
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
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM instances `+purgeWhere(&f), purgeArgs(&f)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: count purgeable instances: %w", err)
	}
	return n, nil
}
