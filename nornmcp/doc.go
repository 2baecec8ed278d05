// Package nornmcp serves Norn workflows to AI agents as MCP tools (the
// Model Context Protocol, with the official Go SDK,
// github.com/modelcontextprotocol/go-sdk): an agent starts a long-running
// job with one call and comes back for its result with another, in the
// same conversation or a later one, while the workflow runs durably.
//
// Each workflow given to New with Tool becomes four tools:
//
//   - <name>_start starts an instance. Its arguments are {"input": …,
//     "id": …}: input is the workflow's input, its JSON schema inferred
//     from the Go input type (jsonschema struct tags become descriptions);
//     id is optional. A start with an id that exists starts nothing and
//     reports that instance (existed: true), so an agent that retries a
//     start it did not hear back from gets one run, not two.
//   - <name>_status reads an instance's status without waiting.
//   - <name>_result waits up to wait_seconds (default 10, at most
//     Options.MaxWait, 60 by default) for the instance to end and returns
//     its output, typed by the workflow's output type; if it has not
//     ended, done is false and the agent calls again.
//   - <name>_cancel cancels it; a cancel of an ended instance is not an
//     error (requested: false), so that one can be retried too.
//
// A workflow's tools reach only its own instances. Bad arguments (input
// that does not match the schema, an unknown field, an unknown instance)
// are tool errors naming the problem, which the model sees and can
// correct.
//
// Serve the tools over stdio (ServeStdio: how desktop clients launch a
// server), over streamable HTTP behind a bearer token (NewHTTPHandler), or
// on any SDK transport (MCP):
//
//	srv, err := nornmcp.New(nornmcp.Options{
//		System:    sys,
//		Workflows: []nornmcp.Workflow{nornmcp.Tool(report, nornmcp.ToolOptions{Description: "Writes a report."})},
//	})
//	if err != nil {
//		return err
//	}
//	h, err := nornmcp.NewHTTPHandler(srv, nornmcp.HTTPConfig{Token: os.Getenv("MCP_TOKEN")})
//	if err != nil {
//		return err
//	}
//	return http.ListenAndServe("localhost:8080", h)
//
// The HTTP handler keeps no session: every call reads and writes the
// store, so any node of a cluster can answer any call. examples/mcp is a
// complete server.
package nornmcp
