package sqlite

import (
	"context"
	"fmt"
)

// SchemaVersion is the highest migration applied to the database: what
// Open brought it to, for tools that report the schema (norn migrate).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	if err := s.r.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("sqlite: read schema version: %w", err)
	}
	return v, nil
}
