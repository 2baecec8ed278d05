package nornmcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nornlabs/norn/actor"
)

// ErrInvalidConfig: Options or HTTPConfig cannot work (no System, no
// workflows, a tool name MCP refuses, a short token …). The error names
// the field.
var ErrInvalidConfig = errors.New("nornmcp: invalid config")

// Tool-name suffixes: each exposed workflow gets one tool per operation.
const (
	suffixStart  = "_start"
	suffixStatus = "_status"
	suffixResult = "_result"
	suffixCancel = "_cancel"
)

// maxToolName is MCP's limit on a tool name's length.
const maxToolName = 128

// Defaults and bounds of the result tool's wait.
const (
	DefaultWait = 10 * time.Second
	DefaultMax  = 60 * time.Second
	// maxMaxWait bounds Options.MaxWait: a tool call held open longer than
	// this outlives most clients' request timeouts.
	maxMaxWait = 10 * time.Minute
)

// Options configures New.
type Options struct {
	// System runs (or, as a client, reaches) the workflows. Required.
	System *actor.System
	// Workflows are the workflows served, each made with Tool. At least one.
	Workflows []Workflow
	// Name and Version identify the server to clients (default "norn" and
	// "dev").
	Name    string
	Version string
	// Instructions, if set, are sent to clients when they connect: a hint
	// for the model on how to use the tools.
	Instructions string
	// DefaultWait is how long the result tool waits when the call does not
	// say (default 10s); MaxWait the most a call may ask for (default 60s,
	// at most 10 minutes). Both are whole seconds.
	DefaultWait time.Duration
	MaxWait     time.Duration
	// Logger receives the SDK's log (default: discarded).
	Logger *slog.Logger
}

// ToolOptions configures one exposed workflow.
type ToolOptions struct {
	// Name prefixes the workflow's tools (Name_start, Name_status,
	// Name_result, Name_cancel); default the workflow's name. MCP allows
	// letters, digits, '_', '-' and '.'.
	Name string
	// Description says what the workflow does, for the model choosing a
	// tool; it heads the start tool's description.
	Description string
}

// Workflow is a workflow served as MCP tools; make one with Tool.
type Workflow interface {
	prefix() string
	validate() error
	add(s *Server) error
}

// Server serves workflows as MCP tools. Serve it over stdio with
// ServeStdio, over streamable HTTP with NewHTTPHandler, or on any SDK
// transport through MCP().
type Server struct {
	sys         *actor.System
	mcp         *mcp.Server
	defaultWait time.Duration
	maxWait     time.Duration
}

// New checks opts and builds the server with four tools per workflow.
func New(opts Options) (*Server, error) {
	if opts.System == nil {
		return nil, fmt.Errorf("%w: System is nil", ErrInvalidConfig)
	}
	if len(opts.Workflows) == 0 {
		return nil, fmt.Errorf("%w: Workflows is empty", ErrInvalidConfig)
	}
	if opts.DefaultWait == 0 {
		opts.DefaultWait = DefaultWait
	}
	if opts.MaxWait == 0 {
		opts.MaxWait = DefaultMax
	}
	switch {
	case opts.MaxWait < time.Second || opts.MaxWait > maxMaxWait || opts.MaxWait%time.Second != 0:
		return nil, fmt.Errorf("%w: MaxWait %v is not a whole number of seconds between 1s and %v", ErrInvalidConfig, opts.MaxWait, maxMaxWait)
	case opts.DefaultWait < 0 || opts.DefaultWait > opts.MaxWait || opts.DefaultWait%time.Second != 0:
		return nil, fmt.Errorf("%w: DefaultWait %v is not a whole number of seconds between 0 and MaxWait (%v)", ErrInvalidConfig, opts.DefaultWait, opts.MaxWait)
	}
	if opts.Name == "" {
		opts.Name = "norn"
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	seen := make(map[string]bool, len(opts.Workflows))
	for i, w := range opts.Workflows {
		if w == nil {
			return nil, fmt.Errorf("%w: Workflows[%d] is nil", ErrInvalidConfig, i)
		}
		if err := w.validate(); err != nil {
			return nil, fmt.Errorf("%w: Workflows[%d]: %w", ErrInvalidConfig, i, err)
		}
		if seen[w.prefix()] {
			return nil, fmt.Errorf("%w: Workflows[%d]: tool name %q is used twice", ErrInvalidConfig, i, w.prefix())
		}
		seen[w.prefix()] = true
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		sys: opts.System,
		mcp: mcp.NewServer(&mcp.Implementation{Name: opts.Name, Version: opts.Version},
			&mcp.ServerOptions{Instructions: opts.Instructions, Logger: logger}),
		defaultWait: opts.DefaultWait,
		maxWait:     opts.MaxWait,
	}
	for i, w := range opts.Workflows {
		if err := w.add(s); err != nil {
			return nil, fmt.Errorf("%w: Workflows[%d]: %w", ErrInvalidConfig, i, err)
		}
	}
	return s, nil
}

// MCP is the SDK server holding the tools: connect it to any transport
// (mcp.NewInMemoryTransports in tests), or add tools of your own.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// ServeStdio serves one client over the process's stdin and stdout until
// the client closes stdin or ctx ends. Nothing else may write to stdout
// meanwhile: log to stderr.
func (s *Server) ServeStdio(ctx context.Context) error {
	err := s.mcp.Run(ctx, &mcp.StdioTransport{})
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// validToolName applies MCP's rule for tool names (the SDK only logs a
// bad one; New refuses it).
func validToolName(name string) error {
	if name == "" {
		return errors.New("empty tool name")
	}
	if len(name)+len(suffixStatus) > maxToolName {
		return fmt.Errorf("tool name %q is too long (at most %d bytes before the suffix)", name, maxToolName-len(suffixStatus))
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.'
		if !ok {
			return fmt.Errorf("tool name %q holds %q: MCP allows letters, digits, '_', '-' and '.' (set ToolOptions.Name)", name, r)
		}
	}
	return nil
}

// schemaFor infers the JSON schema of t's values.
func schemaFor[T any]() (*jsonschema.Schema, error) {
	return jsonschema.For[T](&jsonschema.ForOptions{})
}
