package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/nornlabs/norn/persistence"
)

// claimQueueSQL is ClaimQueue in one statement: $1 owner, $2 channel, $3
// consumers, $4 type names (empty: any type).
//
// e: the consumers that may take a message, their subscription rows
// locked (KEY SHARE) until the claim commits, so that an unsubscribe or an
// end, which deletes that row before giving back what the consumer
// claimed, either waits for the claim and then gives its message back, or
// commits first and leaves the consumer out (READ COMMITTED checks the
// locked row again). h: the head of the queue, as many as e, skipping
// rows a concurrent claim or consume holds (SKIP LOCKED) rather than
// waiting for them. The n-th message of h goes to the n-th consumer of e.
// A row of seq 0 (no message has it) says that the queue holds more than
// h: the statement's snapshot still shows h's rows queued.
//
// The queue is read as channel >= X AND channel <= X, in ORDER BY channel,
// seq: the same rows as channel = X under the column's C collation, but
// the order keeps channel, which only the queue's partial index
// (messages_queue) provides. With channel = X the planner may read the
// queue in seq order through the primary key instead (an equality makes
// channel redundant in the order, and statistics taken while the table
// held only queued rows make the filter look free). The primary key's
// head holds the rows claimed but not yet consumed (a consumer records its
// takes with its next step) and those consumed but not yet vacuumed: each
// claim walked past all of them, and the check for more scanned the whole
// table, so that claims grew ten times slower as a backlog drained,
// depending on the plan the statistics of the moment chose. The mailbox
// read (sqlMailbox) reads queues the same way.
const claimQueueSQL = `WITH e AS MATERIALIZED (
		SELECT s.instance_id, u.ord FROM unnest($3::text[]) WITH ORDINALITY AS u(id, ord)
		JOIN subscriptions s ON s.instance_id = u.id AND s.channel = $2::text AND s.mode = 'competing'
		JOIN instances i ON i.id = u.id AND i.lease_owner = $1::text AND i.lease_expires > ` + serverNowNS + `
			AND i.status NOT IN ` + terminalSQL + `
		FOR KEY SHARE OF s),
	c AS (SELECT instance_id, row_number() OVER (ORDER BY ord) AS n FROM e),
	h AS (SELECT seq, row_number() OVER (ORDER BY seq) AS n FROM (
		SELECT seq FROM messages WHERE channel >= $2::text AND channel <= $2::text AND target IS NULL
			AND (cardinality($4::text[]) = 0 OR type = ANY($4::text[]))
		ORDER BY channel, seq LIMIT (SELECT count(*) FROM e) FOR UPDATE SKIP LOCKED) q),
	m AS (UPDATE messages SET target = c.instance_id, claimed = true FROM h JOIN c USING (n)
		WHERE messages.seq = h.seq
		RETURNING messages.seq, messages.msg_id, messages.channel, messages.target, messages.sender,
			messages.type, messages.payload, messages.metadata, messages.published_at)
	SELECT * FROM m
	UNION ALL
	SELECT 0, '', '', '', '', '', NULL, NULL, 0 WHERE (
		SELECT seq FROM messages WHERE channel >= $2::text AND channel <= $2::text AND target IS NULL
			AND NOT EXISTS (SELECT 1 FROM h WHERE h.seq = messages.seq)
		ORDER BY channel, seq LIMIT 1) IS NOT NULL
	ORDER BY 1`

// SingleWriter implements persistence.QueueClaimer: writers run on
// connections of their own.
func (s *Store) SingleWriter() bool { return false }

// ClaimQueue implements persistence.QueueClaimer. It is not retried: a
// claim whose commit was not acknowledged may have moved messages, which
// their consumers find by reading their mailboxes.
func (s *Store) ClaimQueue(ctx context.Context, owner, channel string, types, consumers []string) (persistence.QueueClaim, error) {
	var out persistence.QueueClaim
	if err := persistence.ValidateQueueClaim(owner, channel, types, consumers); err != nil {
		return out, err
	}
	if len(consumers) == 0 {
		return out, nil
	}
	if s.isClosed() {
		return out, persistence.ErrStoreClosed
	}
	if types == nil {
		types = []string{}
	}
	rows, _ := s.pool.Query(ctx, sqlClaimQueue, owner, channel, consumers, types)
	ms, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (persistence.Message, error) {
		var m persistence.Message
		var at int64
		err := row.Scan(&m.Seq, &m.ID, &m.Channel, &m.Target, &m.Sender, &m.Type, &m.Payload, &m.Metadata, &at)
		m.PublishedAt = fromNS(at)
		return m, err
	})
	if err != nil {
		return out, fmt.Errorf("postgres: claim queue %s: %w", channel, err)
	}
	for _, m := range ms {
		if m.Seq == 0 {
			out.More = true
			continue
		}
		out.Messages = append(out.Messages, m)
	}
	return out, nil
}
