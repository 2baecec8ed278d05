package actor_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// tableNet joins Systems of one process into a cluster whose membership the
// test sets by hand: it exercises the System's side of actor.Cluster
// (routing, hand-over, take-over); package cluster has the gossip side.
type tableNet struct {
	mu    sync.Mutex
	hosts map[string]actor.ClusterHost
	alive map[string]bool
}

func newTableNet() *tableNet {
	return &tableNet{hosts: map[string]actor.ClusterHost{}, alive: map[string]bool{}}
}

// node is one member's view: the shared table.
func (n *tableNet) node() actor.Cluster { return &tableNode{net: n} }

// set changes the alive members and tells every alive host.
func (n *tableNet) set(alive []string, dead []string) {
	n.mu.Lock()
	n.alive = map[string]bool{}
	for _, a := range alive {
		n.alive[a] = true
	}
	var hs []actor.ClusterHost
	for name, h := range n.hosts {
		if n.alive[name] {
			hs = append(hs, h)
		}
	}
	n.mu.Unlock()
	for _, h := range hs {
		h.Changed(dead)
	}
}

func (n *tableNet) owner(b int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	best, bestW := "", uint64(0)
	for name := range n.alive {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%d", name, b)
		if w := h.Sum64(); best == "" || w > bestW || (w == bestW && name < best) {
			best, bestW = name, w
		}
	}
	return best
}

type tableNode struct {
	net  *tableNet
	name string
	left atomic.Bool
}

func (c *tableNode) Join(_ context.Context, h actor.ClusterHost) error {
	c.name = h.NodeID
	c.net.mu.Lock()
	c.net.hosts[h.NodeID] = h
	c.net.mu.Unlock()
	return nil
}

func (c *tableNode) Owner(b int) string {
	if c.left.Load() {
		return ""
	}
	return c.net.owner(b)
}

func (c *tableNode) Wake(node string, ids []string) {
	c.net.mu.Lock()
	h, ok := c.net.hosts[node]
	up := c.net.alive[node]
	c.net.mu.Unlock()
	if ok && up {
		h.Wake(ids)
	}
}

func (c *tableNode) Leave(context.Context) error {
	c.net.mu.Lock()
	delete(c.net.alive, c.name)
	var rest []string
	for name := range c.net.alive {
		rest = append(rest, name)
	}
	c.net.mu.Unlock()
	c.left.Store(true)
	c.net.set(rest, nil)
	return nil
}

func (c *tableNode) Close() error {
	c.net.mu.Lock()
	delete(c.net.hosts, c.name)
	c.net.mu.Unlock()
	return nil
}

// liveness counts, per instance, the activations that are live on any node,
// and remembers the highest count seen.
type liveness struct {
	mu        sync.Mutex
	live      map[string]int
	where     map[string][]string // nodes that activated it, in order
	lost      map[string]int      // per node: activations stopped because their lease was taken
	takeovers map[string]int      // per node: take-overs of a failed node's leases
	stopped   map[string]int      // per node: activations that ended, for any reason
	max       int
}

func newLiveness() *liveness {
	return &liveness{live: map[string]int{}, where: map[string][]string{}, lost: map[string]int{}, takeovers: map[string]int{}, stopped: map[string]int{}}
}

func (l *liveness) hooks(node string) actor.Hooks {
	return hookFunc(func(e actor.HookEvent) {
		l.mu.Lock()
		defer l.mu.Unlock()
		switch e.Kind {
		case actor.HookInstanceActivated:
			l.live[e.Instance]++
			l.where[e.Instance] = append(l.where[e.Instance], node)
			l.max = max(l.max, l.live[e.Instance])
		case actor.HookInstancePassivated, actor.HookInstanceCompleted, actor.HookInstanceFailed, actor.HookInstanceCancelled:
			l.live[e.Instance]--
		case actor.HookInstanceLost:
			l.live[e.Instance]--
			l.lost[node]++
		case actor.HookLeaseTakeover:
			l.takeovers[node]++
		case actor.HookInstanceStopped:
			l.stopped[node]++
		}
	})
}

func (l *liveness) nodes(id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.where[id]...)
}

var waitMsg = actor.Workflow("cluster-wait", func(ctx *actor.Context, _ int) (string, error) {
	m, err := actor.Receive[string](ctx)
	return m.Value, err
})

func startClusterNode(t *testing.T, st persistence.Store, net *tableNet, name string, l *liveness) *actor.System {
	return testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(waitMsg), NodeID: name,
		Cluster: net.node(), Hooks: l.hooks(name)})
}

// Instances spawned and messaged from one node run on the nodes that own
// them; the wake-ups cross over.
func TestClusterRoutesToOwner(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	net := newTableNet()
	net.set([]string{"a", "b"}, nil)
	l := newLiveness()
	a := startClusterNode(t, st, net, "a", l)
	startClusterNode(t, st, net, "b", l)
	ctx := testutil.Ctx(t, 60*time.Second)
	var pids []actor.PID
	onB := 0
	for i := range 40 {
		pid, err := actor.Spawn(ctx, a, waitMsg, 0, actor.WithID(fmt.Sprintf("route-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if net.owner(persistence.BucketOf(string(pid))) == "b" {
			onB++
		}
		pids = append(pids, pid)
	}
	if onB == 0 || onB == len(pids) {
		t.Fatalf("the test needs instances on both nodes; b owns %d of %d", onB, len(pids))
	}
	for _, pid := range pids {
		if err := a.Send(ctx, pid, "hi "+string(pid)); err != nil {
			t.Fatal(err)
		}
	}
	for _, pid := range pids {
		got, err := actor.Await(ctx, a, waitMsg, pid)
		if err != nil || got != "hi "+string(pid) {
			t.Fatalf("%s: Await = %q, %v", pid, got, err)
		}
		owner := net.owner(persistence.BucketOf(string(pid)))
		for _, n := range l.nodes(string(pid)) {
			if n != owner {
				t.Errorf("%s owned by %s was activated on %s (activations %v)", pid, owner, n, l.nodes(string(pid)))
			}
		}
	}
}

// A node joining takes its share: the old owner hands each moved instance
// over (passivate, release, wake the new owner) and no instance is ever live
// on two nodes at once.
func TestClusterJoinHandsOver(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	net := newTableNet()
	net.set([]string{"a"}, nil)
	l := newLiveness()
	a := startClusterNode(t, st, net, "a", l)
	ctx := testutil.Ctx(t, 60*time.Second)
	var pids []actor.PID
	for i := range 60 {
		pid, err := actor.Spawn(ctx, a, waitMsg, 0, actor.WithID(fmt.Sprintf("move-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	testutil.Eventually(t, 30*time.Second, "all live on a", func() bool {
		for _, pid := range pids {
			if len(l.nodes(string(pid))) == 0 {
				return false
			}
		}
		return true
	})
	startClusterNode(t, st, net, "b", l)
	net.set([]string{"a", "b"}, nil)
	moved := 0
	for _, pid := range pids {
		if net.owner(persistence.BucketOf(string(pid))) == "b" {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no instance moved to b; the test needs some")
	}
	testutil.Eventually(t, 30*time.Second, "moved instances live on b", func() bool {
		for _, pid := range pids {
			ns := l.nodes(string(pid))
			if net.owner(persistence.BucketOf(string(pid))) == "b" && ns[len(ns)-1] != "b" {
				return false
			}
		}
		return true
	})
	for _, pid := range pids {
		if err := a.Send(ctx, pid, "done"); err != nil {
			t.Fatal(err)
		}
	}
	for _, pid := range pids {
		if got, err := actor.Await(ctx, a, waitMsg, pid); err != nil || got != "done" {
			t.Fatalf("%s: Await = %q, %v", pid, got, err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max != 1 {
		t.Fatalf("an instance was live on two nodes at once (max %d)", l.max)
	}
}

// When the cluster declares a node dead, the others take its instances at
// once, without waiting for its leases to expire; the "dead" node, if it is
// only cut off, is fenced.
func TestClusterTakesOverDeadNode(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	net := newTableNet()
	net.set([]string{"a", "b"}, nil)
	l := newLiveness()
	a := startClusterNode(t, st, net, "a", l)
	// b stays up and keeps renewing its leases: only the take-over can
	// explain its instances running on a.
	// New instances park without a store call: only the park watch sees it.
	var parked parkCounter
	parks := actor.WatchParks(l.hooks("b"))
	parks.OnPark(func(id string) { parked.inc(id) })
	b := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(waitMsg), NodeID: "b",
		Cluster: net.node(), Hooks: parks, LeaseTTL: time.Second})
	ctx := testutil.Ctx(t, 60*time.Second)
	var onB []actor.PID
	for i := 0; len(onB) < 10; i++ {
		id := fmt.Sprintf("dead-%d", i)
		if net.owner(persistence.BucketOf(id)) != "b" {
			continue
		}
		pid, err := actor.Spawn(ctx, b, waitMsg, 0, actor.WithID(id))
		if err != nil {
			t.Fatal(err)
		}
		onB = append(onB, pid)
	}
	// Parked in Receive on b, not only launched.
	testutil.Eventually(t, 30*time.Second, "parked on b", func() bool {
		for _, pid := range onB {
			if len(l.nodes(string(pid))) == 0 || parked.get(string(pid)) == 0 {
				return false
			}
		}
		return true
	})
	// b is cut off: it no longer hears wake-ups, and a is told it failed.
	net.set([]string{"a"}, []string{"b"})
	// Send once a has taken b's instances over: a Send that came first
	// would still wake b, whose activation would read the message and be
	// fenced at its write rather than stopped at its renewal.
	testutil.Eventually(t, 30*time.Second, "a took over b's leases", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.takeovers["a"] > 0
	})
	// b finds at its next renewal that its leases were taken, and stops
	// the activations it still had, without writing. (Before the sends:
	// one that a wake reached first would be fenced at its write instead,
	// and not counted as lost.)
	testutil.Eventually(t, 30*time.Second, "b stopped its taken-over activations", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.stopped["b"] == len(onB) && l.lost["b"] == len(onB)
	})
	for _, pid := range onB {
		if err := a.Send(ctx, pid, "taken"); err != nil {
			t.Fatal(err)
		}
	}
	for _, pid := range onB {
		if got, err := actor.Await(ctx, a, waitMsg, pid); err != nil || got != "taken" {
			t.Fatalf("%s: Await = %q, %v", pid, got, err)
		}
		if ns := l.nodes(string(pid)); ns[len(ns)-1] != "a" {
			t.Fatalf("%s finished, but its last activation was on %v", pid, ns)
		}
	}
}
