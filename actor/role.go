package actor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// origin says where a wake-up comes from, which decides what happens to
// one for an instance that another node owns.
type origin int

const (
	// fromHere: a commit, spawn, timer or scan of this node. A wake for an
	// instance owned elsewhere goes to its owner.
	fromHere origin = iota
	// fromPeer: another node sent it, believing this node the owner. It is
	// acted on here even if this node's view of the cluster differs: the
	// lease decides, and a later rebalance moves the instance if need be.
	fromPeer
	// fromStore: the store's notifications, which every node receives; the
	// owner acts on them, the others let them be.
	fromStore
)

// role is what the node is to the instances in its store, chosen once at
// Start from the Config (see newRole):
//   - alone: it hosts every instance; other processes sharing the store
//     divide the work by lease races.
//   - a cluster member: it hosts the instances of the buckets the cluster
//     gives it, and wake-ups for the others go to their owners.
//   - a client: it hosts nothing, and hands its wake-ups on: to the owners
//     in a cluster, else to the store's wake requests.
//
// The rest of the runtime asks the role and never looks at Config.Client
// or Config.Cluster itself.
type role interface {
	// hosts reports whether the node runs instances at all: activations,
	// timers, recovery scans, lease renewals.
	hosts() bool
	// owns reports whether the node should host instance id.
	owns(id string) bool
	// ownsBucket reports whether the node owns bucket b.
	ownsBucket(b int) bool
	// buckets lists the buckets whose timers and runnable instances the
	// node looks after; nil means all of them.
	buckets() []int
	// actsOn reports whether a wake-up for id that came from from is acted
	// on here; one that is not and came from here is passed to forward.
	actsOn(id string, from origin) bool
	// hearsAll reports that every wake-up reaches this node (no cluster
	// routes them to an owner): an instance whose lease another node
	// holds, by the node's own clock, is left alone without a write, and
	// on a store that tells no other process of a commit the wake-up is
	// handed on through its wake requests (see leaseHeldElsewhere).
	hearsAll() bool
	// forward hands on wake-ups for instances the node does not act on;
	// it may wait for a store, within ctx.
	forward(ctx context.Context, ids []string) error
	// join connects the node to its cluster, if it has one, and checks
	// that the cluster's view agrees with the role. Start calls it once.
	join(ctx context.Context, h ClusterHost) error
	// leave tells the cluster the node is going; close ends the cluster's
	// work. Stop calls them in that order.
	leave(ctx context.Context) error
	close() error
}

// newRole picks the role cfg describes; cfg.NodeID must be set.
func newRole(cfg Config) role {
	switch {
	case cfg.Client:
		return &clientRole{cluster: cfg.Cluster, node: cfg.NodeID, wr: cfg.Store}
	case cfg.Cluster != nil:
		return &memberRole{cluster: cfg.Cluster, node: cfg.NodeID}
	default:
		return aloneRole{}
	}
}

// RoleConflictError says that Start was given a Config that makes the node
// two things at once: a client (Config.Client), which runs no instances,
// and a cluster member that the cluster gives buckets to own, whose
// instances would then wait for a node that never runs them. Nothing was
// started. errors.Is(err, ErrInvalidInput) holds.
type RoleConflictError struct {
	NodeID  string
	Buckets int // how many buckets the cluster gives the node
}

func (e *RoleConflictError) Error() string {
	return fmt.Sprintf("norn: invalid input: Config.Client is set, but the cluster gives this node (%s) %d buckets to own: "+
		"join as a member that owns nothing (cluster.Config.Client)", e.NodeID, e.Buckets)
}

// Is makes errors.Is(err, ErrInvalidInput) true.
func (e *RoleConflictError) Is(target error) bool { return target == ErrInvalidInput }

// aloneRole: the node hosts every instance.
type aloneRole struct{}

func (aloneRole) hosts() bool                             { return true }
func (aloneRole) owns(string) bool                        { return true }
func (aloneRole) ownsBucket(int) bool                     { return true }
func (aloneRole) buckets() []int                          { return nil }
func (aloneRole) actsOn(string, origin) bool              { return true }
func (aloneRole) hearsAll() bool                          { return true }
func (aloneRole) forward(context.Context, []string) error { return nil }
func (aloneRole) join(context.Context, ClusterHost) error { return nil }
func (aloneRole) leave(context.Context) error             { return nil }
func (aloneRole) close() error                            { return nil }

// memberRole: the node hosts the instances of the buckets its cluster
// gives it.
type memberRole struct {
	cluster Cluster
	node    string
}

func (m *memberRole) hosts() bool           { return true }
func (m *memberRole) owns(id string) bool   { return m.ownsBucket(persistence.BucketOf(id)) }
func (m *memberRole) ownsBucket(b int) bool { return m.cluster.Owner(b) == m.node }
func (m *memberRole) buckets() []int        { return ownedBuckets(m.cluster, m.node) }
func (m *memberRole) hearsAll() bool        { return false }

func (m *memberRole) actsOn(id string, from origin) bool { return from == fromPeer || m.owns(id) }

func (m *memberRole) forward(_ context.Context, ids []string) error {
	wakeOwners(m.cluster, m.node, ids)
	return nil
}

func (m *memberRole) join(ctx context.Context, h ClusterHost) error {
	if err := m.cluster.Join(ctx, h); err != nil {
		return fmt.Errorf("norn: join cluster: %w", err)
	}
	return nil
}

func (m *memberRole) leave(ctx context.Context) error { return m.cluster.Leave(ctx) }
func (m *memberRole) close() error                    { return m.cluster.Close() }

// clientRole: the node hosts nothing. In a cluster (as a member that owns
// nothing) its wake-ups go to the owners; else to the store's wake
// requests, if it takes them (a store that notifies across processes
// needs none).
type clientRole struct {
	cluster Cluster // nil outside a cluster
	node    string
	// wr takes wake requests, where the store does (one that notifies
	// across processes needs none and answers ErrUnsupported).
	wr persistence.WakeRequester
}

// requestWakeTimeout bounds a client's wait for its wake request's commit.
const requestWakeTimeout = 10 * time.Second

func (c *clientRole) hosts() bool                { return false }
func (c *clientRole) owns(string) bool           { return false }
func (c *clientRole) ownsBucket(int) bool        { return false }
func (c *clientRole) buckets() []int             { return []int{} }
func (c *clientRole) actsOn(string, origin) bool { return false }
func (c *clientRole) hearsAll() bool             { return false } // it loads no instance

// forward waits for the wake request's commit, so that a command that
// exits right after a Cancel or Send has handed the wake-up on.
func (c *clientRole) forward(ctx context.Context, ids []string) error {
	if c.cluster != nil {
		wakeOwners(c.cluster, c.node, ids)
		return nil
	}
	if c.wr == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, requestWakeTimeout)
	defer cancel()
	if err := c.wr.RequestWake(ctx, ids); err != nil && !errors.Is(err, persistence.ErrUnsupported) {
		return err
	}
	return nil
}

func (c *clientRole) join(ctx context.Context, h ClusterHost) error {
	if c.cluster == nil {
		return nil
	}
	if err := c.cluster.Join(ctx, h); err != nil {
		return fmt.Errorf("norn: join cluster: %w", err)
	}
	if n := len(ownedBuckets(c.cluster, c.node)); n > 0 {
		return errors.Join(&RoleConflictError{NodeID: c.node, Buckets: n}, c.cluster.Leave(ctx), c.cluster.Close())
	}
	return nil
}

func (c *clientRole) leave(ctx context.Context) error {
	if c.cluster == nil {
		return nil
	}
	return c.cluster.Leave(ctx)
}

func (c *clientRole) close() error {
	if c.cluster == nil {
		return nil
	}
	return c.cluster.Close()
}

// ownedBuckets lists the buckets cluster gives node (never nil).
func ownedBuckets(cluster Cluster, node string) []int {
	out := []int{}
	for b := 0; b < persistence.NumBuckets; b++ {
		if cluster.Owner(b) == node {
			out = append(out, b)
		}
	}
	return out
}

// wakeOwners sends the wake-ups for ids to their owners, one message per
// owner. Those self owns by now are left out: the node acts on its own
// instances' wake-ups itself (a stopping one leaves them to the scan of
// the node that takes its buckets).
func wakeOwners(cluster Cluster, self string, ids []string) {
	byOwner := map[string][]string{}
	for _, id := range ids {
		if owner := cluster.Owner(persistence.BucketOf(id)); owner != self {
			byOwner[owner] = append(byOwner[owner], id)
		}
	}
	for owner, ids := range byOwner {
		cluster.Wake(owner, ids)
	}
}
