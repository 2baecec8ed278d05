package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// wakeRequestTTL is how long a wake request stays readable. A node that was
// down longer finds the work through its start-up scan instead.
const wakeRequestTTL = 5 * time.Minute

// listenLookBack is how far back Listen starts reading requests.
const listenLookBack = 10 * time.Second

var (
	_ persistence.Notifier      = (*Store)(nil)
	_ persistence.WakeRequester = (*Store)(nil)
)

// RequestWake records wake-ups for ids that the nodes sharing the file pick
// up through Listen. It implements persistence.WakeRequester.
func (s *Store) RequestWake(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	now := time.Now().UnixNano()
	err := s.write(ctx, false, func(tx *sql.Tx) error {
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, `INSERT INTO wake_requests (instance_id, created_at) VALUES (?, ?)`, id, now); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM wake_requests WHERE created_at < ?`, now-int64(wakeRequestTTL))
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: request wake: %w", err)
	}
	return nil
}

// Listen implements persistence.Notifier: every Options.WakePoll it reads
// the wake requests recorded since the last look (by any process, this one
// included) and passes their instance IDs to fn. It returns when ctx ends.
func (s *Store) Listen(ctx context.Context, fn func(ids []string)) error {
	// Start a little in the past: a request committed while the node was
	// starting (after its start-up scan read the instance, before this
	// read) is then delivered too. A second wake of an instance is harmless.
	var last int64
	since := time.Now().Add(-listenLookBack).UnixNano()
	for {
		err := s.r.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM wake_requests WHERE created_at < ?`, since).Scan(&last)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if !sleepCtx(ctx, s.opts.WakePoll) {
			return nil
		}
	}
	t := time.NewTicker(s.opts.WakePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		ids, seq, err := s.wakeRequestsAfter(ctx, last)
		if err != nil {
			// Read again at the next tick: nothing is lost, last stays.
			continue
		}
		last = seq
		if len(ids) > 0 {
			fn(ids)
		}
	}
}

func (s *Store) wakeRequestsAfter(ctx context.Context, after int64) ([]string, int64, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT seq, instance_id FROM wake_requests WHERE seq > ? ORDER BY seq LIMIT 10000`, after)
	if err != nil {
		return nil, after, err
	}
	defer rows.Close()
	var ids []string
	seen := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&after, &id); err != nil {
			return nil, 0, err
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, after, rows.Err()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ListenOutbox is not supported: nothing tells a SQLite store that another
// process committed (relayers poll). It returns ErrUnsupported.
func (s *Store) ListenOutbox(context.Context) (<-chan struct{}, error) {
	return nil, fmt.Errorf("sqlite: listen for outgoing events: %w", persistence.ErrUnsupported)
}
