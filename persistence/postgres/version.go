package postgres

import (
	"context"
	"fmt"
)

// SchemaVersion is the highest migration applied to the store's schema:
// what Open brought it to, for tools that report the schema (norn migrate).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("postgres: read schema version: %w", err)
	}
	return v, nil
}
