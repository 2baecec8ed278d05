package postgres

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/querysql"
)

// dialect is how ListInstances' statements are written for PostgreSQL.
// The input is BYTEA: norn_input_json (migration 0007) reads it as jsonb,
// or NULL if it is not JSON, and #>> gives a field as text (a string's
// value, another scalar's JSON text, NULL for null). Migrations 0013 and
// 0016 dropped the (created_at, id) and (status, created_at, id) indexes:
// a listing without a workflow reads instances_workflow_status_created
// workflow by workflow. Migration 0018 left running instances out of it:
// a workflow's running instances are read from instances_unsettled, by
// workflow, status and creation time.
func dialect() querysql.Dialect {
	return querysql.Dialect{
		Param: func(n int) string { return "$" + strconv.Itoa(n) },
		InputMatch: func(path, value string) string {
			return "norn_input_json(input) #>> " + path + "::text[] = " + value + "::text"
		},
		PathArg:          func(path []string) any { return path },
		Contains:         func(value string) string { return "position(" + value + "::bytea in input) > 0" },
		StatusByWorkflow: true,
		StatusLiterals:   true,
	}
}

// sqlWorkflows lists the workflows the store holds instances of.
const sqlWorkflows = `WITH RECURSIVE ` + querysql.Workflows + ` SELECT name FROM wf WHERE name IS NOT NULL`

// ListInstances reads a page of the instances q selects, newest first.
func (s *Store) ListInstances(ctx context.Context, q persistence.InstanceQuery) ([]persistence.Instance, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	var workflows []string
	if q.Workflow == "" && q.Parent == "" {
		rows, _ := s.pool.Query(ctx, sqlWorkflows)
		var err error
		if workflows, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return nil, fmt.Errorf("postgres: list instances: %w", err)
		}
		if len(workflows) == 0 {
			return nil, nil
		}
	}
	stmt, args := querysql.Instances(dialect(), instanceCols, q, workflows...)
	// With the generic plan from the first call: a listing without a
	// workflow merges a range per workflow and status, and planning that
	// for each call's values cost more than reading the page (about 6 ms
	// over ten workflows), while the generic plan reads the same ranges.
	var out []persistence.Instance
	err := s.readTx(ctx, func(b *pgx.Batch) {
		b.Queue(sqlGenericPlans)
		b.Queue(stmt, args...)
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, _ := br.Query()
		var err error
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (persistence.Instance, error) { return scanInstance(row) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list instances: %w", err)
	}
	return out, nil
}

// HistoryRange reads up to limit events from seq fromSeq on.
func (s *Store) HistoryRange(ctx context.Context, id string, fromSeq int64, limit int) ([]persistence.Event, error) {
	if err := persistence.ValidateID("id", id); err != nil {
		return nil, err
	}
	var lim *int64 // NULL: no limit
	if limit > 0 {
		l := int64(limit)
		lim = &l
	}
	rows, _ := s.pool.Query(ctx, `SELECT seq, kind, name, ref, payload, error, digest, at FROM history
		WHERE instance_id = $1::text AND seq >= $2::bigint ORDER BY seq LIMIT $3::bigint`, id, fromSeq, lim)
	out, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("postgres: read history %s: %w", id, err)
	}
	return out, nil
}

// Timers lists an instance's pending timers, earliest first.
func (s *Store) Timers(ctx context.Context, id string) ([]persistence.Timer, error) {
	if err := persistence.ValidateID("id", id); err != nil {
		return nil, err
	}
	rows, _ := s.pool.Query(ctx, `SELECT timer_id, due FROM timers WHERE instance_id = $1::text ORDER BY due, timer_id`, id)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (persistence.Timer, error) {
		t := persistence.Timer{Instance: id}
		var due int64
		err := row.Scan(&t.ID, &due)
		t.Due = fromNS(due)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: read timers %s: %w", id, err)
	}
	return out, nil
}
