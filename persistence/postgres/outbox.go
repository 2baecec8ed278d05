package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/rowcodec"
)

var _ persistence.Outbox = (*Store)(nil)

// ClaimOutbox claims due events for owner, in one statement (see
// sqlClaimOutbox for why concurrent claimers never share an event).
func (s *Store) ClaimOutbox(ctx context.Context, owner string, now time.Time, ttl time.Duration, limit int) ([]persistence.OutboxRecord, error) {
	if err := persistence.ValidateOutboxClaim(owner, ttl); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = persistence.DefaultClaimLimit
	}
	var out []persistence.OutboxRecord
	err := s.retry(ctx, func() error {
		rows, _ := s.pool.Query(ctx, sqlClaimOutbox, owner, now.Add(ttl).UnixNano(), now.UnixNano(), int64(limit))
		var err error
		out, err = pgx.CollectRows(rows, scanOutbox)
		if err != nil {
			return fmt.Errorf("postgres: claim outbox: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// FinishOutbox records the outcome of owner's attempt to send event id.
func (s *Store) FinishOutbox(ctx context.Context, id, owner string, status persistence.OutboxStatus, next time.Time, errText string) error {
	if err := persistence.ValidateOutboxFinish(id, owner, status, errText); err != nil {
		return err
	}
	return s.retry(ctx, func() error {
		tag, err := s.pool.Exec(ctx, sqlFinishOutbox, id, owner, string(status), ns(next), errText, s.now().UnixNano())
		if err != nil {
			return fmt.Errorf("postgres: finish outbox event %s: %w", id, err)
		}
		if tag.RowsAffected() > 0 {
			return nil
		}
		// Nothing changed: say who holds the event, if anyone. The read
		// is after the fact, for the message only.
		var claimer string
		var expires int64
		err = s.pool.QueryRow(ctx, sqlOutboxClaimer, id).Scan(&claimer, &expires)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: no outbox event %s", persistence.ErrLeaseHeld, id)
		case err != nil:
			return fmt.Errorf("postgres: finish outbox event %s: %w", id, err)
		case claimer == "":
			return fmt.Errorf("%w: outbox event %s is not claimed by %s nor anyone", persistence.ErrLeaseHeld, id, owner)
		}
		return fmt.Errorf("%w: outbox event %s claimed by %s until %s", persistence.ErrLeaseHeld, id, claimer,
			fromNS(expires).Format(time.RFC3339Nano))
	})
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
	var n int
	err := s.retry(ctx, func() error {
		tag, err := s.pool.Exec(ctx, sqlReleaseOutbox, owner, ids)
		if err != nil {
			return fmt.Errorf("postgres: release outbox events: %w", err)
		}
		n = int(tag.RowsAffected())
		return nil
	})
	return n, err
}

// PruneOutbox deletes up to limit events whose delivery ended before t.
func (s *Store) PruneOutbox(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		limit = persistence.DefaultPruneLimit
	}
	var n int
	err := s.retry(ctx, func() error {
		tag, err := s.pool.Exec(ctx, sqlPruneOutbox, before.UnixNano(), int64(limit))
		if err != nil {
			return fmt.Errorf("postgres: prune outbox: %w", err)
		}
		n = int(tag.RowsAffected())
		return nil
	})
	return n, err
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
	args := []any{int64(limit)}
	cursor := ""
	if after != "" {
		// The page starts after the row of the event named by after (its
		// time, then its ID): a row comparison that outbox_status serves
		// as a range. An unknown ID compares as NULL and yields nothing.
		args = append(args, after)
		cursor = ` AND (created_at, id) > (SELECT created_at, id FROM outbox WHERE id = $2::text)`
	}
	// A page of one status. status is one of the known constants
	// (validated), so it is spelled out in the query.
	page := func(st persistence.OutboxStatus) string {
		return ` FROM outbox WHERE status = '` + string(st) + `'` + cursor + ` ORDER BY created_at, id LIMIT $1::bigint`
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
			q += `(SELECT *` + page(st) + `)`
		}
		q += `) x ORDER BY created_at, id LIMIT $1::bigint`
	}
	rows, _ := s.pool.Query(ctx, q, args...)
	out, err := pgx.CollectRows(rows, scanOutbox)
	if err != nil {
		return nil, fmt.Errorf("postgres: list outbox: %w", err)
	}
	return out, nil
}

func scanOutbox(row pgx.CollectableRow) (persistence.OutboxRecord, error) {
	return rowcodec.ScanOutbox(row)
}
