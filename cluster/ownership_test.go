package cluster

import (
	"slices"
	"testing"

	"github.com/nornlabs/norn/persistence"
)

func TestOwnersIsRendezvous(t *testing.T) {
	nodes := []string{"node-a", "node-b", "node-c", "node-d"}
	table := owners(nodes)
	if !slices.Equal(owners([]string{"node-d", "node-b", "node-a", "node-c"}), table) {
		t.Fatal("the table depends on the order of the members")
	}
	count := map[string]int{}
	for _, o := range table {
		count[o]++
	}
	for _, n := range nodes {
		// A quarter each; half of that is far out of chance.
		if count[n] < persistence.NumBuckets/8 {
			t.Errorf("%s owns %d of %d buckets", n, count[n], persistence.NumBuckets)
		}
	}
	// Without node-c only node-c's buckets move.
	without := owners([]string{"node-a", "node-b", "node-d"})
	for b := range table {
		if table[b] != "node-c" && without[b] != table[b] {
			t.Fatalf("bucket %d moved from %s to %s though its owner stayed", b, table[b], without[b])
		}
	}
	if got := owners(nil); got[0] != "" || len(got) != persistence.NumBuckets {
		t.Fatalf("owners of no nodes: %q..., %d buckets", got[0], len(got))
	}
}
