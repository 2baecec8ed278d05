package main

// The cluster workloads run every node in a process of its own: the bench
// binary re-executed with the node's spec in NORN_BENCH_NODE, so that a node
// can be killed -9 like a crashed host. The runner joins the cluster as a
// client member (it owns no instances): it spawns, sends and reads history
// through its own System, and reads what each node reports on its stdout
// (see internal/clusternode).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nornlabs/norn/cluster"
	"github.com/nornlabs/norn/internal/clusternode"
	"github.com/nornlabs/norn/persistence"
)

// nodeEnv makes the bench binary a cluster node instead of the runner; its
// value is the node's nodeSpec in JSON.
const nodeEnv = "NORN_BENCH_NODE"

// nodeSpec is what a node process is started with.
type nodeSpec struct {
	Store    string        // SQLite path or postgres:// URL
	NodeID   string        //
	Seeds    []string      // gossip addresses to join
	LeaseTTL time.Duration // 0: actor's default
	Recovery time.Duration // RecoveryInterval; 0: actor's default
}

// nodeRole runs a node if NORN_BENCH_NODE asks for one and reports true
// with the exit code; otherwise it returns false at once. The node runs
// until SIGTERM (a graceful stop), SIGKILL, or the end of its stdin (the
// runner went away).
func nodeRole() (int, bool) {
	raw := os.Getenv(nodeEnv)
	if raw == "" {
		return 0, false
	}
	var spec nodeSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "bench node:", err)
		return 2, true
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	ctx := context.Background()
	n, err := clusternode.Start(ctx, clusternode.Config{
		Store: spec.Store, NodeID: spec.NodeID, Seeds: spec.Seeds, Out: os.Stdout,
		LeaseTTL: spec.LeaseTTL, RecoveryInterval: spec.Recovery,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: nodeLogLevel()})).With("node", spec.NodeID),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench node %s: %v\n", spec.NodeID, err)
		fmt.Fprintf(os.Stdout, "failed %s\n", spec.NodeID)
		return 1, true
	}
	<-sigs
	stop, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := n.Close(stop); err != nil {
		fmt.Fprintf(os.Stderr, "bench node %s: stop: %v\n", spec.NodeID, err)
		return 1, true
	}
	return 0, true
}

// nodeLogEnv sets the nodes' log level (debug, info; default info, kept
// by the runner for error messages and the take-over times); with it set,
// the runner also copies the nodes' logs to its stderr.
const nodeLogEnv = "NORN_BENCH_NODE_LOG"

func nodeLogLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv(nodeLogEnv))); err != nil {
		return slog.LevelInfo
	}
	return l
}

// takeOverLog matches a node's log line for the release of a failed
// node's leases, and its duration.
var takeOverLog = regexp.MustCompile(`msg="took over the instances of a failed node".* release=(\S+)`)

// releaseTimes are how long each node's release of a failed node's leases
// took, from the nodes' logs (none if the log format changed).
func (c *benchCluster) releaseTimes() map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, p := range c.procs {
		for _, m := range takeOverLog.FindAllStringSubmatch(p.stderr.String(), -1) {
			if d, err := time.ParseDuration(m[1]); err == nil {
				out[name] = d
			}
		}
	}
	return out
}

// nodeProc is a node process as the runner sees it.
type nodeProc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *lockedBuffer
	exited chan struct{} // closed once the process is reaped
	ended  atomic.Bool   // the runner ended it on purpose (kill -9, stop)
}

// kill9 ends the node at once, as a crash would, and waits until it is
// reaped.
func (p *nodeProc) kill9() {
	p.ended.Store(true)
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop asks the node to stop gracefully, and kills it if it has not within
// d.
func (p *nodeProc) stop(d time.Duration) {
	p.ended.Store(true)
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		p.kill9()
	}
}

// nodeEvent is one report line of a node: "<what> <node> <instance> <n>".
type nodeEvent struct {
	what, node, instance string
	n                    int64 // a time (unix ns) or a lateness (ns)
}

// benchCluster is a run's node processes, its client member, and what the
// nodes reported.
type benchCluster struct {
	store  string // what the nodes open: an SQLite path or a postgres:// URL
	spec   nodeSpec
	tmpDir string
	procs  map[string]*nodeProc
	order  []string
	client *clusternode.Node
	logf   func(format string, args ...any)

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every report
	seed      string
	ready     map[string]bool
	died      map[string]bool // exited (killed on purpose or not)
	events    []nodeEvent
	activated map[string]string // instance → the node that activated it last
	completed map[string]string // instance → the node that reported it completed
}

// startCluster starts the named nodes one after the other (each joins the
// first), then joins the runner as a client and waits until it sees them
// all alive. spec gives the nodes' timings; its Store and NodeID are set
// here.
func startCluster(ctx context.Context, r *runner, names []string, spec nodeSpec) (*benchCluster, error) {
	c := &benchCluster{spec: spec, procs: map[string]*nodeProc{}, ready: map[string]bool{}, died: map[string]bool{},
		activated: map[string]string{}, completed: map[string]string{}, changed: make(chan struct{}), logf: r.logf}
	switch {
	case r.t.temp():
		dir, err := os.MkdirTemp("", "norn-bench-")
		if err != nil {
			return nil, err
		}
		c.tmpDir, c.store = dir, filepath.Join(dir, "norn.db")
	case r.t.postgres():
		c.store = r.t.url
	default:
		c.store = r.t.sqlitePath()
	}
	ok := false
	defer func() {
		if !ok {
			c.close()
		}
	}()
	for _, name := range names {
		if err := c.startNode(ctx, name); err != nil {
			return nil, err
		}
	}
	n, err := clusternode.Start(ctx, clusternode.Config{Store: c.store, NodeID: "bench-client-" + runID(), Seeds: []string{c.seed},
		Client: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c.client = n
	if err := c.waitAlive(ctx, len(names)); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// startNode starts one node process and waits until it says it is ready.
func (c *benchCluster) startNode(ctx context.Context, name string) error {
	spec := c.spec
	spec.Store, spec.NodeID = c.store, name
	c.mu.Lock()
	if c.seed != "" {
		spec.Seeds = []string{c.seed}
	}
	c.mu.Unlock()
	raw, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(raw))
	p := &nodeProc{name: name, cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if os.Getenv(nodeLogEnv) != "" {
		cmd.Stderr = io.MultiWriter(p.stderr, os.Stderr)
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start node %s: %w", name, err)
	}
	c.procs[name] = p
	c.order = append(c.order, name)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.report(sc.Text())
		}
		_ = cmd.Wait() // after the last read of stdout, as Wait requires
		c.mu.Lock()
		c.died[name] = true
		c.notifyLocked()
		c.mu.Unlock()
		close(p.exited)
	}()
	return c.waitFor(ctx, name+" ready", func() bool { return c.ready[name] })
}

// report records one line of a node.
func (c *benchCluster) report(line string) {
	f := strings.Fields(line)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case len(f) == 3 && f[0] == "ready":
		c.ready[f[1]] = true
		if c.seed == "" {
			c.seed = f[2]
		}
	case len(f) == 4:
		n, _ := strconv.ParseInt(f[3], 10, 64)
		c.events = append(c.events, nodeEvent{what: f[0], node: f[1], instance: f[2], n: n})
		switch f[0] {
		case "activated":
			c.activated[f[2]] = f[1]
		case "completed":
			c.completed[f[2]] = f[1]
		}
	default:
		return
	}
	c.notifyLocked()
}

func (c *benchCluster) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// waitFor waits until cond (called under the lock) holds. It fails if ctx
// ends first, or if a node that was not killed exits.
func (c *benchCluster) waitFor(ctx context.Context, what string, cond func() bool) error {
	for {
		c.mu.Lock()
		ok, ch := cond(), c.changed
		var dead []string
		for name := range c.died {
			dead = append(dead, name)
		}
		c.mu.Unlock()
		if ok {
			return nil
		}
		for _, name := range dead {
			if p := c.procs[name]; p != nil && !p.ended.Load() {
				return fmt.Errorf("waiting for %s: node %s exited: %s", what, name, lastLines(p.stderr.String(), 5))
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

// waitAlive waits until the client sees n live nodes (clients aside).
func (c *benchCluster) waitAlive(ctx context.Context, n int) error {
	for {
		alive := 0
		for _, m := range c.client.Cluster.Members() {
			if m.State == cluster.StateAlive && !m.Client {
				alive++
			}
		}
		if alive == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the client sees %d of %d nodes: %w", alive, n, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// owner names the node that owns id's bucket, as the client sees it.
func (c *benchCluster) owner(id string) string {
	return c.client.Cluster.Owner(persistence.BucketOf(id))
}

// idsOn returns n instance IDs with the given prefix whose owner is node
// (any node if node is empty).
func (c *benchCluster) idsOn(prefix, node string, n int) []string {
	var ids []string
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprintf("%s-%06d", prefix, i)
		if node == "" || c.owner(id) == node {
			ids = append(ids, id)
		}
	}
	return ids
}

// count counts the reports of kind what, per instance.
func (c *benchCluster) count(what string) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, e := range c.events {
		if e.what == what {
			out[e.instance]++
		}
	}
	return out
}

// logWarnings copies the nodes' warnings and errors so far (a take-over
// that failed, a node that did not trust its view of the others) to the
// progress log, at most a few per node, and returns how many there were.
func (c *benchCluster) logWarnings() int {
	total := 0
	for _, name := range c.order {
		n := 0
		for _, l := range strings.Split(c.procs[name].stderr.String(), "\n") {
			if !strings.Contains(l, "level=WARN") && !strings.Contains(l, "level=ERROR") {
				continue
			}
			if n++; n <= 5 {
				c.logf("%s: %s", name, l)
			}
		}
		total += n
	}
	return total
}

// close ends the client, stops the nodes gracefully (in reverse order) and
// removes a temp database.
func (c *benchCluster) close() {
	if c.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := c.client.Close(ctx); err != nil {
			c.logf("client stop: %v", err)
		}
		cancel()
	}
	var wg sync.WaitGroup
	for _, name := range c.order {
		p := c.procs[name]
		wg.Go(func() { p.stop(20 * time.Second) })
	}
	wg.Wait()
	for _, p := range c.procs {
		_ = p.stdin.Close()
	}
	if c.tmpDir != "" {
		os.RemoveAll(c.tmpDir)
	}
}

// lockedBuffer is a bytes.Buffer safe for the exec copier and the runner.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// lastLines is the end of a node's stderr, for an error message.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "(no output)"
	}
	return strings.Join(lines, " | ")
}
