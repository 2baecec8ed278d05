package actor

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/nornlabs/norn/supervisor"
)

// Definition is a registered workflow, whatever its input and output types.
// *WorkflowDef implements it; Register collects them for Config.Workflows.
type Definition interface {
	Name() string
	run(ctx *Context, input []byte) ([]byte, error)
	restartPolicy() supervisor.RestartPolicy
	inputType() reflect.Type
}

// WorkflowDef is a workflow: a deterministic function from In to Out. Make
// one with Workflow.
type WorkflowDef[In, Out any] struct {
	name    string
	fn      func(*Context, In) (Out, error)
	restart supervisor.RestartPolicy
}

// WorkflowOption configures a workflow definition.
type WorkflowOption func(*workflowConfig)

type workflowConfig struct{ restart supervisor.RestartPolicy }

// WithRestart sets how failed activations of this workflow are restarted.
func WithRestart(p supervisor.RestartPolicy) WorkflowOption {
	return func(c *workflowConfig) { c.restart = p }
}

// Workflow defines a workflow. The function must be deterministic: every
// side effect goes through an activity, every wait through the Context.
func Workflow[In, Out any](name string, fn func(*Context, In) (Out, error), opts ...WorkflowOption) *WorkflowDef[In, Out] {
	cfg := workflowConfig{restart: supervisor.DefaultRestart()}
	for _, o := range opts {
		o(&cfg)
	}
	return &WorkflowDef[In, Out]{name: name, fn: fn, restart: cfg.restart}
}

// Name is the registered name.
func (w *WorkflowDef[In, Out]) Name() string { return w.name }

func (w *WorkflowDef[In, Out]) inputType() reflect.Type { return reflect.TypeFor[In]() }

func (w *WorkflowDef[In, Out]) restartPolicy() supervisor.RestartPolicy { return w.restart }

func (w *WorkflowDef[In, Out]) run(ctx *Context, input []byte) ([]byte, error) {
	in, err := decodeWith[In](ctx.a.env.codec, input)
	if err != nil {
		return nil, fmt.Errorf("%w: input of %s does not decode as %s: %v", ErrInvalidInput, w.name, typeName[In](), err)
	}
	out, err := w.fn(ctx, in)
	if err != nil {
		return nil, err
	}
	return ctx.a.env.encode(out)
}

// Register collects workflow definitions for Config.Workflows.
func Register(defs ...Definition) []Definition { return defs }

// ActivityDef is a side-effecting step called from workflows. Its result is
// recorded in history and never run again once recorded.
type ActivityDef[In, Out any] struct {
	name         string
	fn           func(context.Context, In) (Out, error)
	retry        supervisor.RetryPolicy
	timeout      time.Duration
	compensation func(context.Context, In, Out) error
	txfn         func(context.Context, Tx, In) (Out, error) // set for a transactional activity (TxActivity)
}

// ActivityOption configures an activity.
type ActivityOption interface{ applyActivity(*activityConfig) }

type activityConfig struct {
	retry        *supervisor.RetryPolicy
	timeout      time.Duration
	compensation any
}

type activityOptionFunc func(*activityConfig)

func (f activityOptionFunc) applyActivity(c *activityConfig) { f(c) }

// WithRetry sets the activity's retry policy (default supervisor.DefaultRetry).
func WithRetry(p supervisor.RetryPolicy) ActivityOption {
	return activityOptionFunc(func(c *activityConfig) { c.retry = &p })
}

// WithTimeout bounds each attempt of the activity.
func WithTimeout(d time.Duration) ActivityOption {
	return activityOptionFunc(func(c *activityConfig) { c.timeout = d })
}

// WithCompensation registers the saga compensation of an activity:
// fn(ctx, input, result) undoes a completed call when the workflow fails or
// is cancelled. fn's types must match the activity's In and Out.
func WithCompensation[In, Out any](fn func(context.Context, In, Out) error) ActivityOption {
	return activityOptionFunc(func(c *activityConfig) { c.compensation = fn })
}

// Activity defines an activity. It panics if an option does not fit the
// activity's types (a programming error, found when the package loads).
func Activity[In, Out any](name string, fn func(context.Context, In) (Out, error), opts ...ActivityOption) *ActivityDef[In, Out] {
	var cfg activityConfig
	for _, o := range opts {
		o.applyActivity(&cfg)
	}
	a := &ActivityDef[In, Out]{name: name, fn: fn, retry: supervisor.DefaultRetry(), timeout: cfg.timeout}
	if cfg.retry != nil {
		if err := cfg.retry.Validate(); err != nil {
			panic(fmt.Sprintf("norn: activity %s: %v", name, err))
		}
		a.retry = *cfg.retry
	}
	if cfg.compensation != nil {
		c, ok := cfg.compensation.(func(context.Context, In, Out) error)
		if !ok {
			panic(fmt.Sprintf("norn: activity %s: compensation is %T, want func(context.Context, %s, %s) error",
				name, cfg.compensation, typeName[In](), typeName[Out]()))
		}
		a.compensation = c
	}
	return a
}

// Name is the activity's name.
func (a *ActivityDef[In, Out]) Name() string { return a.name }

// ActivityInfo describes the running activity call; get it with Info.
type ActivityInfo struct {
	InstanceID string
	ActivityID string
	// IdempotencyKey is InstanceID + "/" + ActivityID: stable across retries
	// and re-runs after a crash, so external effects can be deduplicated.
	IdempotencyKey string
	Attempt        int
}

type activityInfoKey struct{}

// Info returns the activity call's details from its context (ok is false
// outside an activity).
func Info(ctx context.Context) (ActivityInfo, bool) {
	i, ok := ctx.Value(activityInfoKey{}).(ActivityInfo)
	return i, ok
}

// IdempotencyKey is shorthand for Info(ctx).IdempotencyKey.
func IdempotencyKey(ctx context.Context) string {
	i, _ := Info(ctx)
	return i.IdempotencyKey
}
