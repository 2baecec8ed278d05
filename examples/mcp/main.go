// MCP serves a long-running workflow to AI agents as MCP tools
// (package nornmcp): report_start starts a report and returns its instance
// ID at once, report_status and report_result look at it (result waits a
// bounded time), report_cancel cancels it. The run is durable: the agent can
// come back for it in a later conversation, and a restart of this server
// carries it on.
//
// By default it speaks MCP on stdin and stdout, as a client such as Claude
// Desktop or an IDE launches it; started by hand it waits for a client on
// stdin (end it with Ctrl-C or Ctrl-D). Logs go to stderr.
//
//	go build -o norn-mcp ./examples/mcp
//	# a client's configuration: {"command": "/path/to/norn-mcp", "args": ["-store", "sqlite:///path/to/norn.db"]}
//
// With -http it serves MCP's streamable HTTP instead, behind a bearer token
// (from -token or the environment's NORN_MCP_TOKEN, at least 16 bytes):
//
//	NORN_MCP_TOKEN=$(openssl rand -hex 16) go run ./examples/mcp -http localhost:8080
//
// Instances are kept in norn-data/norn.db under the working directory
// (-store to change it), and unlike the other examples' this file is kept
// from one run to the next: delete it to start over.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/nornmcp"
	"github.com/nornlabs/norn/persistence/storeurl"
)

func main() {
	store := flag.String("store", "sqlite://norn-data/norn.db", "store URL: sqlite://path or postgres://…")
	httpAddr := flag.String("http", "", "serve streamable HTTP on this address (host:port) instead of stdio")
	token := flag.String("token", "", "bearer token for -http (default $NORN_MCP_TOKEN)")
	flag.Parse()
	log.SetFlags(0) // the log goes to stderr: stdout carries the protocol
	if *token == "" {
		*token = os.Getenv("NORN_MCP_TOKEN")
	}
	switch {
	case flag.NArg() > 0:
		usage(fmt.Sprintf("unexpected argument %q", flag.Arg(0)))
	case *httpAddr != "" && len(*token) < nornmcp.MinTokenLen:
		usage(fmt.Sprintf("-http needs a token of at least %d bytes: -token or NORN_MCP_TOKEN", nornmcp.MinTokenLen))
	}
	if err := run(*store, *httpAddr, *token); err != nil {
		log.Fatal(err)
	}
}

// usage reports a command-line mistake and exits 2.
func usage(msg string) {
	fmt.Fprintf(os.Stderr, "mcp: %s\n", msg)
	flag.Usage()
	os.Exit(2)
}

func run(storeURL, httpAddr, token string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := storeurl.Open(ctx, storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	sys, err := actor.Start(ctx, actor.Config{
		Store:     st,
		Workflows: actor.Register(report),
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	defer func() {
		// Unfinished reports stay in the store; the next run carries
		// them on.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := sys.Stop(sctx); err != nil {
			log.Print(err)
		}
	}()

	srv, err := nornmcp.New(nornmcp.Options{
		System: sys,
		Workflows: []nornmcp.Workflow{nornmcp.Tool(report, nornmcp.ToolOptions{
			Description: "Writes a report on a topic, section by section; it may take a long time (pause_seconds between sections).",
		})},
		Name:         "norn-reports",
		Instructions: "Start a report with report_start (pass an id so that a retry does not start a second one), then poll report_result.",
	})
	if err != nil {
		return err
	}
	if httpAddr == "" {
		log.Print("serving MCP on stdin/stdout")
		return srv.ServeStdio(ctx)
	}
	h, err := nornmcp.NewHTTPHandler(srv, nornmcp.HTTPConfig{Token: token})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	log.Printf("serving MCP on http://%s", ln.Addr())
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		stop()
		<-done
		return err
	}
	<-done
	return nil
}
