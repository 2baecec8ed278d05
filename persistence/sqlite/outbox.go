package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/rowcodec"
)

var _ persistence.Outbox = (*Store)(nil)

// claimOutboxSQL claims due, unclaimed (or no longer claimed) events: ?1
// owner, ?2 claim expiry, ?3 now, ?4 limit. INDEXED BY: without statistics
// the planner prefers outbox_status (an equality on status), which holds
// every event ever sent and would make each claim sort all pending ones;
// outbox_due gives the oldest due events in order and stops at the limit.
const claimOutboxSQL = `UPDATE outbox SET claimer = ?1, claim_expires = ?2
	WHERE id IN (SELECT id FROM outbox INDEXED BY outbox_due
		WHERE status = 'pending' AND next_attempt <= ?3 AND (claimer IS NULL OR claim_expires <= ?3)
		ORDER BY next_attempt, id LIMIT ?4)
	RETURNING ` + rowcodec.OutboxColumns

// ClaimOutbox claims due events for owner. It is one write request, so the
// writer's transaction (and SQLite's write lock, between processes) makes
// the read and the claim one act: a concurrent claimer, here or in another
// process, sees the claim.
func (s *Store) ClaimOutbox(ctx context.Context, owner string, now time.Time, ttl time.Duration, limit int) ([]persistence.OutboxRecord, error) {
	if err := persistence.ValidateOutboxClaim(owner, ttl); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = persistence.DefaultClaimLimit
	}
	var out []persistence.OutboxRecord
	// Not simple: the update is done before its first row is read back, so
	// a failure while reading comes after writing.
	err := s.write(ctx, false, func(tx *sql.Tx) error {
		out = out[:0]
		rows, err := s.stmt(tx, s.ob.claim).Query(owner, now.Add(ttl).UnixNano(), now.UnixNano(), limit)
		if err != nil {
			return fmt.Errorf("sqlite: claim outbox: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			r, err := rowcodec.ScanOutbox(rows)
			if err != nil {
				return fmt.Errorf("sqlite: claim outbox: %w", err)
			}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("sqlite: claim outbox: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// RETURNING gives rows in no defined order.
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Next.Equal(out[j].Next) {
			return out[i].Next.Before(out[j].Next)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// FinishOutbox records the outcome of owner's attempt to send event id.
func (s *Store) FinishOutbox(ctx context.Context, id, owner string, status persistence.OutboxStatus, next time.Time, errText string) error {
	if err := persistence.ValidateOutboxFinish(id, owner, status, errText); err != nil {
		return err
	}
	return s.write(ctx, true, func(tx *sql.Tx) error {
		r, err := s.stmt(tx, s.ob.finish).Exec(string(status), ns(next), errText, id, owner, time.Now().UnixNano())
		if err != nil {
			return fmt.Errorf("sqlite: finish outbox event %s: %w", id, err)
		}
		if n, _ := r.RowsAffected(); n > 0 {
			return nil
		}
		var claimer string
		var expires int64
		err = s.stmt(tx, s.ob.claimer).QueryRow(id).Scan(&claimer, &expires)
		return notClaimed(id, owner, claimer, fromNS(expires), err)
	})
}

// notClaimed is FinishOutbox's error for an event that owner does not
// hold, saying who does (from a read of its claimer, or the read's error).
func notClaimed(id, owner, claimer string, expires time.Time, readErr error) error {
	switch {
	case errors.Is(readErr, sql.ErrNoRows):
		return fmt.Errorf("%w: no outbox event %s", persistence.ErrLeaseHeld, id)
	case readErr != nil:
		return fmt.Errorf("sqlite: finish outbox event %s: %w", id, readErr)
	case claimer == "":
		return fmt.Errorf("%w: outbox event %s is not claimed by %s nor anyone", persistence.ErrLeaseHeld, id, owner)
	}
	return fmt.Errorf("%w: outbox event %s claimed by %s until %s", persistence.ErrLeaseHeld, id, claimer, expires.Format(time.RFC3339Nano))
}

// ReleaseOutbox gives back owner's claims on ids without counting an
// attempt.
func (s *Store) ReleaseOutbox(ctx context.Context, owner string, ids []string) (int, error) {
	if err := persistence.ValidateOutboxRelease(owner, ids); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return 0, fmt.Errorf("sqlite: release outbox events: %w", err)
	}
	var n int64
	err = s.write(ctx, true, func(tx *sql.Tx) error {
		r, err := s.stmt(tx, s.ob.release).Exec(owner, string(list))
		if err == nil {
			n, err = r.RowsAffected()
		}
		if err != nil {
			return fmt.Errorf("sqlite: release outbox events: %w", err)
		}
		return nil
	})
	return int(n), err
}

// PruneOutbox deletes up to limit events whose delivery ended before t,
// in one write request.
func (s *Store) PruneOutbox(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		limit = persistence.DefaultPruneLimit
	}
	var n int64
	err := s.write(ctx, true, func(tx *sql.Tx) error {
		r, err := s.stmt(tx, s.ob.prune).Exec(before.UnixNano(), limit)
		if err == nil {
			n, err = r.RowsAffected()
		}
		if err != nil {
			return fmt.Errorf("sqlite: prune outbox: %w", err)
		}
		return nil
	})
	return int(n), err
}

// outboxStmts are the outbox's prepared statements: claim, finish, release
// and prune on the writer's connection, the listings on the read pool.
type outboxStmts struct {
	claim, finish, claimer, release, prune *sql.Stmt
	list                                   map[listKey]*sql.Stmt
}

// listKey selects one of ListOutbox's statements: a status ("" for all)
// and whether a page starts after an event.
type listKey struct {
	status persistence.OutboxStatus
	after  bool
}

func (o *outboxStmts) prepare(ctx context.Context, w, r *sql.DB) error {
	pw := &preparer{ctx: ctx, db: w}
	o.claim = pw.prep(claimOutboxSQL)
	o.finish = pw.prep(`UPDATE outbox SET status = ?1, next_attempt = ?2, error = ?3, attempts = attempts + 1,
		claimer = NULL, claim_expires = 0, finished_at = CASE WHEN ?1 = 'pending' THEN 0 ELSE ?6 END
		WHERE id = ?4 AND claimer = ?5`)
	o.claimer = pw.prep(`SELECT COALESCE(claimer, ''), claim_expires FROM outbox WHERE id = ?`)
	// ?1 owner, ?2 the IDs as a JSON array.
	o.release = pw.prep(`UPDATE outbox SET claimer = NULL, claim_expires = 0
		WHERE claimer = ?1 AND status = 'pending' AND id IN (SELECT value FROM json_each(?2))`)
	// ?1 before, ?2 limit. The WHERE repeats outbox_finished's predicate
	// word for word, so that the index serves it.
	o.prune = pw.prep(`DELETE FROM outbox WHERE id IN (SELECT id FROM outbox INDEXED BY outbox_finished
		WHERE status <> 'pending' AND finished_at < ?1 ORDER BY finished_at LIMIT ?2)`)
	pr := &preparer{ctx: ctx, db: r}
	o.list = map[listKey]*sql.Stmt{}
	for _, st := range append([]persistence.OutboxStatus{""}, outboxStatuses...) {
		for _, after := range []bool{false, true} {
			o.list[listKey{st, after}] = pr.prep(listOutboxSQL(st, after))
		}
	}
	return errors.Join(pw.err, pr.err)
}

func (o *outboxStmts) close() {
	closeStmts(o.claim, o.finish, o.claimer, o.release, o.prune)
	for _, st := range o.list {
		closeStmts(st)
	}
}

// listOutboxSQL is ListOutbox's query for a status ("" for all), with or
// without a page cursor: ?1 the event the page starts after, ?2 the limit.
func listOutboxSQL(status persistence.OutboxStatus, after bool) string {
	// A page of one status: a range of outbox_status. It starts after the
	// row of the event named by ?1 (its time, then its ID); an unknown ID
	// compares as NULL and yields nothing. status is one of the known
	// constants, so it is spelled out in the query.
	page := func(st persistence.OutboxStatus) string {
		q := ` FROM outbox WHERE status = '` + string(st) + `'`
		if after {
			q += ` AND (created_at, id) > (SELECT created_at, id FROM outbox WHERE id = ?1)`
		}
		return q + ` ORDER BY created_at, id LIMIT ?2`
	}
	if status != "" {
		return `SELECT ` + rowcodec.OutboxColumns + page(status)
	}
	// One page per status, merged: no index orders the whole table by
	// time, and one for this listing alone would slow every emit.
	q := `SELECT ` + rowcodec.OutboxColumns + ` FROM (`
	for i, st := range outboxStatuses {
		if i > 0 {
			q += ` UNION ALL `
		}
		q += `SELECT * FROM (SELECT *` + page(st) + `)`
	}
	return q + `) ORDER BY created_at, id LIMIT ?2`
}

// outboxStatuses are the statuses a listing of every status reads.
var outboxStatuses = []persistence.OutboxStatus{persistence.OutboxPending, persistence.OutboxSent, persistence.OutboxInvalid, persistence.OutboxExpired}

// ListOutbox lists events in a status (all if empty), oldest first.
func (s *Store) ListOutbox(ctx context.Context, status persistence.OutboxStatus, after string, limit int) ([]persistence.OutboxRecord, error) {
	if err := persistence.ValidateOutboxList(status, after); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = persistence.DefaultListLimit
	}
	rows, err := s.ob.list[listKey{status, after != ""}].QueryContext(ctx, after, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list outbox: %w", err)
	}
	defer rows.Close()
	var out []persistence.OutboxRecord
	for rows.Next() {
		r, err := rowcodec.ScanOutbox(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list outbox: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
