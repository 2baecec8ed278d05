// Package rowcodec holds the row encoding the SQL drivers share: times as
// Unix nanoseconds (0 for the zero time) and the instance row's columns.
//
//	in, err := rowcodec.ScanInstance(db.QueryRow(q, id))
package rowcodec

import (
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
	cancel_reason, restarts, run, history_len, created_at, updated_at`

// ScanInstance reads an instance row selected with InstanceColumns.
func ScanInstance(row Scanner) (persistence.Instance, error) {
	var in persistence.Instance
	var status string
	var expires, created, updated int64
	err := row.Scan(&in.ID, &in.Workflow, &status, &in.Input, &in.Output, &in.Error, &in.Parent, &in.LeaseOwner, &in.LeaseEpoch,
		&expires, &in.CancelReason, &in.Restarts, &in.Run, &in.HistoryLen, &created, &updated)
	in.Status = persistence.Status(status)
	in.LeaseExpires, in.CreatedAt, in.UpdatedAt = FromNS(expires), FromNS(created), FromNS(updated)
	return in, err
}
