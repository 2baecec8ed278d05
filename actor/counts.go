package actor

import (
	"context"
	"fmt"

	"github.com/nornlabs/norn/norntype"
)

// InstanceCount is how many instances of one workflow are in one status
// (norntype.InstanceCount).
type InstanceCount = norntype.InstanceCount

// CountInstances counts every instance in the store, ended ones included,
// by workflow and status, ordered by workflow then status (pairs with no
// instance are left out). The store answers from an index, but visits an
// entry per instance: with many instances, cache the answer rather than
// ask for every page or scrape.
func (s *System) CountInstances(ctx context.Context) ([]InstanceCount, error) {
	counts, err := s.store.CountInstances(ctx)
	if err != nil {
		return nil, fmt.Errorf("norn: count instances: %w", err)
	}
	return counts, nil
}
