package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// Node is a started Norn node and what it was started with.
type Node struct {
	Ctx      context.Context   // done at Ctrl-C or SIGTERM
	Store    persistence.Store // the store named by -store
	Sys      *actor.System     // the node, running the workflows given to Start
	StoreURL string            // the -store flag
	Fresh    bool              // the -fresh flag: false when resuming an earlier run

	stopSignals context.CancelFunc
}

// DefaultStore is where every example keeps its instances unless -store
// says otherwise: one file, the one the norn command is pointed at in the
// README (export NORN_STORE=norn-data/norn.db), so that after any example
// `norn ls` shows its instances. A fresh run replaces the previous one's.
const DefaultStore = "sqlite://norn-data/norn.db"

// Start parses the command line (-store and -fresh), deletes the SQLite
// store first if -fresh, opens the store and starts a node that runs the
// workflows. Call it once, from main, and defer Close.
func Start(workflows ...actor.Definition) (*Node, error) {
	storeURL := flag.String("store", DefaultStore, "store URL: sqlite://path or postgres://…")
	fresh := flag.Bool("fresh", true, "delete the SQLite file first; -fresh=false resumes unfinished instances")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	n := &Node{Ctx: ctx, StoreURL: *storeURL, Fresh: *fresh, stopSignals: stop}
	if n.Fresh {
		if err := removeSQLite(n.StoreURL); err != nil {
			stop()
			return nil, err
		}
	}
	st, err := storeurl.Open(ctx, n.StoreURL)
	if err != nil {
		stop()
		return nil, err
	}
	n.Store = st

	n.Sys, err = actor.Start(ctx, actor.Config{
		Store:     st,
		Workflows: actor.Register(workflows...),
		// Short leases: a re-run after kill -9 takes the instances back as
		// soon as the dead run's leases expire (the default is 10s).
		LeaseTTL: 2 * time.Second,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		st.Close()
		stop()
		return nil, err
	}
	return n, nil
}

// Close stops the node (giving its instances 5s to stop), closes the store
// and stops listening for Ctrl-C. Unfinished instances stay in the store,
// for a run with -fresh=false to resume.
func (n *Node) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.Sys.Stop(ctx); err != nil {
		log.Print(err)
	}
	n.Store.Close()
	n.stopSignals()
}

// Part is one section of an example.
type Part func(context.Context, *actor.System) error

// RunParts runs the parts in order. An interruption (Ctrl-C) ends the run
// quietly with a hint on resuming; any other error is returned.
func (n *Node) RunParts(parts ...Part) error {
	for _, part := range parts {
		if err := part(n.Ctx, n.Sys); err != nil {
			if n.Ctx.Err() != nil {
				fmt.Println("interrupted: run again with -fresh=false to resume")
				return nil
			}
			return err
		}
	}
	return nil
}

// removeSQLite deletes an SQLite store's files so that a run starts clean.
// Other stores are left alone: with them a re-run reuses the instances of
// earlier runs, as -fresh=false does.
func removeSQLite(url string) error {
	path, ok := strings.CutPrefix(url, "sqlite://")
	if !ok && strings.Contains(url, "://") {
		return nil
	}
	if !ok {
		path = url
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}
