package actor

import (
	"context"
	"log/slog"
)

// Cluster spreads a System's instances over the nodes of a cluster: it
// decides which node owns each instance (hosts its activation and fires its
// timers) and carries wake-ups between nodes. The package
// github.com/nornlabs/norn/cluster implements it with gossip membership and
// remote messaging; a System without a Cluster owns every instance itself.
//
// Ownership is by bucket (persistence.BucketOf of the instance ID), so that
// a node reads only its own buckets' timers and runnable instances. The
// store stays the arbiter: ownership only says who should try; leases with
// fencing epochs make sure that at most one activation writes an instance,
// whatever two nodes believe during a membership change.
type Cluster interface {
	// Join connects the node to the cluster. Start calls it once, after the
	// node can take wake-ups and before it recovers instances. h is how the
	// cluster reaches the node; its functions may be called from any
	// goroutine from then on until Close returns.
	Join(ctx context.Context, h ClusterHost) error
	// Owner names the node that owns bucket b, out of 0 ≤ b <
	// persistence.NumBuckets. A node alone owns every bucket. It is called
	// on hot paths and must not block.
	Owner(bucket int) string
	// Wake asks node to look at the instances ids (new mail, a spawn, a
	// cancel request, a hand-over). It does not block on the network and
	// may lose the wake-up: the store holds the work, and the owner's
	// recovery scan finds what a lost wake-up missed.
	Wake(node string, ids []string)
	// Leave tells the other nodes that this one is going, so that they take
	// its buckets at once. Stop calls it before stopping the activations;
	// from then on Owner no longer names this node.
	Leave(ctx context.Context) error
	// Close ends the cluster's work; Stop calls it last.
	Close() error
}

// ClusterHost is the node as its Cluster sees it.
type ClusterHost struct {
	// NodeID is the System's node ID; the cluster names the node by it.
	NodeID string
	// Wake makes the node look at instances another node woke. It does not
	// block.
	Wake func(ids []string)
	// Changed tells the node that ownership changed: it takes the buckets
	// it gained and hands over the instances of buckets it lost. Dead names
	// the nodes declared failed since the last call, whose leases the node
	// may take over before they expire; a cluster that cannot tell the
	// failure of others from its own isolation (it sees fewer than half of
	// the nodes it knew) leaves them out, and their leases then expire. It
	// does not block.
	Changed func(dead []string)
	// Logger is the node's logger.
	Logger *slog.Logger
}
