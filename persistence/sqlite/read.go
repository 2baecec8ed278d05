package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/rowcodec"
)

const instanceSelect = `SELECT ` + rowcodec.InstanceColumns + ` FROM instances`

// Instance reads one instance.
func (s *Store) Instance(ctx context.Context, id string) (persistence.Instance, error) {
	if err := persistence.ValidateID("id", id); err != nil {
		return persistence.Instance{}, err
	}
	in, err := scanInstance(s.rst.instance.QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return in, fmt.Errorf("%w: %s", persistence.ErrNotFound, id)
	}
	if err != nil {
		return in, fmt.Errorf("sqlite: read instance %s: %w", id, err)
	}
	return in, nil
}

// History reads an instance's history from seq on.
func (s *Store) History(ctx context.Context, id string, fromSeq int64) ([]persistence.Event, error) {
	if err := persistence.ValidateID("id", id); err != nil {
		return nil, err
	}
	rows, err := s.rst.history.QueryContext(ctx, id, fromSeq, -1)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read history %s: %w", id, err)
	}
	return scanEvents(rows, id)
}

// scanEvents reads history rows (seq, kind, name, ref, payload, error,
// digest, at) of instance id and closes them.
func scanEvents(rows *sql.Rows, id string) ([]persistence.Event, error) {
	defer rows.Close()
	var out []persistence.Event
	for rows.Next() {
		var e persistence.Event
		var at int64
		if err := rows.Scan(&e.Seq, &e.Kind, &e.Name, &e.Ref, &e.Payload, &e.Error, &e.Digest, &at); err != nil {
			return nil, fmt.Errorf("sqlite: read history %s: %w", id, err)
		}
		e.At = fromNS(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: read history %s: %w", id, err)
	}
	return out, nil
}

// List reads instances ordered by ID.
func (s *Store) List(ctx context.Context, f persistence.ListFilter) ([]persistence.Instance, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var where []string
	var args []any
	if len(f.Status) > 0 {
		ph := make([]string, len(f.Status))
		for i, st := range f.Status {
			ph[i] = "?"
			args = append(args, string(st))
		}
		where = append(where, "status IN ("+strings.Join(ph, ",")+")")
	}
	if f.Workflow != "" {
		where = append(where, "workflow = ?")
		args = append(args, f.Workflow)
	}
	if f.After != "" {
		where = append(where, "id > ?")
		args = append(args, f.After)
	}
	q := instanceSelect
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
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
	return out, rows.Err()
}

// Runnable lists instances of the given buckets that need an activation
// and have no live lease.
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
	rows, err := s.r.QueryContext(ctx, runnableSQL(buckets), time.Now().UnixNano(), limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: runnable instances: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqlite: runnable instances: %w", err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: runnable instances: %w", err)
	}
	return out, nil
}

// runnableSQL is Runnable's query; ?1 is the time now, ?2 the limit. It
// reads three sources, none of which grows with the instances parked in
// the file:
//   - instances_unsettled: running, compensating, or waiting under a
//     lease or with a cancel request (unsettledPredicate);
//   - the distinct targets of waiting messages, one index probe each (a
//     loose scan of messages_target: a backlog of many messages to one
//     instance costs one probe);
//   - the subscribers, in competing mode, of channels with queued messages
//     (a loose scan of messages_queue).
//
// The last two take at most ?2 instances each, so a broadcast that left
// mail for a million parked instances costs a pass ?2 of them. The index
// and the join order are fixed (INDEXED BY, CROSS JOIN): without
// statistics SQLite would read the waiting instances by status instead.
func runnableSQL(buckets []int) string {
	free := `(i.lease_owner IS NULL OR i.lease_expires < ?1)` + bucketFilterOn("i.bucket", buckets)
	return `WITH RECURSIVE mail(id) AS (
		SELECT min(target) FROM messages WHERE target IS NOT NULL
		UNION ALL
		SELECT (SELECT min(target) FROM messages WHERE target > mail.id) FROM mail WHERE mail.id IS NOT NULL
	),
	queued(channel) AS (
		SELECT min(channel) FROM messages WHERE target IS NULL
		UNION ALL
		SELECT (SELECT min(channel) FROM messages WHERE target IS NULL AND channel > queued.channel)
		FROM queued WHERE queued.channel IS NOT NULL
	)
	SELECT id FROM (
		SELECT i.id, i.updated_at FROM instances i INDEXED BY instances_unsettled
		WHERE ` + unsettledPredicate + ` AND ` + free + `
		UNION
		SELECT * FROM (SELECT i.id, i.updated_at FROM mail CROSS JOIN instances i ON i.id = mail.id
			WHERE i.status = 'waiting' AND ` + free + ` LIMIT ?2)
		UNION
		SELECT * FROM (SELECT i.id, i.updated_at FROM queued
			CROSS JOIN subscriptions s ON s.channel = queued.channel AND s.mode = 'competing'
			CROSS JOIN instances i ON i.id = s.instance_id
			WHERE i.status = 'waiting' AND ` + free + ` LIMIT ?2)
	) ORDER BY updated_at LIMIT ?2`
}

// unsettledPredicate is word for word the predicate of the partial index
// instances_unsettled (migration 0016): SQLite uses a partial index only
// for a query that repeats its predicate.
const unsettledPredicate = `(status = 'running' OR status = 'compensating' OR (status = 'waiting' AND (lease_owner IS NOT NULL OR cancel_reason != '')))`

// livePredicate is "the instance is live", as three comparisons: SQLite
// evaluates an IN list of three or more constants through a temporary
// table it builds each time.
const livePredicate = `(status = 'running' OR status = 'waiting' OR status = 'compensating')`

// bucketFilter is the condition " AND bucket IN (...)" for a non-empty
// bucket set, or nothing for nil (every bucket). The buckets are validated
// integers, written into the query text: one placeholder per bucket would
// do no better, and the read pool prepares each query anyway.
func bucketFilter(buckets []int) string { return bucketFilterOn("bucket", buckets) }

// bucketFilterOn is bucketFilter on the column col.
func bucketFilterOn(col string, buckets []int) string {
	if buckets == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(" AND " + col + " IN (")
	for i, n := range buckets {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(n))
	}
	b.WriteByte(')')
	return b.String()
}

// Mailbox reads an instance's waiting messages in arrival order.
func (s *Store) Mailbox(ctx context.Context, id string, limit int) ([]persistence.Message, error) {
	if err := persistence.ValidateID("id", id); err != nil {
		return nil, err
	}
	return s.mailbox(ctx, poolReader{s.r}, id, limit)
}

// reader runs reads on the read pool or in one of its transactions:
// statements prepared on the pool run on the transaction's connection.
type reader interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt
}

// poolReader is the read pool as a reader.
type poolReader struct{ *sql.DB }

func (poolReader) StmtContext(_ context.Context, stmt *sql.Stmt) *sql.Stmt { return stmt }

func (s *Store) mailbox(ctx context.Context, r reader, id string, limit int) ([]persistence.Message, error) {
	if limit <= 0 {
		limit = 1000
	}
	// The queues of the channels it consumes are read each by its own
	// index range, in one statement (one snapshot), so that a long queue
	// costs no more than a short one: a join ordered across channels would
	// sort the whole queue to return its first rows.
	// The common case, at most one competing channel, is one statement;
	// its first row says when there are more, read then one branch each.
	rows, err := r.StmtContext(ctx, s.rst.mailbox).QueryContext(ctx, id, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read mailbox %s: %w", id, err)
	}
	out, more, err := scanMailbox(rows)
	if err != nil || !more {
		if err != nil {
			err = fmt.Errorf("sqlite: read mailbox %s: %w", id, err)
		}
		return out, err
	}
	chans, err := s.competingChannels(ctx, r, id)
	if err != nil {
		return nil, err
	}
	q := mailboxSQL
	args := []any{id, limit}
	for i, ch := range chans {
		q += fmt.Sprintf(mailboxQueueSQL, i+3)
		args = append(args, ch)
	}
	if rows, err = r.QueryContext(ctx, q+mailboxTail, args...); err != nil {
		return nil, fmt.Errorf("sqlite: read mailbox %s: %w", id, err)
	}
	out, _, err = scanMailbox(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read mailbox %s: %w", id, err)
	}
	return out, nil
}

// Snapshot reads an instance, its current run's history, its subscriptions
// and its mailbox depth in one read transaction, so that the four agree
// with one another.
func (s *Store) Snapshot(ctx context.Context, id string) (persistence.Snapshot, error) {
	if err := persistence.ValidateID("id", id); err != nil {
		return persistence.Snapshot{}, err
	}
	tx, err := s.r.BeginTx(ctx, nil)
	if err != nil {
		return persistence.Snapshot{}, fmt.Errorf("sqlite: read instance %s: %w", id, err)
	}
	defer func() { _ = tx.Rollback() }() // read only: nothing to commit
	var out persistence.Snapshot
	out.Instance, err = scanInstance(tx.StmtContext(ctx, s.rst.instance).QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return persistence.Snapshot{}, fmt.Errorf("%w: %s", persistence.ErrNotFound, id)
	}
	if err != nil {
		return persistence.Snapshot{}, fmt.Errorf("sqlite: read instance %s: %w", id, err)
	}
	rows, err := tx.StmtContext(ctx, s.rst.history).QueryContext(ctx, id, 0, -1)
	if err != nil {
		return persistence.Snapshot{}, fmt.Errorf("sqlite: read history %s: %w", id, err)
	}
	if out.History, err = scanEvents(rows, id); err != nil {
		return persistence.Snapshot{}, err
	}
	if out.Subscriptions, err = s.subscriptions(ctx, tx, id); err != nil {
		return persistence.Snapshot{}, err
	}
	mail, err := s.mailbox(ctx, tx, id, persistence.MaxMailboxDepth)
	if err != nil {
		return persistence.Snapshot{}, err
	}
	out.MailboxDepth = len(mail)
	return out, nil
}

// scanMailbox reads the rows of a mailbox statement; more reports the
// marker row (seq 0) of an instance with several competing channels.
func scanMailbox(rows *sql.Rows) (out []persistence.Message, more bool, err error) {
	defer rows.Close()
	for rows.Next() {
		var m persistence.Message
		var meta sql.NullString
		var at int64
		if err := rows.Scan(&m.Seq, &m.ID, &m.Channel, &m.Target, &m.Sender, &m.Type, &m.Payload, &meta, &at); err != nil {
			return nil, false, err
		}
		if m.Seq == 0 {
			more = true
			continue
		}
		if meta.Valid && meta.String != "" {
			if err := json.Unmarshal([]byte(meta.String), &m.Metadata); err != nil {
				return nil, false, fmt.Errorf("message %s metadata: %w", m.ID, err)
			}
		}
		m.PublishedAt = fromNS(at)
		out = append(out, m)
	}
	return out, more, rows.Err()
}

// competingChannels lists the channels id consumes competitively.
func (s *Store) competingChannels(ctx context.Context, r reader, id string) ([]string, error) {
	rows, err := r.StmtContext(ctx, s.rst.competing).QueryContext(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read subscriptions %s: %w", id, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var ch string
		if err := rows.Scan(&ch); err != nil {
			return nil, fmt.Errorf("sqlite: read subscriptions %s: %w", id, err)
		}
		out = append(out, ch)
	}
	return out, rows.Err()
}

// Subscriptions lists an instance's subscriptions.
func (s *Store) Subscriptions(ctx context.Context, id string) ([]persistence.Subscription, error) {
	if err := persistence.ValidateID("id", id); err != nil {
		return nil, err
	}
	return s.subscriptions(ctx, poolReader{s.r}, id)
}

func (s *Store) subscriptions(ctx context.Context, r reader, id string) ([]persistence.Subscription, error) {
	rows, err := r.QueryContext(ctx, `SELECT channel, mode FROM subscriptions WHERE instance_id = ? ORDER BY channel`, id)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read subscriptions %s: %w", id, err)
	}
	defer rows.Close()
	var out []persistence.Subscription
	for rows.Next() {
		sub := persistence.Subscription{Instance: id}
		var mode string
		if err := rows.Scan(&sub.Channel, &mode); err != nil {
			return nil, fmt.Errorf("sqlite: read subscriptions %s: %w", id, err)
		}
		sub.Mode = persistence.Mode(mode)
		out = append(out, sub)
	}
	return out, rows.Err()
}

// ChannelStats summarises channels.
func (s *Store) ChannelStats(ctx context.Context) ([]persistence.ChannelStat, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT channel, MAX(mode), SUM(subs), SUM(waiting), COALESCE(MIN(oldest), 0) FROM (
			SELECT channel, mode, COUNT(*) AS subs, 0 AS waiting, NULL AS oldest FROM subscriptions GROUP BY channel, mode
			UNION ALL
			SELECT channel, '' AS mode, 0, COUNT(*), MIN(published_at) FROM messages WHERE channel != '' GROUP BY channel
		) GROUP BY channel ORDER BY channel`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: channel stats: %w", err)
	}
	defer rows.Close()
	var out []persistence.ChannelStat
	for rows.Next() {
		var c persistence.ChannelStat
		var mode string
		var oldest int64
		if err := rows.Scan(&c.Channel, &mode, &c.Subscribers, &c.Waiting, &oldest); err != nil {
			return nil, fmt.Errorf("sqlite: channel stats: %w", err)
		}
		c.Mode, c.Oldest = persistence.Mode(mode), fromNS(oldest)
		out = append(out, c)
	}
	return out, rows.Err()
}

// DueTimers lists timers of the given buckets due before t.
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
	rows, err := s.r.QueryContext(ctx, `SELECT instance_id, timer_id, due FROM timers WHERE due < ?`+bucketFilter(buckets)+`
		ORDER BY due LIMIT ?`, before.UnixNano(), limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: due timers: %w", err)
	}
	defer rows.Close()
	var out []persistence.Timer
	for rows.Next() {
		var t persistence.Timer
		var due int64
		if err := rows.Scan(&t.Instance, &t.ID, &due); err != nil {
			return nil, fmt.Errorf("sqlite: due timers: %w", err)
		}
		t.Due = fromNS(due)
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: due timers: %w", err)
	}
	return out, nil
}

// readStmts are the read pool's prepared statements for the hot path.
type readStmts struct {
	instance  *sql.Stmt
	history   *sql.Stmt
	mailbox   *sql.Stmt // mail addressed to the instance and the queue of its first competing channel
	competing *sql.Stmt
}

// The mailbox read: mail addressed to ?1, then one branch per queue
// (mailboxQueueSQL, its channel the given parameter), each limited on its
// own (?2) and read in seq order from its index, merged by seq.
const (
	mailboxCols = `seq, msg_id, channel, target, sender, type, payload, metadata, published_at`
	mailboxSQL  = `SELECT seq, msg_id, channel, COALESCE(target, ''), sender, type, payload, metadata, published_at FROM (
			SELECT * FROM (SELECT ` + mailboxCols + ` FROM messages WHERE target = ?1 ORDER BY seq LIMIT ?2)`
	mailboxQueueSQL = `
			UNION ALL SELECT * FROM (SELECT ` + mailboxCols + ` FROM messages WHERE channel = ?%d AND target IS NULL ORDER BY seq LIMIT ?2)`
	mailboxTail = `
		) ORDER BY seq LIMIT ?2`
	// The queue of the first competing channel, found by a subquery, and
	// a marker row (seq 0, which no message has) if there is a second.
	mailboxFirstQueueSQL = `
			UNION ALL SELECT * FROM (SELECT ` + mailboxCols + ` FROM messages WHERE channel = (
				SELECT channel FROM subscriptions WHERE instance_id = ?1 AND mode = 'competing' ORDER BY channel LIMIT 1)
				AND target IS NULL ORDER BY seq LIMIT ?2)
			UNION ALL SELECT 0, '', '', NULL, '', '', NULL, NULL, 0 WHERE EXISTS (
				SELECT 1 FROM subscriptions WHERE instance_id = ?1 AND mode = 'competing' ORDER BY channel LIMIT 1 OFFSET 1)`
)

func (rs *readStmts) prepare(ctx context.Context, db *sql.DB) error {
	pr := &preparer{ctx: ctx, db: db}
	p := pr.prep
	rs.instance = p(instanceSelect + ` WHERE id = ?`)
	// History (no limit: -1) and HistoryRange, which activations read
	// their history with, a page at a time.
	rs.history = p(`SELECT seq, kind, name, ref, payload, error, digest, at FROM history WHERE instance_id = ? AND seq >= ? ORDER BY seq LIMIT ?`)
	rs.mailbox = p(mailboxSQL + mailboxFirstQueueSQL + mailboxTail)
	rs.competing = p(`SELECT channel FROM subscriptions WHERE instance_id = ? AND mode = 'competing' ORDER BY channel`)
	return pr.err
}

func (rs *readStmts) close() {
	closeStmts(rs.instance, rs.history, rs.mailbox, rs.competing)
}

func scanInstance(row rowcodec.Scanner) (persistence.Instance, error) {
	return rowcodec.ScanInstance(row)
}

// pruneChunk is how many message IDs one write request deletes: the writer
// serves every process's steps, so a prune of a long backlog takes turns
// with them instead of holding the write lock for the whole backlog.
const pruneChunk = 5000

// PruneMessageIDs forgets the dedupe IDs first used before t.
func (s *Store) PruneMessageIDs(ctx context.Context, before time.Time) (int, error) {
	return s.prune(ctx, "message IDs", `DELETE FROM message_ids WHERE msg_id IN (
		SELECT msg_id FROM message_ids WHERE created_at < ? LIMIT ?)`, before, pruneChunk)
}

// queuePruneChunk is how many queued messages one write request deletes.
// Smaller than pruneChunk: a message row carries its payload, so deleting
// one costs more than forgetting an ID.
const queuePruneChunk = 500

// PruneQueue deletes queued messages published before t.
func (s *Store) PruneQueue(ctx context.Context, before time.Time) (int, error) {
	return s.prune(ctx, "queued messages", `DELETE FROM messages WHERE seq IN (
		SELECT seq FROM messages WHERE target IS NULL AND published_at < ? LIMIT ?)`, before, queuePruneChunk)
}

// prune runs a chunked delete (args: cut-off, chunk size), one write
// request per chunk, until a chunk comes back short: the one writer is never
// held long.
func (s *Store) prune(ctx context.Context, what, stmt string, before time.Time, chunk int) (int, error) {
	total := 0
	for {
		var n int64
		err := s.write(ctx, true, func(tx *sql.Tx) error {
			r, err := tx.Exec(stmt, before.UnixNano(), chunk)
			if err == nil {
				n, err = r.RowsAffected()
			}
			if err != nil {
				return fmt.Errorf("sqlite: prune %s: %w", what, err)
			}
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
