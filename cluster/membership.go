package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"

	"github.com/nornlabs/norn/cluster/internal/wire"
)

// memberEvent records a membership change. Memberlist calls it with its
// node lock held, so it copies what it needs from n, notes the change and
// pokes run.
//
// Memberlist's leave callback does not say whether the node left or was
// declared dead (the Node it passes carries no state), so a node that
// leaves tells every member first (sendLeaving); a leave without that
// notice is a death.
func (c *Cluster) memberEvent(n *memberlist.Node, joined bool) {
	now := time.Now()
	m := member{
		name:       n.Name,
		gossipAddr: n.Address(),
		ip:         slices.Clone(n.Addr),
		port:       n.Port,
		remoteAddr: remoteAddrOf(n.Meta),
		client:     clientOf(n.Meta),
		state:      StateAlive,
		since:      now,
	}
	c.evMu.Lock()
	switch {
	case joined:
		if old, ok := c.members[n.Name]; ok && old.state == StateAlive {
			m.since = old.since // an update, not a new life
		}
		delete(c.pendingDead, n.Name)
		delete(c.leaving, n.Name)
	case n.Name == c.name:
		m.state = StateLeft
	default:
		m.state = StateLeft
		if _, ok := c.leaving[n.Name]; !ok {
			m.state = StateDead
			c.pendingDead[n.Name] = now
		}
	}
	c.members[n.Name] = m
	c.evMu.Unlock()
	c.poke()
}

// known is a copy of what the Cluster knows of the members.
func (c *Cluster) known() []member {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	out := make([]member, 0, len(c.members))
	for _, m := range c.members {
		out = append(out, m)
	}
	return out
}

// leavingNotice records that node is about to leave gracefully.
func (c *Cluster) leavingNotice(node string) {
	if node == "" || node == c.name {
		return
	}
	c.evMu.Lock()
	c.leaving[node] = time.Now()
	if m, ok := c.members[node]; ok && m.state == StateDead {
		if _, pending := c.pendingDead[node]; pending {
			// The leave overtook the notice: takeDead holds dead nodes
			// back for a moment, so it is still time to correct it.
			m.state = StateLeft
			c.members[node] = m
			delete(c.pendingDead, node)
		}
	}
	c.evMu.Unlock()
}

// sendLeaving tells every live member that this node leaves, over
// memberlist's reliable (TCP) channel, and waits until each send is done
// or failed (each is bounded by TCPTimeout).
func (c *Cluster) sendLeaving(ml *memberlist.Memberlist) {
	msg, err := proto.Marshal(&wire.Leaving{Node: c.name})
	if err != nil {
		c.log.Error("cluster: encode the leaving notice", "err", err)
		return
	}
	var wg sync.WaitGroup
	for _, m := range c.known() {
		if m.name == c.name || m.state != StateAlive {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ml.SendReliable(&memberlist.Node{Name: m.name, Addr: m.ip, Port: m.port}, msg); err != nil {
				c.log.Debug("cluster: leaving notice not sent", "node", m.name, "err", err)
			}
		}()
	}
	wg.Wait()
}

// hear records a packet from the gossip address from; the transport calls
// it for every packet that comes in.
func (c *Cluster) hear(from string) { c.heardOf("addr", from) }

// heardOf records direct contact with a member, by gossip address or by
// name: behind NAT a member's packets come from another address than the
// one it advertises, and only the acks to this node's probes name it.
func (c *Cluster) heardOf(kind, key string) {
	now := time.Now()
	c.heardMu.Lock()
	c.heard[kind+" "+key] = now
	c.heardMu.Unlock()
}

// deadGrace is how long takeDead holds a newly dead node back, so that a
// leaving notice that lost the race with the leave itself still counts.
func (c *Cluster) deadGrace() time.Duration { return c.cfg.ProbeInterval }

// seenWindow is how recently this node must have heard from a member
// directly to count it as seen: half the longest time memberlist gives a
// suspect of a cluster of n nodes, which is how long a cut-off node, whom
// nobody confirms suspicions for, takes to declare anyone dead. By then it
// has heard from nobody for longer than the window and sees only itself,
// whereas a healthy node hears from each member at least once per probe
// round (probes go both ways), more often with gossip.
func (c *Cluster) seenWindow(n int) time.Duration {
	scale := math.Max(1, math.Log10(math.Max(1, float64(n))))
	least := time.Duration(float64(c.cfg.SuspicionMult) * scale * float64(c.cfg.ProbeInterval))
	return least * time.Duration(max(1, c.cfg.SuspicionMaxTimeoutMult)) / 2
}

// takeDead returns the nodes declared dead since the last call, unless
// this node sees fewer than half of the nodes it knew recently; then it
// drops them for good. Nodes declared dead within deadGrace wait for a
// later call; later is when to make it (0: none waits).
func (c *Cluster) takeDead() (dead []string, later time.Duration) {
	now := time.Now()
	c.heardMu.Lock()
	heard := make(map[string]time.Time, len(c.heard))
	for addr, at := range c.heard {
		if now.Sub(at) > c.cfg.RecentWindow {
			delete(c.heard, addr)
			continue
		}
		heard[addr] = at
	}
	c.heardMu.Unlock()

	c.evMu.Lock()
	defer c.evMu.Unlock()
	for name, at := range c.leaving {
		if now.Sub(at) > c.cfg.RecentWindow {
			delete(c.leaving, name)
		}
	}
	known := 0
	var live []member
	for name, m := range c.members {
		switch {
		case m.state == StateAlive:
			live = append(live, m)
			known++
		case now.Sub(m.since) > c.cfg.RecentWindow:
			delete(c.members, name)
		default:
			known++
		}
	}
	window := c.seenWindow(known)
	seen := 0
	for _, m := range live {
		if m.name == c.name || now.Sub(heard["addr "+m.gossipAddr]) <= window || now.Sub(heard["name "+m.name]) <= window {
			seen++
		}
	}

	for name, at := range c.pendingDead {
		switch {
		case c.members[name].state != StateDead:
			delete(c.pendingDead, name) // back already, or left after all
		case now.Sub(at) < c.deadGrace():
			wait := c.deadGrace() - now.Sub(at)
			if later == 0 || wait < later {
				later = wait
			}
		default:
			dead = append(dead, name)
			delete(c.pendingDead, name)
		}
	}
	if len(dead) == 0 {
		return nil, later
	}
	slices.Sort(dead)
	if 2*seen < known {
		c.log.Warn("cluster: nodes declared dead, but this node hears from too few of the nodes it knew to tell their failure from its own isolation; their leases will expire",
			"dead", dead, "seen", seen, "known", known)
		return nil, later
	}
	c.log.Info("cluster: nodes dead", "dead", dead, "seen", seen, "known", known)
	return dead, later
}

// events is the memberlist EventDelegate; it is its own type so that
// Cluster does not export memberlist's callbacks.
type events struct{ c *Cluster }

func (e events) NotifyJoin(n *memberlist.Node)   { e.c.memberEvent(n, true) }
func (e events) NotifyLeave(n *memberlist.Node)  { e.c.memberEvent(n, false) }
func (e events) NotifyUpdate(n *memberlist.Node) { e.c.poke() }

// pings is the memberlist PingDelegate: an ack to this node's probe is
// direct contact with the member.
type pings struct{ c *Cluster }

func (pings) AckPayload() []byte { return nil }

func (p pings) NotifyPingComplete(n *memberlist.Node, _ time.Duration, _ []byte) {
	p.c.heardOf("name", n.Name)
}

// delegate is the memberlist Delegate: it gives memberlist the node's
// metadata (its remote address) and takes leaving notices.
type delegate struct {
	c    *Cluster
	meta []byte
}

func (d *delegate) NodeMeta(limit int) []byte {
	if len(d.meta) > limit {
		return nil
	}
	return d.meta
}

func (d *delegate) NotifyMsg(b []byte) {
	var m wire.Leaving
	if err := proto.Unmarshal(b, &m); err != nil {
		d.c.log.Debug("cluster: unreadable gossip message", "err", err)
		return
	}
	d.c.leavingNotice(m.GetNode())
}

func (*delegate) GetBroadcasts(int, int) [][]byte { return nil }
func (*delegate) LocalState(bool) []byte          { return nil }
func (*delegate) MergeRemoteState([]byte, bool)   {}

func remoteAddrOf(meta []byte) string {
	var m wire.NodeMeta
	if proto.Unmarshal(meta, &m) != nil {
		return ""
	}
	return m.GetRemoteAddr()
}

// clientOf reads the client flag from a member's metadata.
func clientOf(meta []byte) bool {
	var m wire.NodeMeta
	return proto.Unmarshal(meta, &m) == nil && m.GetClient()
}

// remoteTLSOf reads from a member's metadata whether its remote endpoint
// serves TLS.
func remoteTLSOf(meta []byte) bool {
	var m wire.NodeMeta
	return proto.Unmarshal(meta, &m) == nil && m.GetRemoteTls()
}

// tlsCheck is the memberlist MergeDelegate and AliveDelegate that keeps
// nodes with and without remote TLS apart: a join whose other side
// disagrees is refused on both sides (the joining node's Join fails with
// ErrTLSMismatch), and gossip about such a node is ignored.
type tlsCheck struct{ c *Cluster }

func (t tlsCheck) NotifyMerge(peers []*memberlist.Node) error {
	for _, p := range peers {
		if err := t.NotifyAlive(p); err != nil {
			return err
		}
	}
	return nil
}

func (t tlsCheck) NotifyAlive(p *memberlist.Node) error {
	ours := t.c.cfg.RemoteServerTLS != nil
	if p.Name == t.c.name || remoteTLSOf(p.Meta) == ours {
		return nil
	}
	theirs, mine := "in plain text", "with TLS"
	if !ours {
		theirs, mine = mine, theirs
	}
	why := fmt.Sprintf("member %s (%s) serves its remote endpoint %s, this node %s; set RemoteServerTLS and RemoteClientTLS alike on every node",
		p.Name, p.Address(), theirs, mine)
	// Gossip repeats a node's alive messages: warn of it once.
	level := slog.LevelDebug
	if t.c.tlsRefused.CompareAndSwap(nil, &why) {
		level = slog.LevelWarn
	}
	t.c.log.Log(context.Background(), level, "cluster: member refused: remote TLS differs", "member", p.Name, "addr", p.Address(), "member_tls", !ours, "tls", ours)
	return fmt.Errorf("%w: %s", ErrTLSMismatch, why)
}
