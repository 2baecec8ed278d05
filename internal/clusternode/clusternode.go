// Package clusternode runs one node of a cluster in its own process, for
// the cluster tests and the failover benchmark: a store, a gossip member
// on loopback and a System with a few workflows, reporting what it does as
// lines on an io.Writer that the parent process reads.
package clusternode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/cluster"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// Config describes a node.
type Config struct {
	// Store is an SQLite file path or a postgres:// URL.
	Store string
	// NodeID names the node.
	NodeID string
	// Seeds are gossip addresses to join (none for the first node).
	Seeds []string
	// SecretKey encrypts gossip (optional).
	SecretKey []byte
	// RemoteServerTLS and RemoteClientTLS secure the remote endpoint
	// (optional; both or neither, see cluster.Config).
	RemoteServerTLS, RemoteClientTLS *tls.Config
	// LeaseTTL of the System (default: actor's default).
	LeaseTTL time.Duration
	// PassivateAfter of the System (default: an hour, so that sleeping
	// instances stay live where they were activated).
	PassivateAfter time.Duration
	// Out receives the node's report lines (see Node).
	Out io.Writer
	// Client joins as a member that owns no instances (cluster
	// Config.Client): the process that drives a test or a benchmark.
	Client bool
	// RecoveryInterval of the System (default: actor's default).
	RecoveryInterval time.Duration
	// Logger of the node (default slog.Default()).
	Logger *slog.Logger
}

// Node is a running node. It writes these lines to Config.Out:
//
//	ready <node> <gossip address>
//	activated <node> <instance> <unix ns>
//	passivated <node> <instance> <unix ns>
//	lost <node> <instance> <unix ns>    (its lease was taken over)
//	fired <node> <instance> <lateness ns>
//	completed <node> <instance> <unix ns>
type Node struct {
	Sys     *actor.System
	Cluster *cluster.Cluster
	// Sleeper is the node's sleeper workflow, to spawn with.
	Sleeper *actor.WorkflowDef[SleepInput, string]
	store   persistence.Store
	out     *lineWriter
}

// SleepInput is the input of Sleeper: the time to wake at.
type SleepInput struct {
	Until time.Time
}

// Sleeper sleeps until its input's time and returns the name of the node
// that ran it to the end.
func Sleeper(node string) *actor.WorkflowDef[SleepInput, string] {
	where := actor.Activity("where", func(context.Context, struct{}) (string, error) { return node, nil })
	return actor.Workflow("sleeper", func(ctx *actor.Context, in SleepInput) (string, error) {
		if err := ctx.Sleep(in.Until.Sub(ctx.Now())); err != nil {
			return "", err
		}
		return where.Run(ctx, struct{}{})
	})
}

// Ponger answers every "ping" sent to it by PID with a "pong" to the
// sender, n times, then ends.
var Ponger = actor.Workflow("ponger", func(ctx *actor.Context, n int) (int, error) {
	for i := 0; i < n; i++ {
		m, err := actor.Receive[string](ctx)
		if err != nil {
			return i, err
		}
		if err := ctx.Send(actor.PID(m.Sender), "pong"); err != nil {
			return i, err
		}
	}
	return n, nil
})

// PingInput says whom a Pinger pings and how often.
type PingInput struct {
	Peer  actor.PID
	Times int
}

// Pinger sends "ping" to its peer and waits for the "pong", Times times.
var Pinger = actor.Workflow("pinger", func(ctx *actor.Context, in PingInput) (int, error) {
	for i := 0; i < in.Times; i++ {
		if err := ctx.Send(in.Peer, "ping"); err != nil {
			return i, err
		}
		if _, err := actor.Receive[string](ctx); err != nil {
			return i, err
		}
	}
	return in.Times, nil
})

// Counter answers n requests (actor.ReceiveCall) of an int with the sum
// of those received so far, then ends.
var Counter = actor.Workflow("counter", func(ctx *actor.Context, n int) (int, error) {
	sum := 0
	for i := 0; i < n; i++ {
		req, err := actor.ReceiveCall[int](ctx)
		if err != nil {
			return i, err
		}
		sum += req.Value
		if err := req.Reply(ctx, sum); err != nil {
			return i, err
		}
	}
	return n, nil
})

// Caller calls its peer (a Counter) Times times with 1 and checks each
// reply.
var Caller = actor.Workflow("caller", func(ctx *actor.Context, in PingInput) (int, error) {
	for i := 0; i < in.Times; i++ {
		sum, err := actor.Call[int](ctx, in.Peer, 1, actor.CallOptions{})
		if err != nil {
			return i, err
		}
		if sum != i+1 {
			return i, fmt.Errorf("call %d: reply %d, want %d", i, sum, i+1)
		}
	}
	return in.Times, nil
})

// Start opens the store, joins the cluster and starts the System.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	st, err := storeurl.Open(ctx, cfg.Store)
	if err != nil {
		return nil, err
	}
	ccfg := cluster.Loopback()
	ccfg.Seeds = cfg.Seeds
	ccfg.SecretKey = cfg.SecretKey
	ccfg.RemoteServerTLS, ccfg.RemoteClientTLS = cfg.RemoteServerTLS, cfg.RemoteClientTLS
	ccfg.Client = cfg.Client
	cl, err := cluster.New(ccfg)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	out := &lineWriter{w: cfg.Out}
	if cfg.PassivateAfter == 0 {
		cfg.PassivateAfter = time.Hour
	}
	sleeper := Sleeper(cfg.NodeID)
	sys, err := actor.Start(ctx, actor.Config{
		Store: st, NodeID: cfg.NodeID, Cluster: cl, LeaseTTL: cfg.LeaseTTL, PassivateAfter: cfg.PassivateAfter,
		RecoveryInterval: cfg.RecoveryInterval, Logger: cfg.Logger,
		Workflows: actor.Register(sleeper, Ponger, Pinger, Counter, Caller),
		Hooks:     reporter{node: cfg.NodeID, out: out},
	})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	n := &Node{Sys: sys, Cluster: cl, Sleeper: sleeper, store: st, out: out}
	for _, m := range cl.Members() {
		if m.Name == cfg.NodeID {
			out.line("ready %s %s", cfg.NodeID, m.GossipAddr)
		}
	}
	return n, nil
}

// Close stops the node (leaving the cluster) and closes the store.
func (n *Node) Close(ctx context.Context) error {
	err := n.Sys.Stop(ctx)
	return errors.Join(err, n.store.Close())
}

type reporter struct {
	node string
	out  *lineWriter
}

func (r reporter) Observe(_ context.Context, e actor.HookEvent) {
	switch e.Kind {
	case actor.HookInstanceActivated:
		r.out.line("activated %s %s %d", r.node, e.Instance, time.Now().UnixNano())
	case actor.HookTimerFired:
		r.out.line("fired %s %s %d", r.node, e.Instance, e.Duration)
	case actor.HookInstanceCompleted:
		r.out.line("completed %s %s %d", r.node, e.Instance, time.Now().UnixNano())
	case actor.HookInstancePassivated:
		r.out.line("passivated %s %s %d", r.node, e.Instance, time.Now().UnixNano())
	case actor.HookInstanceLost:
		r.out.line("lost %s %s %d", r.node, e.Instance, time.Now().UnixNano())
	}
}

type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) line(format string, args ...any) {
	if l.w == nil {
		return
	}
	s := fmt.Sprintf(format, args...)
	s = strings.ReplaceAll(s, "\n", " ")
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, s+"\n")
}
