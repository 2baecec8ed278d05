// Package rowcodec holds the row encoding the SQL drivers share: times as
// Unix nanoseconds (0 for the zero time), restart logs as text, and the
// instance and outbox rows' columns.
//
//	in, err := rowcodec.ScanInstance(db.QueryRow(q, id))
package rowcodec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// NS encodes t as Unix nanoseconds; the zero time is 0.
func NS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromNS decodes NS.
func FromNS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v)
}

// Scanner is a row (database/sql or pgx).
type Scanner interface{ Scan(dest ...any) error }

// InstanceColumns is the column list ScanInstance expects, in order.
const InstanceColumns = `id, workflow, status, input, output, error, parent, COALESCE(lease_owner, ''), lease_epoch, lease_expires,
	cancel_reason, restarts, restart_log, run, history_len, created_at, updated_at, waits`

// ScanInstance reads an instance row selected with InstanceColumns.
func ScanInstance(row Scanner) (persistence.Instance, error) {
	var in persistence.Instance
	var status string
	var expires, created, updated int64
	var restarts string
	err := row.Scan(&in.ID, &in.Workflow, &status, &in.Input, &in.Output, &in.Error, &in.Parent, &in.LeaseOwner, &in.LeaseEpoch,
		&expires, &in.CancelReason, &in.Restarts, &restarts, &in.Run, &in.HistoryLen, &created, &updated, &in.Waits)
	if err != nil {
		return in, err
	}
	in.Status = persistence.Status(status)
	in.LeaseExpires, in.CreatedAt, in.UpdatedAt = FromNS(expires), FromNS(created), FromNS(updated)
	if in.RecentRestarts, err = DecodeTimes(restarts); err != nil {
		return in, fmt.Errorf("instance %s restart_log: %w", in.ID, err)
	}
	return in, nil
}

// OutboxColumns is the column list ScanOutbox expects, in order.
const OutboxColumns = `id, instance, type, data, created_at, status, attempts, next_attempt, error, COALESCE(claimer, ''), claim_expires, finished_at`

// ScanOutbox reads an outbox row selected with OutboxColumns.
func ScanOutbox(row Scanner) (persistence.OutboxRecord, error) {
	var r persistence.OutboxRecord
	var status string
	var attempts, created, next, expires, finished int64
	err := row.Scan(&r.ID, &r.Instance, &r.Type, &r.Data, &created, &status, &attempts, &next, &r.Error, &r.Claimer, &expires, &finished)
	if err != nil {
		return r, err
	}
	r.Status, r.Attempts = persistence.OutboxStatus(status), int(attempts)
	r.At, r.Next, r.ClaimExpires, r.Finished = FromNS(created), FromNS(next), FromNS(expires), FromNS(finished)
	return r, nil
}

// EncodeTimes encodes a list of times (an instance's restart log) as their
// Unix nanoseconds in decimal, sorted oldest first and separated by commas;
// no times is the empty string. Text rather than an array type keeps one
// encoding for both databases, and the list is short (a restart budget).
func EncodeTimes(ts []time.Time) string {
	if len(ts) == 0 {
		return ""
	}
	ns := make([]int64, len(ts))
	for i, t := range ts {
		ns[i] = NS(t)
	}
	slices.Sort(ns)
	b := make([]byte, 0, len(ns)*20)
	for i, v := range ns {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return string(b)
}

// DecodeTimes decodes EncodeTimes; the empty string is nil.
func DecodeTimes(s string) ([]time.Time, error) {
	if s == "" {
		return nil, nil
	}
	out := make([]time.Time, 0, strings.Count(s, ",")+1)
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("decode time list: %w", err)
		}
		out = append(out, FromNS(v))
	}
	return out, nil
}
