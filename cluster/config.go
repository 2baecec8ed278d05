package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
)

// Config configures a Cluster. Start from LAN or Loopback and change what
// differs; in the zero Config every timing takes its LAN value and every
// port is picked free.
type Config struct {
	// GossipBindAddr is the IP address memberlist listens on, UDP and TCP.
	// Default "0.0.0.0"; Loopback: "127.0.0.1".
	GossipBindAddr string
	// GossipBindPort is the port memberlist listens on; 0 picks a free one.
	// Default 0; LAN: 7946.
	GossipBindPort int
	// GossipAdvertiseAddr is the IP address other nodes reach this node's
	// gossip at. Default "": the bind address if it is a specific one, else
	// the first private IP address of the host.
	GossipAdvertiseAddr string
	// GossipAdvertisePort is the port other nodes reach this node's gossip
	// at. Default 0: the bound port.
	GossipAdvertisePort int

	// RemoteBindAddr is the IP address the remote endpoint (node-to-node
	// messages, gRPC over TCP) listens on. Default "0.0.0.0"; Loopback:
	// "127.0.0.1".
	RemoteBindAddr string
	// RemoteBindPort is the port the remote endpoint listens on; 0 picks a
	// free one. Default 0; LAN: 7947.
	RemoteBindPort int
	// RemoteAdvertiseAddr is the host other nodes reach the remote endpoint
	// at; it travels in the node's gossip metadata. Default "": the bind
	// address if it is a specific one, else the gossip advertise address.
	RemoteAdvertiseAddr string
	// RemoteAdvertisePort is the port other nodes reach the remote endpoint
	// at. Default 0: the bound port.
	RemoteAdvertisePort int

	// Seeds are gossip addresses ("host" or "host:port"; the port defaults
	// to GossipBindPort) of nodes to join. Join fails if none of them
	// answers, so a node that starts a new cluster lists no seeds or only
	// itself. Default none.
	Seeds []string
	// SecretKey encrypts gossip (AES-GCM); it must be 16, 24 or 32 bytes
	// and the same on every node. It does not cover the remote endpoint:
	// use RemoteServerTLS and RemoteClientTLS for that. Default nil: gossip
	// in the clear.
	SecretKey []byte

	// RemoteServerTLS makes the remote endpoint serve TLS. To refuse nodes
	// without a certificate of the cluster's CA, set ClientCAs and
	// ClientAuth: tls.RequireAndVerifyClientCert (MutualTLS builds it, and
	// RemoteClientTLS, from PEM files). Set it and
	// RemoteClientTLS together or not at all. Default nil: plain TCP.
	// Nodes advertise whether they serve TLS in their gossip metadata, and
	// a cluster does not mix the two: a node that disagrees with its seeds
	// fails to Join with ErrTLSMismatch, and the members ignore it.
	RemoteServerTLS *tls.Config
	// RemoteClientTLS is how this node dials other nodes' remote
	// endpoints: RootCAs to check their certificates, Certificates to show
	// its own. When ServerName is empty the host of the remote address is
	// checked, so server certificates name the RemoteAdvertiseAddr of
	// their node (an IP SAN for an IP). Default nil: plain TCP.
	RemoteClientTLS *tls.Config

	// ProbeInterval is how often memberlist probes a random member for
	// failure detection. Default 1s; Loopback 200ms.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe waits for an ack before it asks
	// other members to probe indirectly; about the network's round trip
	// time. Default 500ms; Loopback 100ms.
	ProbeTimeout time.Duration
	// IndirectChecks is how many members are asked to probe indirectly
	// when a direct probe fails. Default 3; Loopback 1.
	IndirectChecks int
	// SuspicionMult scales the time a suspect member has to refute before
	// it is declared dead: SuspicionMult * log10(max(1, members)) *
	// ProbeInterval at least. Default 4; Loopback 3.
	SuspicionMult int
	// SuspicionMaxTimeoutMult bounds the suspicion time at this multiple of
	// its least value; the time shrinks toward the least as other members
	// confirm the suspicion. Default 6; Loopback 3.
	SuspicionMaxTimeoutMult int
	// GossipInterval is how often gossip goes out to GossipNodes random
	// members. Default 200ms; Loopback 50ms.
	GossipInterval time.Duration
	// GossipNodes is how many members each gossip round goes to. Default 3.
	GossipNodes int
	// GossipToTheDeadTime is how long dead members still get gossip, which
	// lets a falsely declared one refute. Default 30s; Loopback 2s.
	GossipToTheDeadTime time.Duration
	// RetransmitMult scales how often a broadcast is retransmitted:
	// RetransmitMult * log(members+1) times. Default 4; Loopback 2.
	RetransmitMult int
	// PushPullInterval is how often full state is exchanged with a random
	// member over TCP. Default 30s; Loopback 5s.
	PushPullInterval time.Duration
	// TCPTimeout bounds a TCP exchange with a member (push/pull, join,
	// TCP probe). Default 10s; Loopback 1s.
	TCPTimeout time.Duration
	// DeadNodeReclaimTime is how long after its death a node's name may
	// come back with another address (a restarted node on a new IP or
	// port). Default 30s; Loopback 1s.
	DeadNodeReclaimTime time.Duration

	// RejoinInterval is how often the node joins again the seeds and the
	// recently dead members that it does not see alive, so that the two
	// sides of a healed partition merge again. Default 30s; Loopback 500ms.
	RejoinInterval time.Duration
	// RecentWindow is how long a member that died or left is remembered:
	// it still counts among the nodes known recently (see Changed in Join)
	// and, when dead, is a rejoin target. Default 5m; Loopback 30s.
	RecentWindow time.Duration
	// Client makes the node a member that owns no instances: it spawns,
	// sends, publishes, cancels and awaits like any node (its wake-ups go
	// to the owners), but hosts no activation and fires no timer. For API
	// front ends, tools and the process that drives a test. Default false.
	Client bool

	// WakeQueue is how many outgoing Wake calls may wait for the sender;
	// more are dropped (the store keeps the work). Default 4096.
	WakeQueue int

	// Logger receives the cluster's logs, and memberlist's and protoactor's
	// at debug level (they report each lost probe or connection to a node
	// that went away as an error). Default: the Logger of the ClusterHost given
	// to Join, or slog.Default() if that is nil too.
	Logger *slog.Logger
}

// LAN is a Config with memberlist's DefaultLANConfig timings, listening
// on all interfaces at gossip port 7946 and remote port 7947.
func LAN() Config {
	l := memberlist.DefaultLANConfig()
	return Config{
		GossipBindAddr:          "0.0.0.0",
		GossipBindPort:          7946,
		RemoteBindAddr:          "0.0.0.0",
		RemoteBindPort:          7947,
		ProbeInterval:           l.ProbeInterval,
		ProbeTimeout:            l.ProbeTimeout,
		IndirectChecks:          l.IndirectChecks,
		SuspicionMult:           l.SuspicionMult,
		SuspicionMaxTimeoutMult: l.SuspicionMaxTimeoutMult,
		GossipInterval:          l.GossipInterval,
		GossipNodes:             l.GossipNodes,
		GossipToTheDeadTime:     l.GossipToTheDeadTime,
		RetransmitMult:          l.RetransmitMult,
		PushPullInterval:        l.PushPullInterval,
		TCPTimeout:              l.TCPTimeout,
		DeadNodeReclaimTime:     defaultDeadNodeReclaimTime,
		RejoinInterval:          defaultRejoinInterval,
		RecentWindow:            defaultRecentWindow,
		WakeQueue:               defaultWakeQueue,
	}
}

// Loopback is a Config for several nodes on one host (tests, demos): it
// listens on 127.0.0.1 at free ports and probes fast, so that a failed
// node is declared dead within a second or two. Its timings are too tight
// for a real network.
func Loopback() Config {
	return Config{
		GossipBindAddr:          "127.0.0.1",
		RemoteBindAddr:          "127.0.0.1",
		ProbeInterval:           200 * time.Millisecond,
		ProbeTimeout:            100 * time.Millisecond,
		IndirectChecks:          1,
		SuspicionMult:           3,
		SuspicionMaxTimeoutMult: 3,
		GossipInterval:          50 * time.Millisecond,
		GossipNodes:             3,
		GossipToTheDeadTime:     2 * time.Second,
		RetransmitMult:          2,
		PushPullInterval:        5 * time.Second,
		TCPTimeout:              time.Second,
		DeadNodeReclaimTime:     time.Second,
		RejoinInterval:          500 * time.Millisecond,
		RecentWindow:            30 * time.Second,
		WakeQueue:               defaultWakeQueue,
	}
}

const (
	defaultDeadNodeReclaimTime = 30 * time.Second
	defaultRejoinInterval      = 30 * time.Second
	defaultRecentWindow        = 5 * time.Minute
	defaultWakeQueue           = 4096
)

// ErrInvalidConfig is what every *ConfigError matches with errors.Is.
var ErrInvalidConfig = errors.New("cluster: invalid config")

// ConfigError is New's error for a Config field it cannot use.
type ConfigError struct {
	// Field is the Config field, e.g. "SecretKey".
	Field string
	// Reason says what is wrong with it.
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("cluster: invalid config: %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidConfig) hold.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// withDefaults is cfg with the zero timings set to their LAN values and
// the zero bind addresses to all interfaces.
func (cfg Config) withDefaults() Config {
	lan := LAN()
	setStr := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	setInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	setStr(&cfg.GossipBindAddr, lan.GossipBindAddr)
	setStr(&cfg.RemoteBindAddr, lan.RemoteBindAddr)
	setDur(&cfg.ProbeInterval, lan.ProbeInterval)
	setDur(&cfg.ProbeTimeout, lan.ProbeTimeout)
	setInt(&cfg.IndirectChecks, lan.IndirectChecks)
	setInt(&cfg.SuspicionMult, lan.SuspicionMult)
	setInt(&cfg.SuspicionMaxTimeoutMult, lan.SuspicionMaxTimeoutMult)
	setDur(&cfg.GossipInterval, lan.GossipInterval)
	setInt(&cfg.GossipNodes, lan.GossipNodes)
	setDur(&cfg.GossipToTheDeadTime, lan.GossipToTheDeadTime)
	setInt(&cfg.RetransmitMult, lan.RetransmitMult)
	setDur(&cfg.PushPullInterval, lan.PushPullInterval)
	setDur(&cfg.TCPTimeout, lan.TCPTimeout)
	setDur(&cfg.DeadNodeReclaimTime, lan.DeadNodeReclaimTime)
	setDur(&cfg.RejoinInterval, lan.RejoinInterval)
	setDur(&cfg.RecentWindow, lan.RecentWindow)
	setInt(&cfg.WakeQueue, lan.WakeQueue)
	return cfg
}

// validate checks a Config after withDefaults.
func (cfg Config) validate() error {
	for _, a := range []struct{ field, v string }{
		{"GossipBindAddr", cfg.GossipBindAddr},
		{"GossipAdvertiseAddr", cfg.GossipAdvertiseAddr},
		{"RemoteBindAddr", cfg.RemoteBindAddr},
	} {
		if a.v != "" && net.ParseIP(a.v) == nil {
			return &ConfigError{Field: a.field, Reason: fmt.Sprintf("%q is not an IP address", a.v)}
		}
	}
	for _, p := range []struct {
		field string
		v     int
	}{
		{"GossipBindPort", cfg.GossipBindPort},
		{"GossipAdvertisePort", cfg.GossipAdvertisePort},
		{"RemoteBindPort", cfg.RemoteBindPort},
		{"RemoteAdvertisePort", cfg.RemoteAdvertisePort},
	} {
		if p.v < 0 || p.v > 65535 {
			return &ConfigError{Field: p.field, Reason: fmt.Sprintf("port %d is out of range", p.v)}
		}
	}
	switch len(cfg.SecretKey) {
	case 0, 16, 24, 32:
	default:
		return &ConfigError{Field: "SecretKey", Reason: fmt.Sprintf("%d bytes; it must be 16, 24 or 32", len(cfg.SecretKey))}
	}
	if (cfg.RemoteServerTLS == nil) != (cfg.RemoteClientTLS == nil) {
		return &ConfigError{Field: "RemoteServerTLS", Reason: "set together with RemoteClientTLS, or neither"}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"ProbeInterval", cfg.ProbeInterval},
		{"ProbeTimeout", cfg.ProbeTimeout},
		{"GossipInterval", cfg.GossipInterval},
		{"GossipToTheDeadTime", cfg.GossipToTheDeadTime},
		{"PushPullInterval", cfg.PushPullInterval},
		{"TCPTimeout", cfg.TCPTimeout},
		{"DeadNodeReclaimTime", cfg.DeadNodeReclaimTime},
		{"RejoinInterval", cfg.RejoinInterval},
		{"RecentWindow", cfg.RecentWindow},
	} {
		if d.v < 0 {
			return &ConfigError{Field: d.field, Reason: fmt.Sprintf("negative duration %v", d.v)}
		}
	}
	if cfg.ProbeTimeout > cfg.ProbeInterval {
		return &ConfigError{Field: "ProbeTimeout", Reason: fmt.Sprintf("%v is longer than ProbeInterval %v", cfg.ProbeTimeout, cfg.ProbeInterval)}
	}
	for _, n := range []struct {
		field string
		v     int
	}{
		{"IndirectChecks", cfg.IndirectChecks},
		{"SuspicionMult", cfg.SuspicionMult},
		{"SuspicionMaxTimeoutMult", cfg.SuspicionMaxTimeoutMult},
		{"GossipNodes", cfg.GossipNodes},
		{"RetransmitMult", cfg.RetransmitMult},
		{"WakeQueue", cfg.WakeQueue},
	} {
		if n.v < 0 {
			return &ConfigError{Field: n.field, Reason: fmt.Sprintf("negative value %d", n.v)}
		}
	}
	return nil
}
