package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nornlabs/norn/internal/chaos/chaosrun"
)

func main() {
	// The command re-executes itself as its workers.
	if chaosrun.IsWorker() {
		os.Exit(chaosrun.WorkerMain())
	}
	os.Exit(run())
}

func run() int {
	var (
		stores    = flag.String("store", "sqlite", "comma-separated stores: sqlite (a new temp file), a SQLite path, sqlite://PATH or postgres://…")
		workflows = flag.Int("workflows", 10000, "chain workflows to spawn, and queue messages to publish")
		consumers = flag.Int("consumers", 4, "competing consumers in queue mode")
		kills     = flag.Int("kills", 200, "kill -9s of a worker over the run")
		workers   = flag.Int("workers", 0, "worker processes at once (0: 1 for SQLite, 2 for PostgreSQL)")
		mode      = flag.String("mode", "both", "chain, queue, both (chain and queue), tx, or all")
		lease     = flag.Duration("lease", 2*time.Second, "the workers' lease TTL (a worker restarted under a new node ID waits this long for a killed one's instances)")
		timeout   = flag.Duration("timeout", 20*time.Minute, "deadline of each run (the checks come after it)")
		seed      = flag.Uint64("seed", 0, "seed of the kill schedule (0: random, printed)")
		dir       = flag.String("dir", "", "where to keep the side-effect log, worker logs and the temp SQLite file (default: a temp dir, removed if the run passes)")
		verbose   = flag.Bool("v", false, "log every kill")
	)
	flag.Parse()
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	chain := *mode == "chain" || *mode == "both" || *mode == "all"
	queue := *mode == "queue" || *mode == "both" || *mode == "all"
	tx := *mode == "tx" || *mode == "all"
	if !chain && !queue && !tx {
		log.Error("-mode must be chain, queue, both, tx or all", "mode", *mode)
		return 2
	}
	exe, err := os.Executable()
	if err != nil {
		log.Error("finding this executable to run workers", "err", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var all []chaosrun.Result
	failed := false
	for _, store := range strings.Split(*stores, ",") {
		store = strings.TrimSpace(store)
		if store == "sqlite" {
			store = ""
		}
		d := *dir
		if d == "" {
			if d, err = os.MkdirTemp("", "norn-chaos-"); err != nil {
				log.Error("temp dir", "err", err)
				return 2
			}
		} else if err := os.MkdirAll(d, 0o755); err != nil {
			log.Error("-dir", "err", err)
			return 2
		}
		results, err := chaosrun.Run(ctx, chaosrun.Config{Store: store, Workflows: *workflows, Consumers: *consumers,
			Kills: *kills, Workers: *workers, LeaseTTL: *lease, Chain: chain, Queue: queue, Tx: tx, Timeout: *timeout, Seed: *seed,
			WorkerCommand: []string{exe}, Dir: d, Logger: log})
		if err != nil {
			log.Error("chaos run failed", "err", err, "dir", d)
			failed = true
			continue
		}
		ok := true
		for _, r := range results {
			for _, n := range r.Notes {
				log.Warn("check", "mode", r.Mode, "problem", n)
			}
			ok = ok && r.OK()
		}
		all = append(all, results...)
		if !ok {
			failed = true
			log.Warn("chaos run found problems; its files are kept", "dir", d, "seed", results[0].Seed)
		} else if *dir == "" {
			os.RemoveAll(d)
		}
	}
	if len(all) > 0 {
		if err := chaosrun.PrintTable(os.Stdout, all); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	if failed {
		return 1
	}
	return 0
}
