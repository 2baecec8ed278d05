// Events shows CloudEvents in and out of Norn. In: the ingress
// (events.NewHandler) on a loopback port takes an order.placed event in
// binary mode, which starts a checkout workflow (events.Handle), and then a
// payment.received event in structured mode addressed to that instance (the
// norninstance extension), which its events.Wait receives. Out: the
// workflow emits CloudEvents with events.Emit, recorded in the same
// transaction as the step they belong to, and a Relayer delivers them to an
// HTTP sink, retrying until the sink takes them.
//
//	go run ./examples/events
//
// It runs on an SQLite file in a temp dir (deleted at the end). The sink is
// a local HTTP server that refuses its first two requests with 503, so the
// first events are retried after a back-off; every event arrives, with the
// ID it was given when it was recorded, and the program prints the outbox
// as the relayer left it.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
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

	// The node: a store in a temp dir, running checkout.
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
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(checkout), Logger: quiet})
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

	// Incoming events: the ingress on a loopback port; order.placed starts
	// a checkout instance.
	h, err := events.NewHandler(sys, events.Handle("com.example.order.placed", checkout), events.WithLogger(quiet))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ingress := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = ingress.Serve(ln) }()
	defer func() { _ = ingress.Close() }()
	url := "http://" + ln.Addr().String() + "/"
	logf("ingress on %s", url)

	// A binary-mode event: attributes in ce- headers, the data in the body.
	placed, _ := http.NewRequestWithContext(ctx, http.MethodPost, url,
		strings.NewReader(`{"id":"order-1","item":"widget","cents":1250}`))
	placed.Header.Set("Content-Type", "application/json")
	placed.Header.Set("ce-specversion", "1.0")
	placed.Header.Set("ce-id", "evt-1")
	placed.Header.Set("ce-source", "/shop")
	placed.Header.Set("ce-type", "com.example.order.placed")
	placed.Header.Set("ce-traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if err := post(placed); err != nil {
		return err
	}
	pid := actor.PID(events.InstanceID(checkout.Name(), "/shop", "evt-1"))
	logf("POST order.placed (binary mode): 202; it started %s", pid)

	// A structured-mode event for that instance only.
	payment := fmt.Sprintf(`{"specversion":"1.0","id":"pay-1","source":"/bank","type":"com.example.payment.received",
		"norninstance":%q,"datacontenttype":"application/json","data":{"order":"order-1","cents":1250}}`, pid)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(payment))
	req.Header.Set("Content-Type", "application/cloudevents+json")
	if err := post(req); err != nil {
		return err
	}
	logf("POST payment.received (structured mode, norninstance %s): 202", pid)
	// Delivered again (a broker retrying): acknowledged, delivered once.
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(payment))
	req.Header.Set("Content-Type", "application/cloudevents+json")
	if err := post(req); err != nil {
		return err
	}
	logf("POST payment.received again: 202 (a duplicate by source and id: not delivered twice)")

	receipt, err := actor.Await(ctx, sys, checkout, pid)
	if err != nil {
		return err
	}
	logf("workflow %s done: %s (its events are committed; the relayer takes it from here)", pid, receipt)

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

// post sends an event to the ingress and wants a 202.
func post(req *http.Request) error {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusAccepted {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("ingress answered %s: %s", resp.Status, body)
	}
	return nil
}
