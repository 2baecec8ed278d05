package actor

import (
	"context"
	"log/slog"
	"time"

	"github.com/nornlabs/norn/persistence"
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

// Handing instances over after a rebalance is paced, so that a join does
// not passivate (and re-activate elsewhere) every moved instance at once.
const (
	handoverBatch = 32
	handoverPause = 20 * time.Millisecond
)

// clusterChanged is ClusterHost.Changed: it queues a rebalance.
func (s *System) clusterChanged(dead []string) {
	s.mu.Lock()
	s.dead = append(s.dead, dead...)
	s.mu.Unlock()
	select {
	case s.rebalanceCh <- struct{}{}:
	default:
	}
}

// ownedMask is the set of buckets this node owns now.
func (s *System) ownedMask() []bool {
	m := make([]bool, persistence.NumBuckets)
	for b := range m {
		m[b] = s.role.ownsBucket(b)
	}
	return m
}

// ownedBuckets lists the buckets this node owns; nil (all) when alone.
func (s *System) ownedBuckets() []int { return s.role.buckets() }

// runnable lists instances of the given buckets (nil: all) that need an
// activation and have none.
func (s *System) runnable(buckets []int) ([]string, error) {
	return s.store.Runnable(s.ctx, buckets, 10000)
}

func (s *System) rebalanceLoop() {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.rebalanceCh:
			s.rebalance()
		}
	}
}

// rebalance follows an ownership change: it takes over the leases of failed
// nodes, reloads timers, activates what the gained buckets need, and hands
// over the live activations of lost buckets.
func (s *System) rebalance() {
	s.mu.Lock()
	dead := s.dead
	s.dead = nil
	s.mu.Unlock()
	now := s.ownedMask()
	var gained []int
	for b, own := range now {
		if own && !s.owned[b] {
			gained = append(gained, b)
		}
	}
	s.owned = now
	taken := false
	for _, node := range dead {
		if node == s.cfg.NodeID {
			continue
		}
		// The failed node's activations are fenced from here on (the
		// epoch moves), so its instances can be taken before the leases
		// expire; were it only cut off, its next write fails.
		start := time.Now()
		if err := s.store.ReleaseLeases(s.ctx, node); err != nil {
			if s.ctx.Err() == nil {
				s.log.Warn("taking over the leases of a failed node failed; they will expire", "failed", node, "err", err)
			}
			continue
		}
		taken = true
		s.log.Info("took over the instances of a failed node", "failed", node, "release", time.Since(start))
		s.hook(HookEvent{Kind: HookLeaseTakeover, Name: node})
	}
	s.timers.Reload()
	scan := gained
	if taken {
		// Its instances may sit in buckets owned before, too (an
		// instance it was handing over, say).
		scan = s.ownedBuckets()
	}
	if len(scan) > 0 {
		ids, err := s.runnable(scan)
		if err != nil && s.ctx.Err() == nil {
			s.log.Warn("scanning gained buckets failed; the recovery scan will", "err", err)
		}
		s.wakeMany(ids)
	}
	s.handOver()
}

// handOver passivates the live activations of buckets this node no longer
// owns, a batch at a time; each one's end wakes its new owner. A newer
// rebalance interrupts it (and hands over what is still left).
func (s *System) handOver() {
	s.mu.Lock()
	var moving []*activation
	for id, a := range s.acts {
		if !s.owns(id) && !a.handover.Load() {
			moving = append(moving, a)
		}
	}
	s.mu.Unlock()
	for i, a := range moving {
		if i > 0 && i%handoverBatch == 0 {
			t := time.NewTimer(handoverPause)
			select {
			case <-s.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if len(s.rebalanceCh) > 0 {
				return
			}
		}
		s.mu.Lock()
		if s.acts[a.id] == a && !s.owns(a.id) {
			a.handover.Store(true)
			s.signalLocked(a, sigWake)
		}
		s.mu.Unlock()
	}
}

// ownership is the timer service's view of the buckets this node owns.
type ownership struct{ s *System }

func (o ownership) Owns(id string) bool { return o.s.owns(id) }

func (o ownership) Buckets() []int { return o.s.ownedBuckets() }
