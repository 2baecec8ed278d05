// MCP serves a long-running workflow to AI agents as MCP tools
// (package nornmcp): report_start starts a report and returns its instance
// ID at once, report_status and report_result look at it (result waits a
// bounded time), report_cancel cancels it. The run is durable: the agent can
// come back for it in a later conversation, and a restart of this server
// (with -fresh=false) carries it on.
//
// By default it speaks MCP on stdin and stdout, as a client such as Claude
// Desktop or an IDE launches it; started by hand it waits for a client on
// stdin (end it with Ctrl-C or Ctrl-D). Logs go to stderr.
//
//	go build -o norn-mcp ./examples/mcp
//	# a client's configuration: {"command": "/path/to/norn-mcp", "args": ["-fresh=false"]}
//
// With -http it serves MCP's streamable HTTP instead, behind a bearer token
// (from -token or the environment's NORN_MCP_TOKEN, at least 16 bytes):
//
//	NORN_MCP_TOKEN=$(openssl rand -hex 16) go run ./examples/mcp -http localhost:8080
//
// Instances are kept in norn-data/norn.db (-store to change it); -fresh,
// the default, deletes that file first.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/nornlabs/norn/examples/internal/demo"
	"github.com/nornlabs/norn/nornmcp"
)

func main() {
	httpAddr := flag.String("http", "", "serve streamable HTTP on this address (host:port) instead of stdio")
	token := flag.String("token", "", "bearer token for -http (default $NORN_MCP_TOKEN)")
	log.SetOutput(os.Stderr) // stdout carries the protocol
	log.SetFlags(0)
	// demo.Start parses the flags (with -store and -fresh), opens the store
	// and starts a node running the report workflow.
	node, err := demo.Start(report)
	if err != nil {
		log.Fatal(err)
	}
	if flag.NArg() > 0 {
		node.Close()
		usage(fmt.Sprintf("unexpected argument %q", flag.Arg(0)))
	}
	if *token == "" {
		*token = os.Getenv("NORN_MCP_TOKEN")
	}
	if *httpAddr != "" && *token == "" {
		node.Close()
		usage("-http needs a token: -token or NORN_MCP_TOKEN")
	}
	err = serve(node, *httpAddr, *token)
	node.Close()
	if err != nil {
		log.Fatal(err)
	}
}

// usage reports a command-line mistake and exits 2.
func usage(msg string) {
	fmt.Fprintf(os.Stderr, "mcp: %s\n", msg)
	flag.Usage()
	os.Exit(2)
}

func serve(node *demo.Node, httpAddr, token string) error {
	srv, err := nornmcp.New(nornmcp.Options{
		System: node.Sys,
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
		return srv.ServeStdio(node.Ctx)
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
	go func() {
		<-node.Ctx.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}()
	log.Printf("serving MCP on http://%s", ln.Addr())
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
