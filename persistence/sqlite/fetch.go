package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// ClaimQueue's statements. A consumer may take a message if it consumes
// channel competitively, has not ended and owner's lease on it is live.
const (
	// ?1 consumer, ?2 channel, ?3 owner, ?4 now.
	queueConsumerSQL = `SELECT 1 FROM subscriptions s JOIN instances i ON i.id = s.instance_id
		WHERE s.instance_id = ?1 AND s.channel = ?2 AND s.mode = 'competing'
			AND i.lease_owner = ?3 AND i.lease_expires > ?4 AND ` + liveSQL
	// ?1 channel, ?2 the type names as a JSON array (NULL: any type), ?3
	// limit. Read from the head of messages_queue.
	queueHeadSQL = `SELECT seq, msg_id, channel, '', sender, type, payload, metadata, published_at FROM messages
		WHERE channel = ?1 AND target IS NULL AND (?2 IS NULL OR type IN (SELECT value FROM json_each(?2)))
		ORDER BY seq LIMIT ?3`
	// ?1 channel: run after the claim, which took its messages out.
	queueLeftSQL = `SELECT EXISTS (SELECT 1 FROM messages WHERE channel = ?1 AND target IS NULL)`
)

// SingleWriter implements persistence.QueueClaimer: one connection
// writes, in group commits.
func (s *Store) SingleWriter() bool { return true }

// ClaimQueue implements persistence.QueueClaimer: one request of the
// writer, so that it commits with the steps around it.
func (s *Store) ClaimQueue(ctx context.Context, owner, channel string, types, consumers []string) (persistence.QueueClaim, error) {
	var out persistence.QueueClaim
	if err := persistence.ValidateQueueClaim(owner, channel, types, consumers); err != nil {
		return out, err
	}
	if len(consumers) == 0 {
		return out, nil
	}
	// An empty queue, the common case of a consumer about to park, is
	// answered by a read, without a turn of the writer: a message
	// committed after it is the runtime's to wake a consumer for.
	if err := s.r.QueryRowContext(ctx, queueLeftSQL, channel).Scan(&out.More); err != nil {
		return out, fmt.Errorf("sqlite: claim queue %s: %w", channel, err)
	}
	if !out.More {
		return out, nil
	}
	var typeList any // NULL: any type
	if len(types) > 0 {
		b, _ := json.Marshal(types)
		typeList = string(b)
	}
	err := s.write(ctx, false, func(tx *sql.Tx) error {
		out = persistence.QueueClaim{} // the writer may run a request again (see commit)
		now := time.Now().UnixNano()
		eligible := make([]string, 0, len(consumers))
		probe := s.stmt(tx, s.st.queueConsumer)
		for _, id := range consumers {
			var one int
			switch err := probe.QueryRow(id, channel, owner, now).Scan(&one); err {
			case nil:
				eligible = append(eligible, id)
			case sql.ErrNoRows:
			default:
				return fmt.Errorf("sqlite: claim queue %s: %w", channel, err)
			}
		}
		if len(eligible) == 0 {
			return s.queueLeft(tx, channel, &out)
		}
		rows, err := s.stmt(tx, s.st.queueHead).Query(channel, typeList, len(eligible))
		if err != nil {
			return fmt.Errorf("sqlite: claim queue %s: %w", channel, err)
		}
		head, _, err := scanMailbox(rows)
		if err != nil {
			return fmt.Errorf("sqlite: claim queue %s: %w", channel, err)
		}
		claim, hold := s.stmt(tx, s.st.claimMessage), s.stmt(tx, s.st.holdClaims)
		for i, m := range head {
			m.Target = eligible[i]
			// The writer is alone: what the read found queued still is.
			if _, err := claim.Exec(m.Target, m.Seq); err != nil {
				return fmt.Errorf("sqlite: claim queue %s: %w", channel, err)
			}
			// Its end must give the message back (see end).
			if _, err := hold.Exec(m.Target); err != nil {
				return fmt.Errorf("sqlite: claim queue %s: %w", channel, err)
			}
			out.Messages = append(out.Messages, m)
		}
		return s.queueLeft(tx, channel, &out)
	})
	if err != nil {
		return persistence.QueueClaim{}, err
	}
	return out, nil
}

// queueLeft sets out.More if channel's queue still holds messages.
func (s *Store) queueLeft(tx *sql.Tx, channel string, out *persistence.QueueClaim) error {
	if err := s.stmt(tx, s.st.queueLeft).QueryRow(channel).Scan(&out.More); err != nil {
		return fmt.Errorf("sqlite: claim queue %s: %w", channel, err)
	}
	return nil
}
