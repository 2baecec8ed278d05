// Events shows Norn's outbox: workflows emit CloudEvents with events.Emit,
// recorded in the same transaction as the step they belong to, and a
// Relayer delivers them to an HTTP sink, retrying until the sink takes
// them.
//
//	go run ./examples/events
//
// It runs on an SQLite file in a temp dir (deleted at the end). Two order
// workflows each emit "order.placed" and "order.paid". The sink is a local
// HTTP server that refuses its first two requests with 503, so the first
// events are retried after a back-off; every event arrives, with the ID it
// was given when it was recorded, and the program prints the outbox as the
// relayer left it.
package main

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/events"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
	"github.com/nornlabs/norn/supervisor"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

var start = time.Now()

// logf prints a line with the time since the start.
func logf(format string, args ...any) {
	fmt.Printf("%6.3fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	// The node: a store in a temp dir, running orderFlow.
	dir, err := os.MkdirTemp("", "norn-events-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "norn.db"), sqlite.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(orderFlow), Logger: quiet})
	if err != nil {
		return err
	}
	defer func() {
		if err := sys.Stop(context.Background()); err != nil {
			log.Print(err)
		}
	}()

	// Outgoing events: a sink, and a relayer that the node wakes on every
	// commit that emitted (WatchOutbox).
	snk, err := startSink()
	if err != nil {
		return err
	}
	defer func() { _ = snk.Close() }()
	relayer, err := events.NewRelayer(events.RelayerConfig{
		Store:  st,
		Sink:   &events.HTTPSink{URL: snk.URL, Mode: events.Binary},
		Wake:   sys.WatchOutbox(),
		Logger: quiet,
		// Retry after 300ms, then 600ms …: short for a demo (the default
		// starts at 1s and grows to a minute).
		Backoff: supervisor.RetryPolicy{Initial: 300 * time.Millisecond, Multiplier: 2, MaxInterval: 5 * time.Second},
	})
	if err != nil {
		return err
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayed := make(chan error, 1)
	go func() { relayed <- relayer.Run(relayCtx) }()
	defer func() {
		stopRelay()
		if err := <-relayed; err != nil {
			log.Print(err)
		}
	}()
	logf("relaying to %s (binary mode); the sink refuses its first %d requests", snk.URL, failFirst)

	// Incoming events (ingress) go here: a handler that turns CloudEvents
	// arriving over HTTP into workflow starts and messages.

	orders := []Order{{ID: "order-1", Item: "widget", Cents: 1250}, {ID: "order-2", Item: "gadget", Cents: 990}}
	for _, o := range orders {
		pid, err := actor.Spawn(ctx, sys, orderFlow, o, actor.WithID(o.ID))
		if err != nil {
			return err
		}
		receipt, err := actor.Await(ctx, sys, orderFlow, pid)
		if err != nil {
			return err
		}
		logf("workflow %s done: %s (its events are committed; the relayer takes it from here)", pid, receipt)
	}

	// The relayer records each outcome after the sink's answer: wait until
	// no event is left pending (or failing for too long, for this demo).
	for deadline := time.Now().Add(30 * time.Second); ; {
		pending, err := st.ListOutbox(ctx, persistence.OutboxPending, "", 0)
		if err != nil {
			return err
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d events still pending after 30s", len(pending))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	recs, err := st.ListOutbox(ctx, "", "", 0)
	if err != nil {
		return err
	}
	logf("the outbox (ListOutbox):")
	for _, r := range recs {
		fmt.Printf("          %-16s %-24s %-8s attempts %d  %s\n", r.ID, r.Type, r.Status, r.Attempts, r.Error)
	}
	return nil
}
