package cluster_test

// Multi-node tests run each node in a child process: the test binary
// re-executed, driven over stdin/stdout with one JSON line per request and
// reply. protoactor's remote.Start sets grpc's process-wide logger without
// synchronisation, so two remote endpoints in one process are a data race
// under -race (they never share a process in production), and a child can
// be killed -9 like a crashed node. For the same reason each test that
// starts an endpoint in the test process itself (a client member, say)
// runs in a process of its own: testutil.InOwnProcess.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/cluster"
	"github.com/nornlabs/norn/internal/testutil"
)

// childEnv carries a child node's spec; its presence makes the test
// binary a node instead of running tests.
const childEnv = "NORN_CLUSTER_TEST_NODE"

// spec is what a child node is started with.
type spec struct {
	Name      string
	Seeds     []string
	SecretKey []byte
	TLS       *tlsSpec
}

// tlsSpec is a node's TLS material, PEM encoded.
type tlsSpec struct {
	CA, Cert, Key []byte
}

type request struct {
	Op   string // owners, members, dead, woken, wake, partition, leave, close
	Node string
	IDs  []string
	On   bool
}

type reply struct {
	Err     string
	Self    cluster.Member
	Owners  []string
	Members []cluster.Member
	Dead    []string
	Woken   []string
	Leaks   string
}

// host records what a Cluster tells its node.
type host struct {
	mu    sync.Mutex
	wakes []string
	dead  []string // every node reported dead, in order
}

func (h *host) of(name string, l *slog.Logger) actor.ClusterHost {
	return actor.ClusterHost{
		NodeID: name,
		Wake: func(ids []string) {
			h.mu.Lock()
			h.wakes = append(h.wakes, ids...)
			h.mu.Unlock()
		},
		Changed: func(dead []string) {
			h.mu.Lock()
			h.dead = append(h.dead, dead...)
			h.mu.Unlock()
		},
		Logger: l,
	}
}

// runChild is the child side: it joins, answers requests until stdin
// closes, and closes the Cluster.
func runChild(raw string) int {
	ignore := goleak.IgnoreCurrent()
	var s spec
	out := json.NewEncoder(os.Stdout)
	say := func(r reply) {
		if err := out.Encode(r); err != nil {
			os.Exit(4)
		}
	}
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		say(reply{Err: err.Error()})
		return 1
	}
	logger := testutil.Logger()
	cfg := cluster.Loopback()
	cfg.Logger = logger.With("node", s.Name)
	cfg.Seeds = s.Seeds
	cfg.SecretKey = s.SecretKey
	if s.TLS != nil {
		var err error
		if cfg.RemoteServerTLS, cfg.RemoteClientTLS, err = s.TLS.configs(); err != nil {
			say(reply{Err: err.Error()})
			return 1
		}
	}
	c, err := cluster.New(cfg)
	if err != nil {
		say(reply{Err: err.Error()})
		return 1
	}
	h := &host{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Join(ctx, h.of(s.Name, logger)); err != nil {
		say(reply{Err: err.Error()})
		return 0
	}
	var self cluster.Member
	for _, m := range c.Members() {
		if m.Name == s.Name {
			self = m
		}
	}
	say(reply{Self: self})

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			say(reply{Err: err.Error()})
			continue
		}
		var r reply
		switch req.Op {
		case "owners":
			r.Owners = ownerTable(c)
		case "members":
			r.Members = c.Members()
		case "dead":
			h.mu.Lock()
			r.Dead = slices.Clone(h.dead)
			h.mu.Unlock()
		case "woken":
			h.mu.Lock()
			r.Woken = slices.Clone(h.wakes)
			h.mu.Unlock()
		case "wake":
			c.Wake(req.Node, req.IDs)
		case "partition":
			cluster.SetPartitioned(c, req.On)
		case "leave":
			if err := c.Leave(ctx); err != nil {
				r.Err = err.Error()
			}
			// Owner must not name this node from Leave's return on.
			r.Owners = ownerTable(c)
		case "close":
			if err := c.Close(); err != nil {
				r.Err = err.Error()
			}
			if err := goleak.Find(append(protoactorGoroutines(), ignore)...); err != nil {
				r.Leaks = err.Error()
			}
		default:
			r.Err = "unknown op " + req.Op
		}
		say(r)
	}
	_ = c.Close()
	return 0
}

// proc is a child node as the test sees it.
type proc struct {
	t      *testing.T
	name   string
	self   cluster.Member
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    chan string // stdout lines; closed when the child exits
	stderr *syncBuffer
	exited chan struct{}
	mu     sync.Mutex // one request at a time
}

// spawn starts a child node; it is stopped (and its stderr checked for
// data races) when the test ends. It fails the test if Join fails.
func spawn(t *testing.T, s spec) *proc {
	t.Helper()
	p, err := trySpawn(t, s)
	if err != nil {
		t.Fatalf("node %s: %v", s.Name, err)
	}
	return p
}

// trySpawn starts a child node and returns Join's error, if any.
func trySpawn(t *testing.T, s spec) (*proc, error) {
	t.Helper()
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// Under -race a process sleeps a second at exit by default, for
	// goroutines to report races; its Close has returned by then.
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw),
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=100"))
	p := &proc{t: t, name: s.Name, cmd: cmd, out: make(chan string, 16), stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if p.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.out <- sc.Text()
		}
		close(p.out)
		_ = cmd.Wait() // after the last read of stdout, as Wait requires
		close(p.exited)
	}()
	t.Cleanup(p.stop)
	r := p.read()
	if r.Err != "" {
		return nil, fmt.Errorf("%s", r.Err)
	}
	p.self = r.Self
	return p, nil
}

// read waits for the child's next reply.
func (p *proc) read() reply {
	p.t.Helper()
	select {
	case l, ok := <-p.out:
		if !ok {
			p.t.Fatalf("node %s exited; stderr:\n%s", p.name, p.stderr.String())
		}
		var r reply
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			p.t.Fatalf("node %s said %q: %v", p.name, l, err)
		}
		return r
	case <-time.After(wait):
		p.t.Fatalf("node %s did not answer within %v; stderr:\n%s", p.name, wait, p.stderr.String())
	}
	return reply{}
}

func (p *proc) call(req request) reply {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	raw, err := json.Marshal(req)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.in.Write(append(raw, '\n')); err != nil {
		p.t.Fatalf("node %s: %v; stderr:\n%s", p.name, err, p.stderr.String())
	}
	r := p.read()
	if r.Err != "" {
		p.t.Fatalf("node %s: %s: %s", p.name, req.Op, r.Err)
	}
	return r
}

func (p *proc) owners() []string { return p.call(request{Op: "owners"}).Owners }
func (p *proc) members() []cluster.Member {
	return p.call(request{Op: "members"}).Members
}
func (p *proc) dead() []string  { return p.call(request{Op: "dead"}).Dead }
func (p *proc) woken() []string { return p.call(request{Op: "woken"}).Woken }
func (p *proc) wake(node string, ids ...string) {
	p.call(request{Op: "wake", Node: node, IDs: ids})
}
func (p *proc) partition(on bool) { p.call(request{Op: "partition", On: on}) }

// leave calls Leave and returns the owner table right after it.
func (p *proc) leave() []string { return p.call(request{Op: "leave"}).Owners }

// close closes the node's Cluster gracefully and checks that it left no
// goroutine behind.
func (p *proc) close() {
	p.t.Helper()
	if r := p.call(request{Op: "close"}); r.Leaks != "" {
		p.t.Errorf("node %s leaked goroutines after Close:\n%s", p.name, r.Leaks)
	}
}

// kill ends the child at once, as a crash would: no Leave, no Close.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop ends the child (closing stdin makes it close its Cluster) and
// fails the test if it saw a data race.
func (p *proc) stop() {
	_ = p.in.Close()
	select {
	case <-p.exited:
	case <-time.After(wait):
		p.t.Errorf("node %s did not exit within %v after its stdin closed", p.name, wait)
		p.kill()
	}
	if strings.Contains(p.stderr.String(), "DATA RACE") || p.t.Failed() {
		if strings.Contains(p.stderr.String(), "DATA RACE") {
			p.t.Errorf("node %s saw a data race", p.name)
		}
		p.t.Logf("node %s stderr:\n%s", p.name, p.stderr.String())
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (s *tlsSpec) configs() (server, client *tls.Config, err error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.CA) {
		return nil, nil, fmt.Errorf("bad CA PEM")
	}
	cert, err := tls.X509KeyPair(s.Cert, s.Key)
	if err != nil {
		return nil, nil, err
	}
	server = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
	client = &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		MinVersion:   tls.VersionTLS12,
	}
	return server, client, nil
}
