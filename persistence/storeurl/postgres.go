package storeurl

import (
	"context"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
)

// openPostgres returns a nil Store on error (see openSQLite).
func openPostgres(ctx context.Context, url string, noCreate bool) (persistence.Store, error) {
	st, err := postgres.Open(ctx, url, postgres.Options{NoCreate: noCreate})
	if err != nil {
		return nil, err
	}
	return st, nil
}
