package nornmcp_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/nornmcp"
	"github.com/nornlabs/norn/persistence/sqlite"
)

type Order struct {
	Item  string `json:"item" jsonschema:"what to ship"`
	Count int    `json:"count"`
}

var pack = actor.Activity("pack", func(_ context.Context, o Order) (string, error) {
	return fmt.Sprintf("%d × %s packed", o.Count, o.Item), nil
})

var ship = actor.Workflow("ship", func(ctx *actor.Context, o Order) (string, error) {
	return pack.Run(ctx, o)
})

// An agent (here the SDK's client, connected in process) starts a run and
// waits for its result.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "nornmcp")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "norn.db"), sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(ship)})
	if err != nil {
		log.Fatal(err)
	}
	defer sys.Stop(ctx)

	srv, err := nornmcp.New(nornmcp.Options{
		System:    sys,
		Workflows: []nornmcp.Workflow{nornmcp.Tool(ship, nornmcp.ToolOptions{Description: "Ships an order."})},
	})
	if err != nil {
		log.Fatal(err)
	}
	serverEnd, clientEnd := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(ctx, serverEnd, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer ss.Wait()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, clientEnd, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cs.Close()

	started, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ship_start",
		Arguments: map[string]any{"id": "order-7", "input": Order{Item: "lamp", Count: 2}}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(started.StructuredContent.(map[string]any)["id"])
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ship_result",
		Arguments: map[string]any{"id": "order-7", "wait_seconds": 30}})
	if err != nil {
		log.Fatal(err)
	}
	out := res.StructuredContent.(map[string]any)
	fmt.Println(out["status"], out["output"])
	// Output:
	// order-7
	// completed 2 × lamp packed
}
