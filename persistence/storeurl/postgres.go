package storeurl

import (
	"context"
	"errors"

	"github.com/nornlabs/norn/persistence"
)

// openPostgres is replaced when the postgres driver lands.
func openPostgres(ctx context.Context, url string) (persistence.Store, error) {
	return nil, errors.New("storeurl: the postgres driver is not built yet")
}
