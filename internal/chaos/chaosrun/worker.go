package chaosrun

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// The parent starts workers by re-executing a binary (the chaos command
// itself, or a test binary) with these variables set.
const (
	roleEnv  = "NORN_CHAOS_ROLE" // "worker"
	storeEnv = "NORN_CHAOS_STORE"
	logEnv   = "NORN_CHAOS_EFFECTS"
	nodeEnv  = "NORN_CHAOS_NODE"
	runEnv   = "NORN_CHAOS_RUN"
	leaseEnv = "NORN_CHAOS_LEASE" // Config.LeaseTTL, as time.ParseDuration reads it
)

// Worker timings. A short lease (Config.LeaseTTL) makes the take-over of a
// killed worker's instances quick; a short passivation matters on SQLite,
// where nothing tells a worker about mail another process committed: a
// parked consumer only sees it once it has passivated and the recovery scan
// finds it.
const (
	defaultLeaseTTL      = 2 * time.Second
	workerPassivateAfter = 2 * time.Second
	workerStopTimeout    = 30 * time.Second
	// spawnConcurrency bounds the Spawn calls a worker has in flight.
	spawnConcurrency = 64
)

// The worker's side of the protocol, one line each way:
//
//	parent → worker: "spawn chain 3 4 5", "spawn consumer 0 1", "spawn tx 7", "stop"
//	worker → parent: "ready", "ack chain 3" (the spawn is durable),
//	                 "nack chain 3" (it failed; ask again), "stopped"
//
// The worker exits at once when its stdin closes (the parent went away).

// IsWorker reports whether this process was started as a chaos worker; its
// main (or TestMain) must then call WorkerMain and nothing else.
func IsWorker() bool { return os.Getenv(roleEnv) == "worker" }

// WorkerMain runs a worker until the parent stops it or goes away, and
// returns the process's exit code.
func WorkerMain() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := runWorker(log); err != nil {
		log.Error("chaos worker", "err", err)
		return 1
	}
	return 0
}

var errParentGone = errors.New("stdin closed: the parent went away")

func runWorker(log *slog.Logger) error {
	storeURL, effectsPath, node, run := os.Getenv(storeEnv), os.Getenv(logEnv), os.Getenv(nodeEnv), os.Getenv(runEnv)
	if storeURL == "" || effectsPath == "" || node == "" || run == "" {
		return fmt.Errorf("missing %s, %s, %s or %s", storeEnv, logEnv, nodeEnv, runEnv)
	}
	lease, err := time.ParseDuration(os.Getenv(leaseEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", leaseEnv, err)
	}
	if lease <= 0 {
		return fmt.Errorf("%s: want a positive duration, not %v", leaseEnv, lease)
	}
	effects, err := openEffectLog(effectsPath)
	if err != nil {
		return err
	}
	ctx := context.Background()
	st, err := storeurl.Open(ctx, storeURL)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	chain, consumer, txWf := workflows(effects, run)
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(chain, consumer, txWf), NodeID: node,
		LeaseTTL: lease, PassivateAfter: workerPassivateAfter, Logger: log}) // the runtime adds node=
	if err != nil {
		st.Close()
		return fmt.Errorf("start system: %w", err)
	}
	log = log.With("node", node)
	out := &lineWriter{}
	out.say("ready")

	channel := channelName(run)
	spawn := func(kind string, i int) error {
		var err error
		switch kind {
		case "chain":
			_, err = actor.Spawn(ctx, sys, chain, i, actor.WithID(chainID(run, i)))
		case "consumer":
			_, err = actor.Spawn(ctx, sys, consumer, channel, actor.WithID(consumerID(run, i)))
		case "tx":
			_, err = actor.Spawn(ctx, sys, txWf, i, actor.WithID(txID(run, i)))
		default:
			err = fmt.Errorf("unknown kind %q", kind)
		}
		return err
	}
	// Spawns run in goroutines so that this loop keeps reading stdin; a
	// "stop" waits for them before stopping the system.
	var spawns sync.WaitGroup
	sem := make(chan struct{}, spawnConcurrency)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 16<<20)
	for in.Scan() {
		fields := strings.Fields(in.Text())
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "spawn":
			if len(fields) < 2 {
				return fmt.Errorf("bad command %q", in.Text())
			}
			kind := fields[1]
			for _, f := range fields[2:] {
				i, err := strconv.Atoi(f)
				if err != nil {
					return fmt.Errorf("bad command %q: %w", in.Text(), err)
				}
				spawns.Go(func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					if err := spawn(kind, i); err != nil {
						log.Warn("spawn failed", "kind", kind, "i", i, "err", err)
						out.say("nack %s %d", kind, i)
						return
					}
					out.say("ack %s %d", kind, i)
				})
			}
		case "stop":
			spawns.Wait()
			sctx, cancel := context.WithTimeout(ctx, workerStopTimeout)
			defer cancel()
			if err := errors.Join(sys.Stop(sctx), st.Close()); err != nil {
				return fmt.Errorf("stop: %w", err)
			}
			out.say("stopped")
			return nil
		default:
			return fmt.Errorf("unknown command %q", in.Text())
		}
	}
	if err := in.Err(); err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	return errParentGone
}

// lineWriter writes whole lines to stdout, one write each.
type lineWriter struct{ mu sync.Mutex }

func (w *lineWriter) say(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}
