// Cluster runs three Norn nodes as separate processes on this machine,
// sharing one store, and shows what a cluster does for its instances:
//
//   - every instance is owned by one node (rendezvous hashing of its ID
//     over the live members), which hosts it and fires its timers;
//   - spawns and messages sent from anywhere reach the owner directly
//     (a wake-up over the nodes' remote endpoints, after the commit);
//   - when a node is killed (kill -9), gossip declares it dead within a
//     second or two and the others take its instances and timers over at
//     once, without waiting for its leases to expire.
//
// This program starts the three nodes (itself, re-executed with -node),
// joins the cluster as a client that owns nothing, spawns sleepers whose
// timers fire a few seconds later and ping-pong pairs whose messages cross
// nodes, kills the node holding most sleepers, and prints where everything
// went and that every instance finished once. It ends by itself:
//
//	go run ./examples/cluster
//	go run ./examples/cluster -store postgres://user:pw@localhost/norn   # an empty database
//
// By default the store is the SQLite file norn-data/norn.db (the one the
// other examples and the README's norn command use), deleted first.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/cluster"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// Sleeper sleeps until its input's time (a durable timer, fired by the
// instance's owner), then reports which node ran it to the end.
type Sleeper struct{ Until time.Time }

func workflows(node string) []actor.Definition {
	where := actor.Activity("where", func(context.Context, struct{}) (string, error) { return node, nil })
	sleeper := actor.Workflow("sleeper", func(ctx *actor.Context, in Sleeper) (string, error) {
		if err := ctx.Sleep(in.Until.Sub(ctx.Now())); err != nil {
			return "", err
		}
		return where.Run(ctx, struct{}{})
	})
	return []actor.Definition{sleeper, pinger, ponger}
}

// pinger sends "ping" to its peer by PID and waits for the "pong", n times.
var pinger = actor.Workflow("pinger", func(ctx *actor.Context, peer actor.PID) (int, error) {
	for i := 0; i < rounds; i++ {
		if err := ctx.Send(peer, "ping"); err != nil {
			return i, err
		}
		if _, err := actor.Receive[string](ctx); err != nil {
			return i, err
		}
	}
	return rounds, nil
})

// ponger answers each ping to its sender.
var ponger = actor.Workflow("ponger", func(ctx *actor.Context, _ struct{}) (int, error) {
	for i := 0; i < rounds; i++ {
		m, err := actor.Receive[string](ctx)
		if err != nil {
			return i, err
		}
		if err := ctx.Send(actor.PID(m.Sender), "pong"); err != nil {
			return i, err
		}
	}
	return rounds, nil
})

const (
	rounds   = 5
	sleepers = 12
	pairs    = 3
)

func main() {
	node := flag.String("node", "", "run as the cluster node with this name (used by the program itself)")
	seed := flag.String("seed", "", "gossip address of a node to join (with -node)")
	store := flag.String("store", "sqlite://norn-data/norn.db", "store URL: sqlite://path or postgres://…")
	flag.Parse()
	var err error
	if *node != "" {
		err = runNode(*node, *seed, *store)
	} else {
		err = run(*store)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// runNode is one node: it joins the cluster, runs until SIGTERM, then
// leaves it gracefully (its instances go to the others at once).
func runNode(name, seed, storeURL string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	st, err := storeurl.Open(ctx, storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	cfg := cluster.Loopback() // 127.0.0.1, free ports, failure detection in a second or two
	if seed != "" {
		cfg.Seeds = []string{seed}
	}
	cl, err := cluster.New(cfg)
	if err != nil {
		return err
	}
	sys, err := actor.Start(ctx, actor.Config{
		Store: st, NodeID: name, Cluster: cl, Workflows: actor.Register(workflows(name)...),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	for _, m := range cl.Members() {
		if m.Name == name {
			fmt.Println("ready", m.GossipAddr) // read by the parent
		}
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return sys.Stop(stopCtx)
}

// child is a node process.
type child struct {
	name   string
	cmd    *exec.Cmd
	gossip string
}

func startNode(name, seed, storeURL string) (*child, error) {
	cmd := exec.Command(os.Args[0], "-node", name, "-seed", seed, "-store", storeURL)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if addr, ok := strings.CutPrefix(lines.Text(), "ready "); ok {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return &child{name: name, cmd: cmd, gossip: addr}, nil
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return nil, fmt.Errorf("node %s exited before it was ready", name)
}

func run(storeURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if path, ok := strings.CutPrefix(storeURL, "sqlite://"); ok {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
	}
	st, err := storeurl.Open(ctx, storeURL) // creates the schema before the nodes start
	if err != nil {
		return err
	}
	defer st.Close()

	fmt.Println("starting nodes n1, n2, n3 (separate processes, one store)")
	nodes := map[string]*child{}
	first, err := startNode("n1", "", storeURL)
	if err != nil {
		return err
	}
	nodes["n1"] = first
	defer func() {
		// One at a time: each leaves gracefully while the others listen.
		for _, c := range nodes {
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
			_ = c.cmd.Wait()
		}
	}()
	for _, name := range []string{"n2", "n3"} {
		c, err := startNode(name, first.gossip, storeURL)
		if err != nil {
			return err
		}
		nodes[name] = c
	}

	// This process joins as a client: a member that owns no instances but
	// spawns, sends and awaits like any node.
	ccfg := cluster.Loopback()
	ccfg.Seeds = []string{first.gossip}
	ccfg.Client = true
	cl, err := cluster.New(ccfg)
	if err != nil {
		return err
	}
	defs := workflows("client")
	sleeper := defs[0].(*actor.WorkflowDef[Sleeper, string])
	sys, err := actor.Start(ctx, actor.Config{Store: st, NodeID: "client", Cluster: cl, Workflows: actor.Register(defs...),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	defer func() { _ = sys.Stop(context.Background()) }()
	for alive(cl) < 3 {
		time.Sleep(50 * time.Millisecond)
	}
	owner := func(pid actor.PID) string { return cl.Owner(persistence.BucketOf(string(pid))) }

	// Sleepers, spread over the nodes by their IDs.
	due := time.Now().Add(4 * time.Second)
	perNode := map[string][]actor.PID{}
	var sleeping []actor.PID
	for i := 1; i <= sleepers; i++ {
		pid, err := actor.Spawn(ctx, sys, sleeper, Sleeper{Until: due}, actor.WithID(fmt.Sprintf("sleeper-%02d", i)))
		if err != nil {
			return err
		}
		sleeping = append(sleeping, pid)
		perNode[owner(pid)] = append(perNode[owner(pid)], pid)
	}
	fmt.Printf("spawned %d sleepers due at +4s:\n", sleepers)
	for _, n := range []string{"n1", "n2", "n3"} {
		fmt.Printf("  %s owns %v\n", n, perNode[n])
	}

	// Ping-pong pairs whose two ends live on different nodes.
	var pingers []actor.PID
	for i := 1; len(pingers) < pairs; i++ {
		a, b := actor.PID(fmt.Sprintf("ping-%d", i)), actor.PID(fmt.Sprintf("pong-%d", i))
		if owner(a) == owner(b) {
			continue
		}
		if _, err := actor.Spawn(ctx, sys, ponger, struct{}{}, actor.WithID(string(b))); err != nil {
			return err
		}
		if _, err := actor.Spawn(ctx, sys, pinger, b, actor.WithID(string(a))); err != nil {
			return err
		}
		fmt.Printf("  %s on %s pings %s on %s\n", a, owner(a), b, owner(b))
		pingers = append(pingers, a)
	}

	// Kill the node that owns the most sleepers, before their timers fire.
	victim := "n1"
	for n, pids := range perNode {
		if len(pids) > len(perNode[victim]) {
			victim = n
		}
	}
	for _, pid := range perNode[victim] {
		for {
			info, err := sys.Inspect(ctx, pid)
			if err != nil {
				return err
			}
			if info.Node == victim {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	killed := time.Now()
	fmt.Printf("kill -9 %s (it holds %d sleepers and their timers)\n", victim, len(perNode[victim]))
	_ = nodes[victim].cmd.Process.Kill()
	_ = nodes[victim].cmd.Wait()
	delete(nodes, victim)

	for _, pid := range pingers {
		n, err := actor.Await(ctx, sys, pinger, pid)
		if err != nil {
			return err
		}
		fmt.Printf("%s: %d round trips\n", pid, n)
	}
	fmt.Println("sleepers:")
	once := 0
	for _, pid := range sleeping {
		ranOn, err := actor.Await(ctx, sys, sleeper, pid)
		if err != nil {
			return err
		}
		hist, err := sys.History(ctx, pid)
		if err != nil {
			return err
		}
		fired := 0
		var firedAt time.Time
		for _, e := range hist {
			if e.Kind == actor.EventTimerFired {
				fired++
				firedAt = e.At
			}
		}
		if fired == 1 {
			once++
		}
		note := ""
		if slices.Contains(perNode[victim], pid) {
			note = fmt.Sprintf("  (was on %s, killed %.1fs before the timer was due; fired %dms after its due time)",
				victim, due.Sub(killed).Seconds(), firedAt.Sub(due).Milliseconds())
		}
		fmt.Printf("  %s fired once=%v, finished on %s%s\n", pid, fired == 1, ranOn, note)
	}
	fmt.Printf("%d of %d sleepers finished, each timer fired exactly once: %v\n", len(sleeping), sleepers, once == len(sleeping))
	if once != len(sleeping) {
		return errors.New("a timer fired more than once or not at all")
	}
	return nil
}

// alive counts the members that own instances and are up.
func alive(cl *cluster.Cluster) int {
	n := 0
	for _, m := range cl.Members() {
		if m.State == cluster.StateAlive && !m.Client {
			n++
		}
	}
	return n
}
