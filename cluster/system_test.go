package cluster_test

// The tests in this file run whole nodes (store, cluster and System), each
// in its own process (the test binary re-executed in the role "node"), on
// one SQLite file with real gossip and remote wake-ups on loopback. The
// test process joins as a client member: it spawns, sends and awaits, and
// owns nothing.

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/cluster"
	"github.com/nornlabs/norn/internal/clusternode"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// nodeRoles are the child roles of this package's test binary.
var nodeRoles = map[string]func() int{"node": nodeRole}

// nodeRole runs a node until SIGTERM (graceful stop) or SIGKILL. SIGUSR1
// cuts it off from the others (gossip and wake-ups both ways), SIGUSR2
// heals it.
func nodeRole() int {
	ctx := context.Background()
	cfg := clusternode.Config{Store: os.Getenv("NODE_STORE"), NodeID: os.Getenv("NODE_ID"), Out: os.Stdout}
	if s := os.Getenv("NODE_SEEDS"); s != "" {
		cfg.Seeds = strings.Split(s, ",")
	}
	for env, d := range map[string]*time.Duration{"NODE_LEASE_TTL": &cfg.LeaseTTL, "NODE_RECOVERY": &cfg.RecoveryInterval} {
		if v := os.Getenv(env); v != "" {
			var err error
			if *d, err = time.ParseDuration(v); err != nil {
				return testutil.ChildFail("%s: %v", env, err)
			}
		}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGUSR2)
	n, err := clusternode.Start(ctx, cfg)
	if err != nil {
		return testutil.ChildFail("start: %v", err)
	}
	for sig := range sigs {
		switch sig {
		case syscall.SIGUSR1:
			cluster.SetPartitioned(n.Cluster, true)
			testutil.ChildSay("partitioned %s", cfg.NodeID)
		case syscall.SIGUSR2:
			cluster.SetPartitioned(n.Cluster, false)
			testutil.ChildSay("healed %s", cfg.NodeID)
		default:
			stop, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := n.Close(stop)
			cancel()
			if err != nil {
				return testutil.ChildFail("stop: %v", err)
			}
			testutil.ChildSay("stopped %s", cfg.NodeID)
			return 0
		}
	}
	return 0
}

// nodeSet is a test's node processes, its client, and what the nodes
// reported.
type nodeSet struct {
	t      *testing.T
	store  string
	env    []string
	nodes  map[string]*testutil.Child
	client *clusternode.Node

	mu     sync.Mutex
	seed   string
	ready  map[string]bool
	events []nodeEvent
}

// nodeEvent is one report line: "<what> <node> <instance> <n>".
type nodeEvent struct {
	what, node, instance string
	n                    int64 // a time (unix ns) or a lateness (ns)
}

func newNodeSet(t *testing.T, store string, env ...string) *nodeSet {
	return &nodeSet{t: t, store: store, env: env, nodes: map[string]*testutil.Child{}, ready: map[string]bool{}}
}

// threeNodes starts n1, n2 and n3 with env on an SQLite file and joins
// them as the client.
func threeNodes(t *testing.T, env ...string) *nodeSet {
	return threeNodesOn(t, testutil.SQLitePath(t), env...)
}

// threeNodesOn is threeNodes on the given store (a path or a URL).
func threeNodesOn(t *testing.T, store string, env ...string) *nodeSet {
	c := newNodeSet(t, store, env...)
	for _, n := range []string{"n1", "n2", "n3"} {
		c.start(n)
	}
	c.join()
	return c
}

// seen counts, under the set's lock, the events of kind what for the
// instance on the nodes that on accepts.
func (c *nodeSet) seen(what string, pid actor.PID, on func(node string) bool) int {
	n := 0
	for _, e := range c.events {
		if e.what == what && e.instance == string(pid) && on(e.node) {
			n++
		}
	}
	return n
}

func is(node string) func(string) bool  { return func(n string) bool { return n == node } }
func not(node string) func(string) bool { return func(n string) bool { return n != node } }

// start starts node name, joining the first node, and waits until it is
// up.
func (c *nodeSet) start(name string) {
	c.t.Helper()
	env := append([]string{"NODE_ID=" + name, "NODE_STORE=" + c.store}, c.env...)
	c.mu.Lock()
	if c.seed != "" {
		env = append(env, "NODE_SEEDS="+c.seed)
	}
	c.mu.Unlock()
	ch := testutil.StartChild(c.t, "node", env...)
	c.nodes[name] = ch
	go c.collect(ch)
	c.waitFor(name+" ready", func() bool { return c.ready[name] })
}

// join starts the test's client member once the nodes are up, and waits
// until it sees them all.
func (c *nodeSet) join() {
	c.t.Helper()
	n, err := clusternode.Start(testutil.Ctx(c.t, time.Minute), clusternode.Config{Store: c.store, NodeID: "client", Seeds: []string{c.seed}, Client: true,
		Logger: testutil.Logger()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		if err := n.Close(testutil.Ctx(c.t, 30*time.Second)); err != nil {
			c.t.Error(err)
		}
	})
	c.client = n
	c.waitMembers(len(c.nodes))
}

// waitMembers waits until the client sees n live nodes (clients aside).
func (c *nodeSet) waitMembers(n int) {
	c.t.Helper()
	testutil.Eventually(c.t, 30*time.Second, fmt.Sprintf("%d nodes alive", n), func() bool {
		alive := 0
		for _, m := range c.client.Cluster.Members() {
			if m.State == cluster.StateAlive && !m.Client {
				alive++
			}
		}
		return alive == n
	})
}

func (c *nodeSet) collect(ch *testutil.Child) {
	for l := range ch.Lines() {
		f := strings.Fields(l)
		c.mu.Lock()
		switch {
		case len(f) == 3 && f[0] == "ready":
			c.ready[f[1]] = true
			if c.seed == "" {
				c.seed = f[2]
			}
		case len(f) == 4:
			n, _ := strconv.ParseInt(f[3], 10, 64)
			c.events = append(c.events, nodeEvent{what: f[0], node: f[1], instance: f[2], n: n})
		case len(f) == 2:
			c.events = append(c.events, nodeEvent{what: f[0], node: f[1]})
		}
		c.mu.Unlock()
	}
}

// waitFor polls cond, under the set's lock, until it holds.
func (c *nodeSet) waitFor(what string, cond func() bool) {
	c.t.Helper()
	testutil.Eventually(c.t, 30*time.Second, what, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return cond()
	})
}

// waitSaid waits for a line "<what> <node>".
func (c *nodeSet) waitSaid(what, node string) {
	c.t.Helper()
	c.waitFor(node+" said "+what, func() bool {
		for _, e := range c.events {
			if e.what == what && e.node == node {
				return true
			}
		}
		return false
	})
}

// last returns the node of the latest event of kind what for the instance.
func (c *nodeSet) last(what, instance string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	node := ""
	for _, e := range c.events {
		if e.what == what && e.instance == instance {
			node = e.node
		}
	}
	return node
}

// count counts the events of kind what for the instance (any node if node
// is empty).
func (c *nodeSet) count(what, node, instance string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.events {
		if e.what == what && e.instance == instance && (node == "" || e.node == node) {
			n++
		}
	}
	return n
}

func (c *nodeSet) owner(pid actor.PID) string {
	return c.client.Cluster.Owner(persistence.BucketOf(string(pid)))
}

// spawnSleepers spawns n sleepers due at until and waits until each is
// live on its owner; it returns them by owner.
func (c *nodeSet) spawnSleepers(prefix string, n int, until time.Time) map[string][]actor.PID {
	c.t.Helper()
	ctx := testutil.Ctx(c.t, time.Minute)
	byOwner := map[string][]actor.PID{}
	for i := range n {
		pid, err := actor.Spawn(ctx, c.client.Sys, c.client.Sleeper, clusternode.SleepInput{Until: until}, actor.WithID(fmt.Sprintf("%s-%03d", prefix, i)))
		if err != nil {
			c.t.Fatal(err)
		}
		byOwner[c.owner(pid)] = append(byOwner[c.owner(pid)], pid)
	}
	for owner, pids := range byOwner {
		for _, pid := range pids {
			c.waitFor(fmt.Sprintf("%s live on %s", pid, owner), func() bool { return c.seen("activated", pid, is(owner)) > 0 })
		}
	}
	return byOwner
}

// most returns the node that owns the most of byOwner.
func most(byOwner map[string][]actor.PID) string {
	best := ""
	for n, pids := range byOwner {
		if best == "" || len(pids) > len(byOwner[best]) || len(pids) == len(byOwner[best]) && n < best {
			best = n
		}
	}
	return best
}

// firedInHistory counts the instance's timer_fired events.
func (c *nodeSet) firedInHistory(pid actor.PID) int {
	c.t.Helper()
	hist, err := c.client.Sys.History(testutil.Ctx(c.t, 30*time.Second), pid)
	if err != nil {
		c.t.Fatal(err)
	}
	n := 0
	for _, e := range hist {
		if e.Kind == actor.EventTimerFired {
			n++
		}
	}
	return n
}

// kill -9 of a node: its instances' timers fire on the others, each exactly
// once, without waiting for its leases to expire (an hour here). Set
// NORN_CLUSTER_KILL_LOOPS to repeat it.
func TestNodesKill9TimersFireElsewhere(t *testing.T) {
	loops := 1
	if s := os.Getenv("NORN_CLUSTER_KILL_LOOPS"); s != "" {
		loops, _ = strconv.Atoi(s)
	}
	stores := []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return testutil.SQLitePath(t) }},
		{"postgres", func(t *testing.T) string { return testutil.PostgresURL(t) }},
	}
	for i := range loops {
		for _, st := range stores {
			t.Run(fmt.Sprintf("%s/run%d", st.name, i), func(t *testing.T) {
				if testutil.InOwnProcess(t) { // it starts a remote endpoint in this process
					return
				}
				killNine(t, threeNodesOn(t, st.url(t), "NODE_LEASE_TTL=1h"))
			})
		}
	}
}

func killNine(t *testing.T, c *nodeSet) {
	due := time.Now().Add(4 * time.Second)
	byOwner := c.spawnSleepers("sleeper", 40, due)
	victim := most(byOwner)
	if time.Now().After(due) {
		t.Skip("the machine is too slow: the timers came due before the kill")
	}
	c.nodes[victim].Kill9(t)
	ctx := testutil.Ctx(t, time.Minute)
	for owner, pids := range byOwner {
		for _, pid := range pids {
			ranOn, err := actor.Await(ctx, c.client.Sys, c.client.Sleeper, pid)
			if err != nil {
				t.Fatalf("%s: %v", pid, err)
			}
			if owner == victim && ranOn == victim {
				t.Errorf("%s finished on the killed node %s", pid, victim)
			}
			if n := c.firedInHistory(pid); n != 1 {
				t.Errorf("%s: %d timer_fired events, want 1", pid, n)
			}
			// The report comes after the commit, which Await may see first.
			testutil.Eventually(t, 10*time.Second, string(pid)+" reported fired", func() bool {
				return c.count("fired", "", string(pid)) >= 1
			})
			if n := c.count("fired", "", string(pid)); n != 1 {
				t.Errorf("%s: the nodes fired its timer %d times, want 1", pid, n)
			}
		}
	}
	t.Logf("killed %s holding %d of 40 sleepers; all fired once elsewhere", victim, len(byOwner[victim]))
}

// Messages sent by PID between instances on different nodes all arrive,
// once each.
func TestNodesMessagesCrossNodes(t *testing.T) {
	if testutil.InOwnProcess(t) { // it starts a remote endpoint in this process
		return
	}
	c := threeNodes(t)
	ctx := testutil.Ctx(t, time.Minute)
	const rounds = 5
	var pingers, pongers []actor.PID
	for i := 0; len(pingers) < 6; i++ {
		ping, pong := actor.PID(fmt.Sprintf("ping-%d", i)), actor.PID(fmt.Sprintf("pong-%d", i))
		if c.owner(ping) == c.owner(pong) {
			continue
		}
		if _, err := actor.Spawn(ctx, c.client.Sys, clusternode.Ponger, rounds, actor.WithID(string(pong))); err != nil {
			t.Fatal(err)
		}
		if _, err := actor.Spawn(ctx, c.client.Sys, clusternode.Pinger, clusternode.PingInput{Peer: pong, Times: rounds}, actor.WithID(string(ping))); err != nil {
			t.Fatal(err)
		}
		pingers, pongers = append(pingers, ping), append(pongers, pong)
	}
	for i, ping := range pingers {
		if n, err := actor.Await(ctx, c.client.Sys, clusternode.Pinger, ping); err != nil || n != rounds {
			t.Fatalf("%s: Await = %d, %v", ping, n, err)
		}
		if n, err := actor.Await(ctx, c.client.Sys, clusternode.Ponger, pongers[i]); err != nil || n != rounds {
			t.Fatalf("%s: Await = %d, %v", pongers[i], n, err)
		}
		for _, pid := range []actor.PID{ping, pongers[i]} {
			hist, err := c.client.Sys.History(ctx, pid)
			if err != nil {
				t.Fatal(err)
			}
			received := 0
			for _, e := range hist {
				if e.Kind == actor.EventReceived {
					received++
				}
			}
			if received != rounds {
				t.Errorf("%s received %d messages, want %d", pid, received, rounds)
			}
			// The node reports the completion after its commit, which Await
			// may see first.
			testutil.Eventually(t, 10*time.Second, string(pid)+" reported completed", func() bool {
				return c.last("completed", string(pid)) != ""
			})
			if got := c.last("completed", string(pid)); got != c.owner(pid) {
				t.Errorf("%s completed on %q, its owner is %s", pid, got, c.owner(pid))
			}
		}
	}
}

// A node that stops gracefully hands its instances to the others at once:
// its leases (an hour) and the recovery scan (an hour) play no part.
func TestNodesGracefulLeaveHandsOver(t *testing.T) {
	if testutil.InOwnProcess(t) { // it starts a remote endpoint in this process
		return
	}
	c := threeNodes(t, "NODE_LEASE_TTL=1h", "NODE_RECOVERY=1h")
	byOwner := c.spawnSleepers("stay", 30, time.Now().Add(time.Hour))
	victim := most(byOwner)
	c.nodes[victim].Signal(t, syscall.SIGTERM)
	c.waitSaid("stopped", victim)
	c.waitFor("the leaver's instances live elsewhere", func() bool {
		for _, pid := range byOwner[victim] {
			if c.seen("activated", pid, not(victim)) == 0 {
				return false
			}
		}
		return true
	})
}

// A fourth node joining takes its share: the moved instances are handed
// over (passivated, then activated on the newcomer) and no instance is
// ever live on two nodes at once.
func TestNodesJoinMovesShareWithoutOverlap(t *testing.T) {
	if testutil.InOwnProcess(t) { // it starts a remote endpoint in this process
		return
	}
	c := threeNodes(t, "NODE_RECOVERY=1h")
	byOwner := c.spawnSleepers("share", 60, time.Now().Add(time.Hour))
	c.start("n4")
	c.waitMembers(4)
	// The client's view of who owns what follows its membership list a
	// moment later: wait until it gives n4 its share.
	var moved []actor.PID
	testutil.Eventually(t, 30*time.Second, "n4 owns some of the instances (the test needs some)", func() bool {
		moved = moved[:0]
		for _, pids := range byOwner {
			for _, pid := range pids {
				if c.owner(pid) == "n4" {
					moved = append(moved, pid)
				}
			}
		}
		return len(moved) > 0
	})
	c.waitFor("n4 hosts its share", func() bool {
		for _, pid := range moved {
			if c.seen("activated", pid, is("n4")) == 0 {
				return false
			}
		}
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := overlaps(c.events); err != nil {
		t.Fatal(err)
	}
}

// overlaps checks, from the nodes' reports (stamped on one host clock),
// that no instance was live on two nodes at once.
func overlaps(events []nodeEvent) error {
	byInstance := map[string][]nodeEvent{}
	for _, e := range events {
		switch e.what {
		case "activated", "passivated", "lost", "completed":
			byInstance[e.instance] = append(byInstance[e.instance], e)
		}
	}
	for id, es := range byInstance {
		sort.SliceStable(es, func(i, j int) bool { return es[i].n < es[j].n })
		live := ""
		for _, e := range es {
			switch {
			case e.what == "activated" && live != "" && live != e.node:
				return fmt.Errorf("%s activated on %s while live on %s", id, e.node, live)
			case e.what == "activated":
				live = e.node
			case e.node == live:
				live = ""
			}
		}
	}
	return nil
}

// A node cut off from the others (gossip and wake-ups, not the store) is
// declared dead: the others take its instances over, and it stops its own
// activations when it finds its leases gone; it takes nothing from the
// others meanwhile (it sees too few nodes to trust its view). Healed, it
// rejoins and gets a share back.
func TestNodesPartitionAndHeal(t *testing.T) {
	if testutil.InOwnProcess(t) { // it starts a remote endpoint in this process
		return
	}
	c := threeNodes(t, "NODE_LEASE_TTL=2s", "NODE_RECOVERY=1h")
	byOwner := c.spawnSleepers("cut", 40, time.Now().Add(time.Hour))
	victim := most(byOwner)
	c.nodes[victim].Signal(t, syscall.SIGUSR1)
	c.waitSaid("partitioned", victim)
	c.waitMembers(2)
	c.waitFor("the others took the cut-off node's instances, and it stopped them", func() bool {
		for _, pid := range byOwner[victim] {
			if c.seen("activated", pid, not(victim)) == 0 || c.seen("lost", pid, is(victim)) == 0 {
				return false
			}
		}
		return true
	})
	for owner, pids := range byOwner {
		if owner == victim {
			continue
		}
		for _, pid := range pids {
			if n := c.count("activated", victim, string(pid)); n != 0 {
				t.Errorf("the cut-off node took %s from %s", pid, owner)
			}
		}
	}
	c.nodes[victim].Signal(t, syscall.SIGUSR2)
	c.waitMembers(3)
	c.waitFor("the healed node hosts a share again", func() bool {
		for _, pids := range byOwner {
			for _, pid := range pids {
				// Its first life, and again after the heal.
				if c.owner(pid) == victim && c.seen("activated", pid, is(victim)) >= 2 {
					return true
				}
			}
		}
		return false
	})
}

// Hooks report facts: a node that fires a timer and is then fenced (cut
// off and declared failed, or killed before its commit) reports nothing
// for that firing, so that across the cluster every timer is reported
// fired exactly as often as its history holds a firing: once. The timers
// come due while the node is being cut off or killed, spread over a few
// seconds, so that some firings race the takeover.
func TestNodesFiringsReportedOnceAcrossFailures(t *testing.T) {
	for _, how := range []string{"partition", "kill9"} {
		t.Run(how, func(t *testing.T) {
			if testutil.InOwnProcess(t) { // it starts a remote endpoint in this process
				return
			}
			c := threeNodes(t, "NODE_LEASE_TTL=2s")
			start := time.Now()
			byOwner := map[string][]actor.PID{}
			for g := range 6 {
				due := start.Add(time.Duration(1500+800*g) * time.Millisecond)
				for owner, pids := range c.spawnSleepers(fmt.Sprintf("%s-g%d", how, g), 8, due) {
					byOwner[owner] = append(byOwner[owner], pids...)
				}
			}
			victim := most(byOwner)
			if how == "partition" {
				c.nodes[victim].Signal(t, syscall.SIGUSR1)
			} else {
				c.nodes[victim].Kill9(t)
			}
			ctx := testutil.Ctx(t, time.Minute)
			for _, pids := range byOwner {
				for _, pid := range pids {
					if _, err := actor.Await(ctx, c.client.Sys, c.client.Sleeper, pid); err != nil {
						t.Fatalf("%s: %v", pid, err)
					}
				}
			}
			for owner, pids := range byOwner {
				for _, pid := range pids {
					inHistory := c.firedInHistory(pid)
					if inHistory != 1 {
						t.Errorf("%s: history holds %d firings, want 1", pid, inHistory)
						continue
					}
					// A node reports a firing after its commit, which Await
					// may see first: wait for the report. A kill -9'd node
					// may die between the two, and its report with it.
					lost := how == "kill9" && owner == victim
					if !lost {
						testutil.Eventually(t, 10*time.Second, string(pid)+" reported fired", func() bool {
							return c.count("fired", "", string(pid)) >= 1
						})
					}
					if reported := c.count("fired", "", string(pid)); reported > 1 || reported == 0 && !lost {
						t.Errorf("%s: reported fired %d times, history holds 1 firing", pid, reported)
					}
				}
			}
		})
	}
}
