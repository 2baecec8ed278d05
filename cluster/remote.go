package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nornlabs/norn/cluster/internal/wire"
)

// receiverName names the actor that takes Wake messages on every node, so
// that a sender needs only the node's remote address to reach it.
const receiverName = "norn-cluster"

// endpoint is the node's remote messaging: a protoactor ActorSystem with
// remote serving gRPC on the remote address, and the receiver actor.
type endpoint struct {
	sys      *actor.ActorSystem
	rem      *remote.Remote
	receiver *actor.PID
	addr     string // advertised host:port, as other nodes dial it
}

// startEndpoint starts the remote endpoint. gossipIP is the node's gossip
// advertise address, the remote host's fallback. onWake runs on the
// receiver actor for each Wake that arrives.
func startEndpoint(cfg Config, gossipIP string, log *slog.Logger, onWake func(*wire.Wake)) (*endpoint, error) {
	port := cfg.RemoteBindPort
	attempts := 1
	if port == 0 {
		// remote.Start panics when it cannot listen and reports no bound
		// port, so pick a free port first; another process may take it in
		// between, hence the retries.
		attempts = 10
	}
	var lastErr error
	for range attempts {
		p := port
		if p == 0 {
			free, err := freePort(cfg.RemoteBindAddr)
			if err != nil {
				return nil, err
			}
			p = free
		}
		ep, err := startEndpointAt(cfg, p, gossipIP, log, onWake)
		if err == nil {
			return ep, nil
		}
		lastErr = err
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, lastErr
}

func startEndpointAt(cfg Config, port int, gossipIP string, log *slog.Logger, onWake func(*wire.Wake)) (ep *endpoint, err error) {
	host := cfg.RemoteAdvertiseAddr
	if host == "" {
		host = cfg.RemoteBindAddr
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			host = gossipIP
		}
	}
	advPort := cfg.RemoteAdvertisePort
	if advPort == 0 {
		advPort = port
	}
	addr := net.JoinHostPort(host, strconv.Itoa(advPort))

	plog := slog.New(debugOnly{log.Handler()}).With("lib", "protoactor")
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return plog }))
	creds := insecure.NewCredentials()
	opts := []remote.ConfigOption{remote.WithAdvertisedHost(addr)}
	if cfg.RemoteServerTLS != nil {
		creds = credentials.NewTLS(cfg.RemoteClientTLS.Clone())
		opts = append(opts, remote.WithServerOptions(grpc.Creds(credentials.NewTLS(cfg.RemoteServerTLS.Clone()))))
	}
	// WithDialOptions replaces the list, so it is given once, whole.
	opts = append(opts, remote.WithDialOptions(grpc.WithTransportCredentials(creds), grpc.WithStreamInterceptor(closeConnOnFailure)))
	rem := remote.NewRemote(sys, remote.Configure(cfg.RemoteBindAddr, port, opts...))
	defer func() {
		// Start panics when it cannot listen or its actors do not start.
		if r := recover(); r != nil {
			sys.Shutdown()
			cause, ok := r.(error)
			if !ok {
				cause = fmt.Errorf("%v", r)
			}
			ep, err = nil, fmt.Errorf("cluster: start remote endpoint on %s: %w", net.JoinHostPort(cfg.RemoteBindAddr, strconv.Itoa(port)), cause)
		}
	}()
	rem.Start()
	props := actor.PropsFromProducer(func() actor.Actor { return receiver(onWake) })
	pid, err := sys.Root.SpawnNamed(props, receiverName)
	if err != nil {
		(&endpoint{sys: sys, rem: rem}).stop()
		return nil, fmt.Errorf("cluster: spawn the wake receiver: %w", err)
	}
	return &endpoint{sys: sys, rem: rem, receiver: pid, addr: addr}, nil
}

// send hands a Wake to protoactor for the node at addr. It does not wait
// for the network: the endpoint writer queues it (and drops it if the node
// cannot be reached).
func (e *endpoint) send(addr string, msg *wire.Wake) {
	e.sys.Root.Send(actor.NewPID(addr, receiverName), msg)
}

// stop ends remote messaging: the receiver first, so that no Wake reaches
// the host after stop returns, then the gRPC server, then the actors that
// hold the connections to other nodes, then the actor system.
//
// remote.Shutdown(true) would stop those actors itself, but it clears the
// endpoint manager's connection map without synchronisation while a
// connection that another node closed may still be reporting its end
// through it (a data race, and a nil map panic at worst); stopping the
// actors by name leaves the map alone.
func (e *endpoint) stop() {
	log := e.sys.Logger()
	if e.receiver != nil {
		if err := e.sys.Root.StopFuture(e.receiver).Wait(); err != nil {
			log.Debug("cluster: stop the wake receiver", "err", err)
		}
	}
	e.rem.Shutdown(false)
	for _, name := range []string{"EndpointSupervisor", "activator"} {
		if err := e.sys.Root.StopFuture(e.sys.NewLocalPID(name)).Wait(); err != nil {
			log.Debug("cluster: stop protoactor remote actor", "actor", name, "err", err)
		}
	}
	e.sys.Shutdown()
}

// closeConnOnFailure closes a client connection once its stream fails.
//
// protoactor's endpoint writer dials a new connection on each retry to a
// node it cannot reach and never closes the one that failed: each would
// live on, reconnecting to the dead address in the background, for as long
// as the process. A node sends wakes to nodes that have just died, so
// without this every dead peer would leak up to five connections. A stream
// that failed is of no further use to the writer (it stops or dials anew),
// and closing a connection twice, here and when the writer stops, is
// harmless.
func closeConnOnFailure(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		_ = cc.Close()
		return nil, err
	}
	return closingStream{ClientStream: s, cc: cc}, nil
}

// closingStream closes its connection when a send or receive fails.
type closingStream struct {
	grpc.ClientStream
	cc *grpc.ClientConn
}

func (s closingStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil {
		_ = s.cc.Close()
	}
	return err
}

func (s closingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		_ = s.cc.Close()
	}
	return err
}

// receiver is the actor that takes Wake messages from other nodes.
type receiver func(*wire.Wake)

func (r receiver) Receive(c actor.Context) {
	if m, ok := c.Message().(*wire.Wake); ok {
		r(m)
	}
}

// freePort asks the kernel for a free TCP port on host.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("cluster: pick a remote port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
