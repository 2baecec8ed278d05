package cluster

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/cluster/internal/wire"
)

var _ actor.Cluster = (*Cluster)(nil)

// Errors of the Cluster's life cycle.
var (
	// ErrJoined is Join's error when the Cluster joined already.
	ErrJoined = errors.New("cluster: already joined")
	// ErrClosed is Join's error after Close.
	ErrClosed = errors.New("cluster: closed")
	// ErrTLSMismatch is Join's error when the seeds' cluster serves its
	// remote endpoints with TLS and this node does not, or the other way
	// round: a cluster does not mix them (a plain member would serve wakes
	// in clear text, and could not dial the others).
	ErrTLSMismatch = errors.New("cluster: remote TLS differs from the cluster's")
)

// Cluster is an actor.Cluster: gossip membership with memberlist,
// ownership of buckets by rendezvous hashing over the live members, and
// wake-ups over protoactor remote. Create it with New and give it to the
// actor System, which calls Join, Owner, Wake, Leave and Close; one
// Cluster serves one System once.
type Cluster struct {
	cfg Config

	// partitioned cuts the node off the network while set. Only tests set
	// it (export_test.go); a node never cuts itself off otherwise.
	partitioned atomic.Bool
	// tlsRefused is why the first member refused for its remote TLS was
	// (see tlsCheck), for Join's error.
	tlsRefused atomic.Pointer[string]

	tbl atomic.Pointer[table] // ownership snapshot; nil before Join
	ml  atomic.Pointer[memberlist.Memberlist]

	// Set in Join before anything runs, read-only after.
	name   string
	host   actor.ClusterHost
	log    *slog.Logger
	tr     *cuttable
	ep     *endpoint
	self   string // gossip address ip:port, to skip ourselves among seeds
	gport  int    // the bound gossip port, for seeds without one
	outbox chan wakeMsg
	kick   chan struct{} // capacity 1: a pending recompute, bursts coalesce
	stop   chan struct{} // closed by Close
	leave  chan struct{} // closed by Leave: no more rejoins
	wg     sync.WaitGroup

	mu     sync.Mutex // life cycle: Join, Leave, Close
	joined bool
	closed bool
	left   atomic.Bool // read by rebuild under rebuildMu

	rebuildMu sync.Mutex

	// What memberlist's callbacks told, copied under its lock: the *Node
	// values memberlist hands out change in place as members change.
	evMu        sync.Mutex
	members     map[string]member    // by name; dead and left ones until RecentWindow passes
	pendingDead map[string]time.Time // declared dead (when) since the last Changed
	leaving     map[string]time.Time // sent a Leaving notice (when)

	heardMu sync.Mutex
	heard   map[string]time.Time // "addr ip:port" or "name node" -> last direct contact
}

// member is what the Cluster knows of a node.
type member struct {
	name       string
	gossipAddr string // ip:port
	ip         net.IP
	port       uint16
	remoteAddr string
	client     bool // owns nothing (Config.Client)
	state      MemberState
	since      time.Time // of state
}

type wakeMsg struct {
	node, addr string
	ids        []string
}

// New checks cfg and returns a Cluster that has not joined yet: it opens
// no socket until Join. Zero timings take their LAN values (see Config).
// A Config it cannot use is a *ConfigError.
func New(cfg Config) (*Cluster, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Seeds = slices.Clone(cfg.Seeds)
	cfg.SecretKey = slices.Clone(cfg.SecretKey)
	return &Cluster{
		cfg:         cfg,
		members:     map[string]member{},
		pendingDead: map[string]time.Time{},
		leaving:     map[string]time.Time{},
		heard:       map[string]time.Time{},
	}, nil
}

// Join starts the node's gossip and remote endpoints under the name
// h.NodeID and joins the seeds. It fails if Seeds lists other nodes and
// none of them answers (a wrong SecretKey looks the same), or if ctx ends
// first; the Cluster is then closed.
//
// From then on the Cluster calls h.Wake with the IDs that other nodes
// wake, and h.Changed from one goroutine after each change of ownership,
// a burst of changes coalescing into one call. Changed's dead lists the
// nodes that gossip declared dead (failed probes, not a graceful Leave)
// since the previous call — but only while this node sees at least half
// of the nodes it has known recently: the live members plus those that
// died or left within RecentWindow. It sees itself and the live members
// it heard from directly (a packet, or an ack to its probe) within half
// the longest suspicion time. A node that sees fewer may be the one that
// is cut off: it cannot hear anyone, while memberlist still lists the
// members it has not yet declared dead. So it leaves the dead out, for
// good, and their leases expire instead of being taken over. A node
// declared dead is reported after a grace of one ProbeInterval, in which a
// leaving notice that came late still makes it a graceful leave.
func (c *Cluster) Join(ctx context.Context, h actor.ClusterHost) (err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return ErrClosed
	case c.joined:
		return ErrJoined
	case h.NodeID == "":
		return errors.New("cluster: join: the host has no NodeID")
	}
	c.name, c.host = h.NodeID, h
	c.log = c.cfg.Logger
	if c.log == nil {
		c.log = h.Logger
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.outbox = make(chan wakeMsg, c.cfg.WakeQueue)
	c.kick = make(chan struct{}, 1)
	c.stop = make(chan struct{})
	c.leave = make(chan struct{})
	defer func() {
		if err != nil {
			c.closed = true
			if serr := c.shutdown(); serr != nil {
				c.log.Debug("cluster: clean up after a failed join", "err", serr)
			}
		}
	}()

	mlog := memberlistLog(c.log.With("lib", "memberlist"))
	nt, err := newNetTransport(c.cfg, mlog)
	if err != nil {
		return err
	}
	c.tr = newCuttable(nt, &c.partitioned, c.hear)
	c.gport = nt.GetAutoBindPort()
	advPort := c.cfg.GossipAdvertisePort
	if advPort == 0 {
		advPort = c.gport
	}
	ip, advPort, err := c.tr.FinalAdvertiseAddr(c.cfg.GossipAdvertiseAddr, advPort)
	if err != nil {
		return fmt.Errorf("cluster: gossip advertise address: %w", err)
	}
	c.self = net.JoinHostPort(ip.String(), strconv.Itoa(advPort))

	c.ep, err = startEndpoint(c.cfg, ip.String(), c.log, c.onWake)
	if err != nil {
		return err
	}
	meta, err := proto.Marshal(&wire.NodeMeta{RemoteAddr: c.ep.addr, Client: c.cfg.Client, RemoteTls: c.cfg.RemoteServerTLS != nil})
	if err != nil {
		return fmt.Errorf("cluster: encode node metadata: %w", err)
	}

	mc := memberlist.DefaultLANConfig()
	mc.Name = c.name
	mc.Transport = c.tr
	mc.BindAddr = c.cfg.GossipBindAddr
	mc.BindPort = c.gport
	mc.AdvertiseAddr = ip.String()
	mc.AdvertisePort = advPort
	mc.ProbeInterval = c.cfg.ProbeInterval
	mc.ProbeTimeout = c.cfg.ProbeTimeout
	mc.IndirectChecks = c.cfg.IndirectChecks
	mc.SuspicionMult = c.cfg.SuspicionMult
	mc.SuspicionMaxTimeoutMult = c.cfg.SuspicionMaxTimeoutMult
	mc.GossipInterval = c.cfg.GossipInterval
	mc.GossipNodes = c.cfg.GossipNodes
	mc.GossipToTheDeadTime = c.cfg.GossipToTheDeadTime
	mc.RetransmitMult = c.cfg.RetransmitMult
	mc.PushPullInterval = c.cfg.PushPullInterval
	mc.TCPTimeout = c.cfg.TCPTimeout
	mc.DeadNodeReclaimTime = c.cfg.DeadNodeReclaimTime
	mc.SecretKey = c.cfg.SecretKey
	mc.Delegate = &delegate{c: c, meta: meta}
	mc.Events = events{c}
	mc.Ping = pings{c}
	mc.Merge = tlsCheck{c}
	mc.Alive = tlsCheck{c}
	mc.Logger = mlog
	mc.LogOutput = nil
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("cluster: start gossip: %w", err)
	}
	c.ml.Store(ml)
	c.rebuild()

	c.wg.Add(2)
	go c.run()
	go c.send()

	if seeds := c.seeds(); len(seeds) > 0 {
		if err := c.joinSeeds(ctx, ml, seeds); err != nil {
			return err
		}
	}
	c.rebuild()
	c.poke()
	c.wg.Add(1)
	go c.rejoin()
	c.joined = true
	c.log.Info("cluster: joined", "gossip", c.self, "remote", c.ep.addr, "members", ml.NumMembers())
	return nil
}

// newNetTransport opens memberlist's UDP and TCP listeners. With port 0
// the TCP port is picked first and UDP may find it taken, so it retries as
// memberlist does when it makes its own transport.
func newNetTransport(cfg Config, l *log.Logger) (*memberlist.NetTransport, error) {
	attempts := 1
	if cfg.GossipBindPort == 0 {
		attempts = 10
	}
	var err error
	for range attempts {
		var nt *memberlist.NetTransport
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{cfg.GossipBindAddr},
			BindPort:  cfg.GossipBindPort,
			Logger:    l,
		})
		if err == nil {
			return nt, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, fmt.Errorf("cluster: open gossip listeners: %w", err)
}

// joinSeeds joins the seeds, giving up when ctx ends.
func (c *Cluster) joinSeeds(ctx context.Context, ml *memberlist.Memberlist, seeds []string) error {
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := ml.Join(seeds)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		if r.n == 0 {
			if refused := c.tlsRefused.Load(); refused != nil {
				return fmt.Errorf("cluster: join seeds %v: %w: %s", seeds, ErrTLSMismatch, *refused)
			}
			return fmt.Errorf("cluster: join seeds %v: %w", seeds, r.err)
		}
		if r.err != nil {
			c.log.Debug("cluster: some seeds did not answer", "seeds", seeds, "err", r.err)
		}
		return nil
	case <-ctx.Done():
		// Shutting memberlist down ends the join attempt; wait for it so
		// that no goroutine outlives Join.
		_ = ml.Shutdown()
		<-done
		return fmt.Errorf("cluster: join seeds %v: %w", seeds, ctx.Err())
	}
}

// seeds are the seed addresses other than this node's own.
func (c *Cluster) seeds() []string {
	var out []string
	for _, s := range c.cfg.Seeds {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			host, port = s, strconv.Itoa(c.gport)
		}
		a := net.JoinHostPort(host, port)
		if a != c.self && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// Owner names the node that owns bucket b: the member whose rendezvous
// hash with b is highest. A node alone owns every bucket. Before Join, for
// a bucket out of range, or after Leave with no other member left, it is
// "". After Leave it never names this node. It reads a snapshot and takes
// no lock.
func (c *Cluster) Owner(b int) string {
	t := c.tbl.Load()
	if t == nil || b < 0 || b >= len(t.owners) {
		return ""
	}
	return t.owners[b]
}

// Wake queues a wake-up of ids for node and returns: one goroutine of the
// Cluster sends it over remote (to this node itself it calls the host's
// Wake). It drops the wake-up, with a debug log, if node is not a member
// or the queue is full; the store keeps the work.
func (c *Cluster) Wake(node string, ids []string) {
	if len(ids) == 0 {
		return
	}
	t := c.tbl.Load()
	if t == nil {
		return // not joined: nobody to wake
	}
	var addr string
	if node != c.name {
		addr = t.remote[node]
		if addr == "" {
			c.log.Debug("cluster: wake for an unknown node dropped", "node", node, "ids", len(ids))
			return
		}
	}
	select {
	case c.outbox <- wakeMsg{node: node, addr: addr, ids: slices.Clone(ids)}:
	default:
		c.log.Debug("cluster: wake queue full, wake dropped", "node", node, "ids", len(ids))
	}
}

// Leave tells the other nodes that this one is going, so that they take
// its buckets at once and do not report it dead. From its start Owner no
// longer names this node. It waits for the leave message to go out until
// ctx's deadline (TCPTimeout without one). The node keeps gossiping, so
// that the message spreads, until Close.
func (c *Cluster) Leave(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.joined || c.closed || c.left.Load() {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	c.left.Store(true)
	c.rebuild()
	close(c.leave)
	ml := c.ml.Load()
	c.sendLeaving(ml)
	// memberlist waits until its leave broadcast went out; when the
	// others are leaving or gone too it never does. TCPTimeout bounds that
	// wait, so that the caller's context is left for stopping the node.
	timeout := c.cfg.TCPTimeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = time.Until(d)
	}
	if err := ml.Leave(timeout); err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	c.log.Info("cluster: left")
	return nil
}

// Close stops gossip, remote messaging and the Cluster's goroutines; the
// host's functions are not called once it returns. Without Leave first the
// other nodes find this one dead after their failure detection.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if !c.joined {
		return nil
	}
	return c.shutdown()
}

// shutdown stops whatever Join started.
func (c *Cluster) shutdown() error {
	var errs []error
	c.flush()
	if c.stop != nil {
		close(c.stop)
	}
	if ml := c.ml.Load(); ml != nil {
		// Before waiting for the goroutines: it ends a rejoin in flight.
		if err := ml.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("cluster: stop gossip: %w", err))
		}
	}
	c.wg.Wait()
	if c.tr != nil {
		if err := c.tr.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("cluster: stop gossip transport: %w", err))
		}
	}
	if c.ep != nil {
		c.ep.stop()
	}
	return errors.Join(errs...)
}

// MemberState is a member's state as this node sees it.
type MemberState int

// Member states.
const (
	// StateAlive members are live as far as gossip knows: they answer
	// probes or have not yet been declared dead after missing some.
	StateAlive MemberState = iota
	// StateDead members were declared failed.
	StateDead
	// StateLeft members left gracefully.
	StateLeft
)

func (s MemberState) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
	}
	return "MemberState(" + strconv.Itoa(int(s)) + ")"
}

// Member is one node of the cluster as this node sees it.
type Member struct {
	// Name is the node's NodeID.
	Name string
	// GossipAddr is the node's gossip address, host:port.
	GossipAddr string
	// RemoteAddr is the node's remote (wake-up) address, host:port.
	RemoteAddr string
	// Client is set for members that own no instances (Config.Client).
	Client bool
	// State is alive, or, within RecentWindow, dead or left.
	State MemberState
}

// Members lists the nodes this node knows, this one included, by name:
// the live ones and those that died or left within RecentWindow. It is for
// operators.
func (c *Cluster) Members() []Member {
	var out []Member
	now := time.Now()
	for _, m := range c.known() {
		if m.state == StateAlive || now.Sub(m.since) <= c.cfg.RecentWindow {
			out = append(out, Member{Name: m.name, GossipAddr: m.gossipAddr, RemoteAddr: m.remoteAddr, Client: m.client, State: m.state})
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// rebuild recomputes the ownership table from the live members and
// publishes it.
func (c *Cluster) rebuild() *table {
	c.rebuildMu.Lock()
	defer c.rebuildMu.Unlock()
	left := c.left.Load()
	var names []string
	remote := map[string]string{}
	for _, m := range c.known() {
		if m.state != StateAlive {
			continue
		}
		remote[m.name] = m.remoteAddr
		if m.name == c.name && left || m.client {
			continue
		}
		names = append(names, m.name)
	}
	t := &table{owners: owners(names), remote: remote}
	c.tbl.Store(t)
	return t
}

// poke asks the run goroutine to recompute; it never blocks.
func (c *Cluster) poke() {
	select {
	case c.kick <- struct{}{}:
	default: // a recompute is pending already and will see this change
	}
}

// run recomputes ownership after membership changes and tells the host.
// Memberlist calls its delegates under its own lock, so they only record
// the change and poke; the work and the host's Changed happen here.
func (c *Cluster) run() {
	defer c.wg.Done()
	var reported []string
	recheck := time.NewTimer(time.Hour)
	recheck.Stop()
	defer recheck.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		case <-recheck.C:
		}
		t := c.rebuild()
		dead, later := c.takeDead()
		if later > 0 {
			recheck.Reset(later)
		}
		if len(dead) == 0 && slices.Equal(reported, t.owners) {
			continue
		}
		reported = t.owners
		if c.host.Changed != nil {
			c.host.Changed(dead)
		}
	}
}

// rejoin joins, every RejoinInterval, the seeds and recently dead members
// that are not live members: memberlist gives up on dead nodes, so
// without this the two sides of a healed partition would stay apart.
func (c *Cluster) rejoin() {
	defer c.wg.Done()
	tick := time.NewTicker(c.cfg.RejoinInterval)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.leave:
			return
		case <-tick.C:
		}
		now := time.Now()
		live := map[string]bool{}
		var dead []string
		for _, m := range c.known() {
			switch {
			case m.state == StateAlive:
				live[m.gossipAddr] = true
			case m.state == StateDead && now.Sub(m.since) <= c.cfg.RecentWindow:
				dead = append(dead, m.gossipAddr)
			}
		}
		var targets []string
		for _, a := range append(c.seeds(), dead...) {
			if !live[a] && !slices.Contains(targets, a) {
				targets = append(targets, a)
			}
		}
		if len(targets) == 0 {
			continue
		}
		n, err := c.ml.Load().Join(targets)
		c.log.Debug("cluster: rejoin", "targets", targets, "reached", n, "err", err)
	}
}

// send delivers queued wake-ups. protoactor's Send may wait for its
// endpoint manager, so it happens here rather than in the caller of Wake.
func (c *Cluster) send() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		case w := <-c.outbox:
			switch {
			case w.node == c.name:
				if c.host.Wake != nil {
					c.host.Wake(w.ids)
				}
			case c.partitioned.Load():
				c.log.Debug("cluster: partitioned, wake dropped", "node", w.node, "ids", len(w.ids))
			default:
				c.ep.send(w.addr, &wire.Wake{Instances: w.ids, From: c.name})
			}
		}
	}
}

// flush hands the wake-ups still queued to the remote endpoint before it
// stops: a node that stops wakes the new owners of its instances last.
func (c *Cluster) flush() {
	if c.outbox == nil || c.partitioned.Load() {
		return
	}
	for {
		select {
		case w := <-c.outbox:
			if w.node != c.name {
				c.ep.send(w.addr, &wire.Wake{Instances: w.ids, From: c.name})
			}
		default:
			return
		}
	}
}

// onWake runs on the receiver actor for each Wake another node sent.
func (c *Cluster) onWake(m *wire.Wake) {
	if c.partitioned.Load() {
		c.log.Debug("cluster: partitioned, incoming wake dropped", "from", m.GetFrom(), "ids", len(m.GetInstances()))
		return
	}
	if c.host.Wake != nil && len(m.GetInstances()) > 0 {
		c.host.Wake(m.GetInstances())
	}
}
