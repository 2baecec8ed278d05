package nornmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nornlabs/norn/actor"
)

// StartArgs are the start tool's arguments.
type StartArgs struct {
	// Input is the workflow's input, as JSON of its input type.
	Input json.RawMessage `json:"input"`
	// ID names the instance. A start with an ID that exists starts
	// nothing and reports that instance: an agent that retries a start
	// (a lost reply, a timeout) passes the same ID and gets one run.
	ID string `json:"id,omitempty"`
}

// Started is the start tool's result.
type Started struct {
	ID       string `json:"id"`
	Workflow string `json:"workflow"`
	Status   string `json:"status"`
	// Existed: an instance with this ID existed already; nothing was
	// started (its input is the one it was first started with).
	Existed bool `json:"existed"`
}

// InstanceArgs name an instance: the status tool's arguments.
type InstanceArgs struct {
	ID string `json:"id"`
}

// Status is the status tool's result.
type Status struct {
	ID       string `json:"id"`
	Workflow string `json:"workflow"`
	// Status is running, waiting, compensating, completed, failed or
	// cancelled.
	Status string `json:"status"`
	// Done: the instance has ended (completed, failed or cancelled).
	Done bool `json:"done"`
	// Error is why a failed or cancelled instance ended.
	Error        string    `json:"error,omitempty"`
	CancelReason string    `json:"cancel_reason,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// ResultArgs are the result tool's arguments.
type ResultArgs struct {
	ID string `json:"id"`
	// WaitSeconds is how long to wait for the instance to end; 0 looks
	// without waiting.
	WaitSeconds int `json:"wait_seconds,omitempty"`
}

// Result is the result tool's result. An instance still running after the
// wait is reported with Done false; the agent calls again later.
type Result[Out any] struct {
	ID       string `json:"id"`
	Workflow string `json:"workflow"`
	Status   string `json:"status"`
	Done     bool   `json:"done"`
	// Output is the workflow's result, once completed.
	Output *Out `json:"output,omitempty"`
	// Error is why a failed or cancelled instance ended.
	Error string `json:"error,omitempty"`
}

// CancelArgs are the cancel tool's arguments.
type CancelArgs struct {
	ID     string `json:"id"`
	Reason string `json:"reason,omitempty"`
}

// Cancelled is the cancel tool's result.
type Cancelled struct {
	ID       string `json:"id"`
	Workflow string `json:"workflow"`
	// Status is the instance's status when the call returned: an instance
	// asked to cancel ends as cancelled once it notices (its next durable
	// step), so this may still be running.
	Status string `json:"status"`
	// Requested: the cancel was recorded. False when the instance had
	// ended already; Status says how.
	Requested bool `json:"requested"`
}

// exposed is one workflow and its tools.
type exposed[In, Out any] struct {
	wf   *actor.WorkflowDef[In, Out]
	opts ToolOptions
}

// Tool serves wf as four tools: <name>_start starts an instance from JSON
// input (its schema inferred from In), <name>_status reads one,
// <name>_result waits a bounded time for its output (schema from Out), and
// <name>_cancel cancels it. Each workflow has its own tools, so that a
// model sees typed input and output schemas and picks the action by name.
func Tool[In, Out any](wf *actor.WorkflowDef[In, Out], opts ToolOptions) Workflow {
	if opts.Name == "" && wf != nil {
		opts.Name = wf.Name()
	}
	return &exposed[In, Out]{wf: wf, opts: opts}
}

func (e *exposed[In, Out]) prefix() string { return e.opts.Name }

func (e *exposed[In, Out]) validate() error {
	if e.wf == nil {
		return errors.New("nil workflow")
	}
	return validToolName(e.opts.Name)
}

func (e *exposed[In, Out]) add(s *Server) error {
	inSchema, err := schemaFor[In]()
	if err != nil {
		return fmt.Errorf("input schema of %s: %w", e.wf.Name(), err)
	}
	resultSchema, err := schemaFor[Result[Out]]()
	if err != nil {
		return fmt.Errorf("output schema of %s: %w", e.wf.Name(), err)
	}
	startSchema := &jsonschema.Schema{
		Type: "object",
		Properties: map[string]*jsonschema.Schema{
			"input": withDescription(inSchema, "the input of workflow "+e.wf.Name()),
			"id": {Type: "string", Description: "optional instance ID; a start with an ID that exists starts nothing " +
				"and reports that instance, so pass one to make retries safe"},
		},
		Required:             []string{"input"},
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
	}
	idSchema := &jsonschema.Schema{Type: "string", Description: "the instance ID the start tool returned"}
	wait := &jsonschema.Schema{
		Type:        "integer",
		Description: fmt.Sprintf("seconds to wait for the instance to end (0: look without waiting, at most %d)", int(s.maxWait/time.Second)),
		Minimum:     jsonschema.Ptr(0.0),
		Maximum:     jsonschema.Ptr(float64(s.maxWait / time.Second)),
		Default:     json.RawMessage(fmt.Sprint(int(s.defaultWait / time.Second))),
	}
	closed := &jsonschema.Schema{Not: &jsonschema.Schema{}}
	// The SDK panics on a schema it cannot resolve; New reports it.
	for what, sch := range map[string]*jsonschema.Schema{"input": startSchema, "output": resultSchema} {
		if _, err := sch.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true}); err != nil {
			return fmt.Errorf("%s schema of %s: %w", what, e.wf.Name(), err)
		}
	}

	name, wfName := e.opts.Name, e.wf.Name()
	desc := e.opts.Description
	if desc != "" {
		desc += "\n\n"
	}
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name: name + suffixStart,
		Description: desc + fmt.Sprintf("Starts a durable run of workflow %s and returns its instance ID at once; "+
			"the run goes on after this call (and across restarts). Follow it with %s and %s.",
			wfName, name+suffixStatus, name+suffixResult),
		InputSchema: startSchema,
		// Not marked idempotent: only a start with an id is, and a client
		// that retried on the strength of the hint would start twice.
		Annotations: &mcp.ToolAnnotations{Title: "Start " + wfName, DestructiveHint: jsonschema.Ptr(false)},
	}, e.start(s))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        name + suffixStatus,
		Description: fmt.Sprintf("Reads the status of an instance of workflow %s, without waiting.", wfName),
		InputSchema: &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"id": idSchema},
			Required: []string{"id"}, AdditionalProperties: closed},
		Annotations: &mcp.ToolAnnotations{Title: "Status of " + wfName, ReadOnlyHint: true},
	}, e.status(s))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name: name + suffixResult,
		Description: fmt.Sprintf("Waits up to wait_seconds for an instance of workflow %s to end and returns its output; "+
			"if it has not ended, done is false: call again.", wfName),
		InputSchema: &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"id": idSchema, "wait_seconds": wait},
			Required: []string{"id"}, AdditionalProperties: closed},
		OutputSchema: resultSchema,
		Annotations:  &mcp.ToolAnnotations{Title: "Result of " + wfName, ReadOnlyHint: true},
	}, e.result(s))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name: name + suffixCancel,
		Description: fmt.Sprintf("Cancels an instance of workflow %s: it ends as cancelled at its next durable step, "+
			"undoing completed steps that have compensations.", wfName),
		InputSchema: &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"id": idSchema,
			"reason": {Type: "string", Description: "why, recorded with the instance"}},
			Required: []string{"id"}, AdditionalProperties: closed},
		Annotations: &mcp.ToolAnnotations{Title: "Cancel " + wfName, IdempotentHint: true},
	}, e.cancel(s))
	return nil
}

func withDescription(s *jsonschema.Schema, d string) *jsonschema.Schema {
	if s.Description == "" {
		s.Description = d
	}
	return s
}

func (e *exposed[In, Out]) start(s *Server) mcp.ToolHandlerFor[StartArgs, Started] {
	return func(ctx context.Context, _ *mcp.CallToolRequest, args StartArgs) (*mcp.CallToolResult, Started, error) {
		r, err := actor.SpawnJSON(ctx, s.sys, e.wf, args.Input, args.ID)
		if err != nil {
			return nil, Started{}, fmt.Errorf("start %s: %w", e.wf.Name(), err)
		}
		out := Started{ID: string(r.PID), Workflow: e.wf.Name(), Status: string(actor.StatusRunning), Existed: r.Existed}
		if r.Existed {
			inst, err := s.sys.Instance(ctx, r.PID)
			if err != nil {
				return nil, Started{}, fmt.Errorf("start %s: %w", e.wf.Name(), err)
			}
			out.Status = string(inst.Status)
		}
		return nil, out, nil
	}
}

// instance reads the instance id names and checks that it runs this
// workflow (a tool of one workflow does not reach another's instances).
func (e *exposed[In, Out]) instance(ctx context.Context, s *Server, id string) (actor.Instance, error) {
	if id == "" {
		return actor.Instance{}, fmt.Errorf("%w: id is empty", actor.ErrInvalidInput)
	}
	inst, err := s.sys.Instance(ctx, actor.PID(id))
	if errors.Is(err, actor.ErrNotFound) {
		return actor.Instance{}, fmt.Errorf("no instance %q: %w", id, actor.ErrNotFound)
	}
	if err != nil {
		return actor.Instance{}, err
	}
	if inst.Workflow != e.wf.Name() {
		return actor.Instance{}, fmt.Errorf("%w: instance %q runs workflow %s, not %s", actor.ErrInvalidInput, id, inst.Workflow, e.wf.Name())
	}
	return inst, nil
}

func (e *exposed[In, Out]) status(s *Server) mcp.ToolHandlerFor[InstanceArgs, Status] {
	return func(ctx context.Context, _ *mcp.CallToolRequest, args InstanceArgs) (*mcp.CallToolResult, Status, error) {
		inst, err := e.instance(ctx, s, args.ID)
		if err != nil {
			return nil, Status{}, err
		}
		st := Status{ID: inst.ID, Workflow: inst.Workflow, Status: string(inst.Status), Done: inst.Status.Terminal(),
			CancelReason: inst.CancelReason, CreatedAt: inst.CreatedAt, UpdatedAt: inst.UpdatedAt}
		if st.Done {
			st.Error = inst.Error
		}
		return nil, st, nil
	}
}

func (e *exposed[In, Out]) result(s *Server) mcp.ToolHandlerFor[ResultArgs, Result[Out]] {
	return func(ctx context.Context, _ *mcp.CallToolRequest, args ResultArgs) (*mcp.CallToolResult, Result[Out], error) {
		// The schema bounds wait_seconds; this guards a caller that
		// bypasses it (a server connected without validation).
		wait := time.Duration(args.WaitSeconds) * time.Second
		if wait < 0 || wait > s.maxWait {
			return nil, Result[Out]{}, fmt.Errorf("%w: wait_seconds %d is not between 0 and %d", actor.ErrInvalidInput,
				args.WaitSeconds, int(s.maxWait/time.Second))
		}
		inst, err := e.instance(ctx, s, args.ID)
		if err != nil {
			return nil, Result[Out]{}, err
		}
		if !inst.Status.Terminal() && wait > 0 {
			// An instance running here wakes the wait when it ends,
			// without a store read.
			wctx, cancel := context.WithTimeout(ctx, wait)
			out, err := actor.Await(wctx, s.sys, e.wf, actor.PID(inst.ID))
			cancel()
			switch {
			case err == nil:
				inst.Status = actor.StatusCompleted
				return nil, e.report(inst, &out), nil
			case ctx.Err() != nil:
				return nil, Result[Out]{}, ctx.Err()
			case !errors.Is(err, context.DeadlineExceeded) && !isEnded(err):
				return nil, Result[Out]{}, err
			}
			// Still running, or ended failed or cancelled: the record says
			// how things stand now, and why it ended.
			if inst, err = e.instance(ctx, s, args.ID); err != nil {
				return nil, Result[Out]{}, err
			}
		}
		if inst.Status != actor.StatusCompleted {
			return nil, e.report(inst, nil), nil
		}
		// Await decodes the output with the System's codec, whatever it
		// is; the instance has ended, so it returns at once.
		out, err := actor.Await(ctx, s.sys, e.wf, actor.PID(inst.ID))
		if err != nil {
			return nil, Result[Out]{}, err
		}
		return nil, e.report(inst, &out), nil
	}
}

// isEnded reports an Await error that means the instance ended failed or
// cancelled (a result to report, not a failure of the call).
func isEnded(err error) bool {
	var we *actor.WorkflowError
	return errors.Is(err, actor.ErrCancelled) || errors.As(err, &we)
}

func (e *exposed[In, Out]) report(inst actor.Instance, out *Out) Result[Out] {
	r := Result[Out]{ID: inst.ID, Workflow: inst.Workflow, Status: string(inst.Status), Done: inst.Status.Terminal(), Output: out}
	if r.Done && inst.Status != actor.StatusCompleted {
		r.Error = inst.Error
	}
	return r
}

func (e *exposed[In, Out]) cancel(s *Server) mcp.ToolHandlerFor[CancelArgs, Cancelled] {
	return func(ctx context.Context, _ *mcp.CallToolRequest, args CancelArgs) (*mcp.CallToolResult, Cancelled, error) {
		inst, err := e.instance(ctx, s, args.ID)
		if err != nil {
			return nil, Cancelled{}, err
		}
		reason := args.Reason
		if reason == "" {
			reason = "cancelled through MCP"
		}
		out := Cancelled{ID: inst.ID, Workflow: inst.Workflow, Status: string(inst.Status)}
		if inst.Status.Terminal() {
			return nil, out, nil
		}
		err = s.sys.Cancel(ctx, actor.PID(inst.ID), reason)
		switch {
		case errors.Is(err, actor.ErrInstanceDone):
			// It ended between the read and the cancel.
		case err != nil:
			return nil, Cancelled{}, fmt.Errorf("cancel %s: %w", inst.ID, err)
		default:
			out.Requested = true
		}
		if inst, err = s.sys.Instance(ctx, actor.PID(inst.ID)); err == nil {
			out.Status = string(inst.Status)
		}
		return nil, out, nil
	}
}
