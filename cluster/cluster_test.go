package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/nornlabs/norn/cluster"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

func TestMain(m *testing.M) {
	testutil.RunChildRole(nodeRoles) // system_test.go: whole nodes
	if raw := os.Getenv(childEnv); raw != "" {
		os.Exit(runChild(raw))
	}
	code := m.Run()
	testutil.StopPostgres() // system_test.go may have started one
	if code == 0 {
		if err := findLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// findLeaks is goleak.Find, patient for longer than its second or so:
// gRPC's client connections to a stopped remote end in the background,
// which on a loaded machine takes seconds.
func findLeaks() error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := goleak.Find(protoactorGoroutines()...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// protoactorGoroutines are goroutines of protoactor that Close cannot end.
func protoactorGoroutines() []goleak.Option {
	return []goleak.Option{
		// The event stream keeps a goroutine per ActorSystem past Shutdown;
		// there is no way to stop it.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.(*EventStream).Publish"),
		// A dead letter (such as a stop request to an actor that stopped
		// already) starts a throttle timer goroutine that ends by itself
		// after DeadLetterThrottleInterval (1s); nothing can end it sooner.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
	}
}

// wait bounds every wait of a test; it is a deadline, not a measurement.
const wait = 30 * time.Second

// startN starts nodes node-1..node-n, each joining node-1.
func startN(t *testing.T, n int) []*proc {
	t.Helper()
	nodes := []*proc{spawn(t, spec{Name: "node-1"})}
	for i := 2; i <= n; i++ {
		nodes = append(nodes, spawn(t, spec{Name: "node-" + strconv.Itoa(i), Seeds: []string{nodes[0].self.GossipAddr}}))
	}
	return nodes
}

func namesOf(nodes ...*proc) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.name)
	}
	return out
}

// ownerTable is c's ownership of every bucket.
func ownerTable(c *cluster.Cluster) []string {
	out := make([]string, persistence.NumBuckets)
	for b := range out {
		out[b] = c.Owner(b)
	}
	return out
}

// distinct are the names in a table, sorted, once each.
func distinct(table []string) []string {
	out := slices.Clone(table)
	slices.Sort(out)
	return slices.Compact(out)
}

// agree waits until every node's table has exactly the owners want, the
// same on all, and returns it.
func agree(t *testing.T, nodes []*proc, want ...string) []string {
	t.Helper()
	slices.Sort(want)
	var table []string
	testutil.Eventually(t, wait, "nodes agree on owners", func() bool {
		table = nodes[0].owners()
		if !slices.Equal(distinct(table), want) {
			return false
		}
		for _, n := range nodes[1:] {
			if !slices.Equal(n.owners(), table) {
				return false
			}
		}
		return true
	})
	return table
}

// stateOf is n's view of the member named name.
func stateOf(n *proc, name string) (cluster.MemberState, bool) {
	for _, m := range n.members() {
		if m.Name == name {
			return m.State, true
		}
	}
	return 0, false
}

func TestAloneOwnsEverything(t *testing.T) {
	if testutil.InOwnProcess(t) { // it starts a remote endpoint in this process
		return
	}
	c, err := cluster.New(cluster.Loopback())
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Owner(0); got != "" {
		t.Fatalf("owner before Join = %q, want none", got)
	}
	if err := c.Join(testutil.Ctx(t, wait), (&host{}).of("alone", testutil.Logger())); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := distinct(ownerTable(c)); !slices.Equal(got, []string{"alone"}) {
		t.Fatalf("owners of a lone node = %v", got)
	}
	ms := c.Members()
	if len(ms) != 1 || ms[0].Name != "alone" || ms[0].State != cluster.StateAlive || ms[0].RemoteAddr == "" {
		t.Fatalf("members of a lone node = %+v", ms)
	}
	if err := c.Leave(testutil.Ctx(t, wait)); err != nil {
		t.Fatal(err)
	}
	if got := distinct(ownerTable(c)); !slices.Equal(got, []string{""}) {
		t.Fatalf("owners after the lone node left = %v", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestWakeSelf(t *testing.T) {
	if testutil.InOwnProcess(t) { // it starts a remote endpoint in this process
		return
	}
	c, err := cluster.New(cluster.Loopback())
	if err != nil {
		t.Fatal(err)
	}
	h := &host{}
	if err := c.Join(testutil.Ctx(t, wait), h.of("self", testutil.Logger())); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Wake("self", []string{"i-1"})
	c.Wake("nobody", []string{"i-2"}) // dropped: no such member
	c.Wake("self", []string{"i-3"})
	testutil.Eventually(t, wait, "the node wakes itself", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return slices.Equal(h.wakes, []string{"i-1", "i-3"})
	})
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		field string
		edit  func(*cluster.Config)
	}{
		{"SecretKey", func(c *cluster.Config) { c.SecretKey = []byte("short") }},
		{"GossipBindPort", func(c *cluster.Config) { c.GossipBindPort = 70000 }},
		{"GossipBindAddr", func(c *cluster.Config) { c.GossipBindAddr = "localhost" }},
		{"RemoteServerTLS", func(c *cluster.Config) { c.RemoteClientTLS = newCA(t).clientTLS(t) }},
		{"RejoinInterval", func(c *cluster.Config) { c.RejoinInterval = -time.Second }},
	} {
		cfg := cluster.Loopback()
		tc.edit(&cfg)
		_, err := cluster.New(cfg)
		var ce *cluster.ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, cluster.ErrInvalidConfig) {
			t.Errorf("New with a bad %s: %v", tc.field, err)
		}
	}
	if _, err := cluster.New(cluster.Config{}); err != nil {
		t.Errorf("New with the zero Config: %v", err)
	}
}

func TestJoinTwiceAndAfterClose(t *testing.T) {
	if testutil.InOwnProcess(t) { // it starts a remote endpoint in this process
		return
	}
	c, err := cluster.New(cluster.Loopback())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Join(testutil.Ctx(t, wait), (&host{}).of("a", testutil.Logger())); err != nil {
		t.Fatal(err)
	}
	if err := c.Join(context.Background(), (&host{}).of("a", testutil.Logger())); !errors.Is(err, cluster.ErrJoined) {
		t.Fatalf("second Join: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Join(context.Background(), (&host{}).of("a", testutil.Logger())); !errors.Is(err, cluster.ErrClosed) {
		t.Fatalf("Join after Close: %v", err)
	}
}

func TestMembershipConverges(t *testing.T) {
	nodes := startN(t, 3)
	table := agree(t, nodes, namesOf(nodes...)...)

	counts := map[string]int{}
	for _, o := range table {
		counts[o]++
	}
	for _, n := range nodes {
		// About a third each; a third of that is far out of chance.
		if counts[n.name] < persistence.NumBuckets/9 {
			t.Errorf("%s owns %d of %d buckets", n.name, counts[n.name], persistence.NumBuckets)
		}
	}
	for _, n := range nodes {
		ms := n.members()
		if len(ms) != 3 {
			t.Fatalf("%s lists %d members: %+v", n.name, len(ms), ms)
		}
		for _, m := range ms {
			if m.State != cluster.StateAlive || m.GossipAddr == "" || m.RemoteAddr == "" {
				t.Errorf("%s lists %+v", n.name, m)
			}
		}
	}
	for _, n := range nodes {
		n.close() // checks for leaked goroutines
	}
}

func TestJoinMovesOnlyTheNewcomersShare(t *testing.T) {
	nodes := startN(t, 4)
	before := agree(t, nodes, namesOf(nodes...)...)

	newcomer := spawn(t, spec{Name: "node-5", Seeds: []string{nodes[1].self.GossipAddr}})
	nodes = append(nodes, newcomer)
	after := agree(t, nodes, namesOf(nodes...)...)

	moved := 0
	for b := range before {
		if before[b] != after[b] {
			moved++
			if after[b] != newcomer.name {
				t.Fatalf("bucket %d moved from %s to %s, not to the newcomer", b, before[b], after[b])
			}
		}
	}
	// About 1/5 of the buckets; the bounds are far out of chance.
	if lo, hi := persistence.NumBuckets/10, persistence.NumBuckets*3/10; moved < lo || moved > hi {
		t.Fatalf("%d of %d buckets moved, want about %d", moved, persistence.NumBuckets, persistence.NumBuckets/5)
	}
}

func TestWakeReachesTheNode(t *testing.T) {
	nodes := startN(t, 2)
	a, b := nodes[0], nodes[1]
	agree(t, nodes, a.name, b.name)

	a.wake(b.name, "i-1", "i-2")
	testutil.Eventually(t, wait, "b is woken", func() bool {
		return slices.Equal(b.woken(), []string{"i-1", "i-2"})
	})
	b.wake(a.name, "i-3")
	testutil.Eventually(t, wait, "a is woken", func() bool {
		return slices.Equal(a.woken(), []string{"i-3"})
	})
	a.close()
	b.close()
}

func TestCrashIsReportedDead(t *testing.T) {
	nodes := startN(t, 3)
	a, b, c := nodes[0], nodes[1], nodes[2]
	agree(t, nodes, namesOf(nodes...)...)

	c.kill()
	for _, n := range []*proc{a, b} {
		testutil.Eventually(t, wait, n.name+" reports "+c.name+" dead", func() bool {
			return slices.Contains(n.dead(), c.name)
		})
		if st, _ := stateOf(n, c.name); st != cluster.StateDead {
			t.Errorf("%s lists %s as %v", n.name, c.name, st)
		}
	}
	agree(t, []*proc{a, b}, a.name, b.name)
}

func TestLeaveIsNotDeath(t *testing.T) {
	nodes := startN(t, 3)
	a, b, c := nodes[0], nodes[1], nodes[2]
	agree(t, nodes, namesOf(nodes...)...)

	if got := distinct(c.leave()); slices.Contains(got, c.name) {
		t.Fatalf("%s still owns buckets right after its Leave: owners %v", c.name, got)
	}
	agree(t, []*proc{a, b}, a.name, b.name)
	for _, n := range []*proc{a, b} {
		testutil.Eventually(t, wait, n.name+" sees "+c.name+" left", func() bool {
			st, ok := stateOf(n, c.name)
			return ok && st == cluster.StateLeft
		})
	}
	c.close()
	for _, n := range []*proc{a, b} {
		if d := n.dead(); len(d) > 0 {
			t.Errorf("%s reported dead %v after a graceful leave", n.name, d)
		}
	}
}

func TestWrongSecretKeyCannotJoin(t *testing.T) {
	a := spawn(t, spec{Name: "a", SecretKey: []byte("0123456789abcdef")})
	if _, err := trySpawn(t, spec{Name: "b", Seeds: []string{a.self.GossipAddr}, SecretKey: []byte("fedcba9876543210")}); err == nil {
		t.Fatal("a node with another key joined")
	}
	if _, err := trySpawn(t, spec{Name: "b", Seeds: []string{a.self.GossipAddr}}); err == nil {
		t.Fatal("a node without a key joined")
	}
	b := spawn(t, spec{Name: "b", Seeds: []string{a.self.GossipAddr}, SecretKey: []byte("0123456789abcdef")})
	agree(t, []*proc{a, b}, a.name, b.name)
}

// A partitioned node is reported dead by the others but, seeing fewer than
// half of the nodes it knew, reports none of them dead itself; healed, it
// rejoins and ownership is shared again.
func TestPartitionAndHeal(t *testing.T) {
	nodes := startN(t, 3)
	a, b, c := nodes[0], nodes[1], nodes[2]
	agree(t, nodes, namesOf(nodes...)...)

	c.partition(true)
	a.wake(c.name, "in") // c drops it: it comes in through the partition
	c.wake(a.name, "out")
	for _, n := range []*proc{a, b} {
		testutil.Eventually(t, wait, n.name+" reports "+c.name+" dead", func() bool {
			return slices.Contains(n.dead(), c.name)
		})
	}
	agree(t, []*proc{a, b}, a.name, b.name)
	// c owns every bucket once it declared both others dead.
	agree(t, []*proc{c}, c.name)

	c.partition(false)
	agree(t, nodes, namesOf(nodes...)...)
	if d := c.dead(); len(d) > 0 {
		t.Fatalf("the isolated node reported %v dead", d)
	}
	a.wake(c.name, "after")
	testutil.Eventually(t, wait, "c is woken after the heal", func() bool {
		return slices.Contains(c.woken(), "after")
	})
	if got := c.woken(); slices.Contains(got, "in") {
		t.Errorf("a wake-up crossed the partition into c: %v", got)
	}
	if got := a.woken(); slices.Contains(got, "out") {
		t.Errorf("a wake-up crossed the partition out of c: %v", got)
	}
}

func TestJoinFailsOnABusyPort(t *testing.T) {
	if testutil.InOwnProcess(t) { // it starts a remote endpoint in this process
		return
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := cluster.Loopback()
	cfg.RemoteBindPort = l.Addr().(*net.TCPAddr).Port
	c, err := cluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Join(testutil.Ctx(t, wait), (&host{}).of("busy", testutil.Logger())); err == nil {
		t.Fatal("joined with the remote port taken")
	}
	if err := c.Join(testutil.Ctx(t, wait), (&host{}).of("busy", testutil.Logger())); !errors.Is(err, cluster.ErrClosed) {
		t.Fatalf("Join after a failed Join: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
