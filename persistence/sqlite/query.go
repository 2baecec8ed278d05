package sqlite

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/querysql"
	"github.com/nornlabs/norn/persistence/internal/rowcodec"
)

// dialect is how ListInstances' statements are written for SQLite. Each
// branch names its index: without statistics the planner may prefer the
// index that yields the ORDER BY and filter the rest, which reads the whole
// table for a rare workflow.
func dialect() querysql.Dialect {
	return querysql.Dialect{
		Param: func(n int) string { return "?" + strconv.Itoa(n) },
		Hint:  func(index string) string { return " INDEXED BY " + index },
		// The input is a BLOB: read as text, and only if it is valid JSON (an
		// invalid one would fail the statement). A JSON string compares by its
		// value, other scalars by their JSON text; null never matches.
		InputMatch: func(path, value string) string {
			doc := "(CASE WHEN json_valid(CAST(input AS TEXT)) THEN CAST(input AS TEXT) END)"
			return "(CASE json_type(" + doc + ", " + path + ") WHEN 'text' THEN json_extract(" + doc + ", " + path + ")" +
				" WHEN 'null' THEN NULL ELSE " + doc + " -> " + path + " END) = " + value
		},
		Contains: func(value string) string { return "instr(input, " + value + ") > 0" },
		PathArg: func(path []string) any {
			var b strings.Builder
			b.WriteByte('$')
			for _, seg := range path {
				b.WriteString(`."`)
				b.WriteString(strings.ReplaceAll(seg, `"`, `\"`))
				b.WriteByte('"')
			}
			return b.String()
		},
	}
}

// ListInstances reads a page of the instances q selects, newest first.
func (s *Store) ListInstances(ctx context.Context, q persistence.InstanceQuery) ([]persistence.Instance, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	stmt, args := querysql.Instances(dialect(), rowcodec.InstanceColumns, q)
	rows, err := s.r.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list instances: %w", err)
	}
	defer rows.Close()
	var out []persistence.Instance
	for rows.Next() {
		in, err := scanInstance(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list instances: %w", err)
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list instances: %w", err)
	}
	return out, nil
}

// HistoryRange reads up to limit events from seq fromSeq on.
func (s *Store) HistoryRange(ctx context.Context, id string, fromSeq int64, limit int) ([]persistence.Event, error) {
	if err := persistence.ValidateID("id", id); err != nil {
		return nil, err
	}
	lim := int64(limit)
	if limit <= 0 {
		lim = -1 // SQLite: no limit
	}
	rows, err := s.rst.history.QueryContext(ctx, id, fromSeq, lim)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read history %s: %w", id, err)
	}
	return scanEvents(rows, id)
}

// Timers lists an instance's pending timers, earliest first.
func (s *Store) Timers(ctx context.Context, id string) ([]persistence.Timer, error) {
	if err := persistence.ValidateID("id", id); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT timer_id, due FROM timers WHERE instance_id = ? ORDER BY due, timer_id`, id)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read timers %s: %w", id, err)
	}
	defer rows.Close()
	var out []persistence.Timer
	for rows.Next() {
		t := persistence.Timer{Instance: id}
		var due int64
		if err := rows.Scan(&t.ID, &due); err != nil {
			return nil, fmt.Errorf("sqlite: read timers %s: %w", id, err)
		}
		t.Due = fromNS(due)
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: read timers %s: %w", id, err)
	}
	return out, nil
}
