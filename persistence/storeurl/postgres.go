package storeurl

import (
	"context"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
)

func openPostgres(ctx context.Context, url string) (persistence.Store, error) {
	return postgres.Open(ctx, url, postgres.Options{})
}
