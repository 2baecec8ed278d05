package sqlite

import (
	"context"
	"database/sql"
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
		rows, err := tx.Query(claimOutboxSQL, owner, now.Add(ttl).UnixNano(), now.UnixNano(), limit)
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
		r, err := tx.Exec(`UPDATE outbox SET status = ?, next_attempt = ?, error = ?, attempts = attempts + 1,
			claimer = NULL, claim_expires = 0 WHERE id = ? AND claimer = ?`, string(status), ns(next), errText, id, owner)
		if err != nil {
			return fmt.Errorf("sqlite: finish outbox event %s: %w", id, err)
		}
		if n, _ := r.RowsAffected(); n > 0 {
			return nil
		}
		var claimer string
		var expires int64
		err = tx.QueryRow(`SELECT COALESCE(claimer, ''), claim_expires FROM outbox WHERE id = ?`, id).Scan(&claimer, &expires)
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
	// A page of one status: a range of outbox_status. It starts after the
	// row of the event named by after (its time, then its ID); an unknown
	// ID compares as NULL and yields nothing. status is one of the known
	// constants (validated), so it is spelled out in the query.
	page := func(st persistence.OutboxStatus) string {
		q := ` FROM outbox WHERE status = '` + string(st) + `'`
		if after != "" {
			q += ` AND (created_at, id) > (SELECT created_at, id FROM outbox WHERE id = ?1)`
		}
		return q + ` ORDER BY created_at, id LIMIT ?2`
	}
	var q string
	if status != "" {
		q = `SELECT ` + rowcodec.OutboxColumns + page(status)
	} else {
		// One page per status, merged: no index orders the whole table by
		// time, and one for this listing alone would slow every emit.
		q = `SELECT ` + rowcodec.OutboxColumns + ` FROM (`
		for i, st := range outboxStatuses {
			if i > 0 {
				q += ` UNION ALL `
			}
			q += `SELECT * FROM (SELECT *` + page(st) + `)`
		}
		q += `) ORDER BY created_at, id LIMIT ?2`
	}
	rows, err := s.r.QueryContext(ctx, q, after, limit)
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
