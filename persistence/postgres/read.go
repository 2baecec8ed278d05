package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/rowcodec"
)

// Instance reads one instance.
func (s *Store) Instance(ctx context.Context, id string) (persistence.Instance, error) {
	if err := persistence.ValidateID("id", id); err != nil {
		return persistence.Instance{}, err
	}
	in, err := scanInstance(s.pool.QueryRow(ctx, sqlInstance, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return in, fmt.Errorf("%w: %s", persistence.ErrNotFound, id)
	}
	if err != nil {
		return in, fmt.Errorf("postgres: read instance %s: %w", id, err)
	}
	return in, nil
}

// Snapshot reads an instance, its current run's history, its subscriptions
// and its mailbox depth in one round trip, in a read-only REPEATABLE READ
// transaction, so that the four agree with one another.
func (s *Store) Snapshot(ctx context.Context, id string) (persistence.Snapshot, error) {
	if err := persistence.ValidateID("id", id); err != nil {
		return persistence.Snapshot{}, err
	}
	var out persistence.Snapshot
	err := s.readTx(ctx, func(b *pgx.Batch) {
		b.Queue(sqlInstance, id)
		b.Queue(sqlHistory, id, int64(0))
		b.Queue(sqlSubscriptions, id)
		b.Queue(sqlMailboxDepth, id, int64(persistence.MaxMailboxDepth))
	}, func(br pgx.BatchResults) error {
		var err error
		if out.Instance, err = scanInstance(br.QueryRow()); err != nil {
			return err
		}
		rows, _ := br.Query()
		if out.History, err = pgx.CollectRows(rows, scanEvent); err != nil {
			return err
		}
		rows, _ = br.Query()
		if out.Subscriptions, err = pgx.CollectRows(rows, scanSubscription(id)); err != nil {
			return err
		}
		var depth int64
		err = br.QueryRow().Scan(&depth)
		out.MailboxDepth = int(depth)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return persistence.Snapshot{}, fmt.Errorf("%w: %s", persistence.ErrNotFound, id)
	}
	if err != nil {
		return persistence.Snapshot{}, fmt.Errorf("postgres: read instance %s: %w", id, err)
	}
	return out, nil
}

// readTx runs the statements queue adds in one read-only REPEATABLE READ
// transaction and one round trip; read takes their results in order.
func (s *Store) readTx(ctx context.Context, queue func(*pgx.Batch), read func(pgx.BatchResults) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(sqlBeginSnapshot)
	queue(b)
	b.Queue(sqlCommit)
	br := conn.SendBatch(ctx, b)
	err = func() error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := read(br); err != nil {
			return err
		}
		_, err := br.Exec()
		return err
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil && conn.Conn().PgConn().TxStatus() != 'I' {
		_, _ = conn.Exec(context.Background(), sqlRollback)
	}
	return err
}

// History reads an instance's history from seq on.
func (s *Store) History(ctx context.Context, id string, fromSeq int64) ([]persistence.Event, error) {
	if err := persistence.ValidateID("id", id); err != nil {
		return nil, err
	}
	rows, _ := s.pool.Query(ctx, sqlHistory, id, fromSeq)
	out, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("postgres: read history %s: %w", id, err)
	}
	return out, nil
}

// scanEvent reads one history row: seq, kind, name, ref, payload, error,
// digest, at.
func scanEvent(row pgx.CollectableRow) (persistence.Event, error) {
	var e persistence.Event
	var at int64
	err := row.Scan(&e.Seq, &e.Kind, &e.Name, &e.Ref, &e.Payload, &e.Error, &e.Digest, &at)
	e.At = fromNS(at)
	return e, err
}

// List reads instances ordered by ID.
func (s *Store) List(ctx context.Context, f persistence.ListFilter) ([]persistence.Instance, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if len(f.Status) > 0 {
		// Literals, not a placeholder: instances_workflow_status_created
		// leaves running instances out (migration 0018), and the planner
		// reads a partial index only where constants imply its condition.
		// A status outside the closed set matches nothing.
		cond := "FALSE"
		var lits []string
		for _, x := range f.Status {
			if slices.Contains(persistence.Statuses(), x) {
				lits = append(lits, "'"+string(x)+"'")
			}
		}
		if len(lits) > 0 {
			cond = "status IN (" + strings.Join(lits, ", ") + ")"
		}
		where = append(where, cond)
	}
	if f.Workflow != "" {
		where = append(where, "workflow = "+arg(f.Workflow)+"::text")
	}
	if f.After != "" {
		where = append(where, "id > "+arg(f.After)+"::text")
	}
	q := `SELECT ` + instanceCols + ` FROM instances`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id"
	if f.Limit > 0 {
		q += " LIMIT " + arg(int64(f.Limit))
	}
	rows, _ := s.pool.Query(ctx, q, args...)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (persistence.Instance, error) { return scanInstance(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list instances: %w", err)
	}
	return out, nil
}

// Runnable lists instances of the given buckets that need an activation
// and have no live lease, by the server's clock.
func (s *Store) Runnable(ctx context.Context, buckets []int, limit int) ([]string, error) {
	if err := persistence.ValidateBuckets(buckets); err != nil {
		return nil, err
	}
	if buckets != nil && len(buckets) == 0 {
		return nil, nil
	}
	if limit <= 0 {
		limit = 1000
	}
	var rows pgx.Rows
	if buckets == nil {
		rows, _ = s.pool.Query(ctx, sqlRunnable, int64(limit))
	} else {
		rows, _ = s.pool.Query(ctx, sqlRunnableIn, int64(limit), bucketArray(buckets))
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: runnable instances: %w", err)
	}
	return out, nil
}

// bucketArray is a validated bucket set as the integer[] the queries take.
func bucketArray(buckets []int) []int32 {
	out := make([]int32, len(buckets))
	for i, b := range buckets {
		out[i] = int32(b)
	}
	return out
}

// Mailbox reads an instance's waiting messages in arrival order.
func (s *Store) Mailbox(ctx context.Context, id string, limit int) ([]persistence.Message, error) {
	if err := persistence.ValidateID("id", id); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 1000
	}
	rows, _ := s.pool.Query(ctx, sqlMailbox, id, int64(limit))
	out, err := pgx.CollectRows(rows, scanMessage)
	if err != nil {
		return nil, fmt.Errorf("postgres: read mailbox %s: %w", id, err)
	}
	return out, nil
}

// scanMessage reads one row of sqlMailbox.
func scanMessage(row pgx.CollectableRow) (persistence.Message, error) {
	var m persistence.Message
	var at int64
	err := row.Scan(&m.Seq, &m.ID, &m.Channel, &m.Target, &m.Sender, &m.Type, &m.Payload, &m.Metadata, &at)
	m.PublishedAt = fromNS(at)
	return m, err
}

// Subscriptions lists an instance's subscriptions.
func (s *Store) Subscriptions(ctx context.Context, id string) ([]persistence.Subscription, error) {
	if err := persistence.ValidateID("id", id); err != nil {
		return nil, err
	}
	rows, _ := s.pool.Query(ctx, sqlSubscriptions, id)
	out, err := pgx.CollectRows(rows, scanSubscription(id))
	if err != nil {
		return nil, fmt.Errorf("postgres: read subscriptions %s: %w", id, err)
	}
	return out, nil
}

// scanSubscription reads one row of sqlSubscriptions, instance id's.
func scanSubscription(id string) pgx.RowToFunc[persistence.Subscription] {
	return func(row pgx.CollectableRow) (persistence.Subscription, error) {
		sub := persistence.Subscription{Instance: id}
		var mode string
		err := row.Scan(&sub.Channel, &mode)
		sub.Mode = persistence.Mode(mode)
		return sub, err
	}
}

// ChannelStats summarises channels.
func (s *Store) ChannelStats(ctx context.Context) ([]persistence.ChannelStat, error) {
	rows, _ := s.pool.Query(ctx, sqlChannelStats)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (persistence.ChannelStat, error) {
		var c persistence.ChannelStat
		var mode string
		var subs, waiting, oldest int64
		err := row.Scan(&c.Channel, &mode, &subs, &waiting, &oldest)
		c.Mode, c.Subscribers, c.Waiting, c.Oldest = persistence.Mode(mode), int(subs), int(waiting), fromNS(oldest)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: channel stats: %w", err)
	}
	return out, nil
}

// DueTimers lists timers of the given buckets due before t, earliest first.
func (s *Store) DueTimers(ctx context.Context, before time.Time, buckets []int, limit int) ([]persistence.Timer, error) {
	if err := persistence.ValidateBuckets(buckets); err != nil {
		return nil, err
	}
	if buckets != nil && len(buckets) == 0 {
		return nil, nil
	}
	if limit <= 0 {
		limit = 10000
	}
	var rows pgx.Rows
	if buckets == nil {
		rows, _ = s.pool.Query(ctx, sqlDueTimers, before.UnixNano(), int64(limit))
	} else {
		rows, _ = s.pool.Query(ctx, sqlDueTimersIn, before.UnixNano(), int64(limit), bucketArray(buckets))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (persistence.Timer, error) {
		var t persistence.Timer
		var due int64
		err := row.Scan(&t.Instance, &t.ID, &due)
		t.Due = fromNS(due)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: due timers: %w", err)
	}
	return out, nil
}

func scanInstance(row pgx.Row) (persistence.Instance, error) { return rowcodec.ScanInstance(row) }

// pruneChunk is how many message IDs one prune statement deletes.
const pruneChunk = 5000

// PruneMessageIDs forgets the dedupe IDs first used before t.
func (s *Store) PruneMessageIDs(ctx context.Context, before time.Time) (int, error) {
	return s.prune(ctx, "message IDs", sqlPruneIDs, before, pruneChunk)
}

// queuePruneChunk is how many queued messages one prune statement deletes:
// a message row carries its payload, so a chunk is smaller than an ID one.
const queuePruneChunk = 500

// PruneQueue deletes queued messages published before t.
func (s *Store) PruneQueue(ctx context.Context, before time.Time) (int, error) {
	// A short chunk means nothing older is left but what consumers held
	// locked (skipped), which they are taking anyway.
	return s.prune(ctx, "queued messages", sqlPruneQueue, before, queuePruneChunk)
}

// prune runs a chunked delete statement (args: cut-off, chunk size) until a
// chunk comes back short, so that no single statement holds locks long.
func (s *Store) prune(ctx context.Context, what, stmt string, before time.Time, chunk int) (int, error) {
	total := 0
	for {
		var n int64
		err := s.retry(ctx, func() error {
			tag, err := s.pool.Exec(ctx, stmt, before.UnixNano(), int64(chunk))
			if err != nil {
				return fmt.Errorf("postgres: prune %s: %w", what, err)
			}
			n = tag.RowsAffected()
			return nil
		})
		if err != nil {
			return total, err
		}
		total += int(n)
		if n < int64(chunk) {
			return total, nil
		}
	}
}
