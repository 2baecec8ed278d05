package actor

import (
	"context"
	"log/slog"
	"time"
)

// HookKind names what a HookEvent reports.
type HookKind string

// Hook kinds. Hooks see live work only: replay is silent. Each reports a
// fact once the commit that made it durable is done: a step that fails or
// is fenced (another node took the instance over meanwhile) reports
// nothing, and the node that does the work again reports it then. The
// activity attempt kinds (started, finished, abandoned) are the exception:
// they report attempts as they happen, and an attempt whose result is
// never recorded is still reported.
const (
	HookInstanceStarted    HookKind = "instance.started"   // spawn committed
	HookInstanceActivated  HookKind = "instance.activated" // an activation took the instance: a spawn launched here, or a replay of its history
	HookInstancePassivated HookKind = "instance.passivated"
	HookInstanceRestarted  HookKind = "instance.restarted" // crashed; a new activation follows after a back-off
	// HookInstanceLost: another node took the instance's lease over (this
	// node was declared failed, or could not renew in time); the
	// activation here stopped without writing.
	HookInstanceLost HookKind = "instance.lost"
	// HookInstanceStopped: the activation ended, whatever the reason (the
	// instance ended, passivated, was lost or handed over, or the node
	// stopped). Each activation reports it once, after its last other
	// event; the instance has no activation on this node until the next
	// HookInstanceActivated.
	HookInstanceStopped   HookKind = "instance.stopped"
	HookInstanceCompleted HookKind = "instance.completed"
	HookInstanceFailed    HookKind = "instance.failed"
	HookInstanceCancelled HookKind = "instance.cancelled"
	HookActivityStarted   HookKind = "activity.started"
	HookActivityFinished  HookKind = "activity.finished" // Err set if the attempt failed
	HookActivityRetried   HookKind = "activity.retried"  // Duration is the back-off
	// HookActivityFailed: the call failed for good (a terminal error, or
	// its retries ran out); Attempt is the number of attempts made.
	HookActivityFailed HookKind = "activity.failed"
	// HookActivityAbandoned: an attempt ignored its context past its timeout
	// (or a cancel, or shutdown) and was left running; its result is dropped.
	HookActivityAbandoned  HookKind = "activity.abandoned"
	HookCompensationFailed HookKind = "compensation.failed" // a saga compensation still failed after its retries
	HookMessageSent        HookKind = "message.sent"
	HookMessageConsumed    HookKind = "message.consumed"
	HookTimerFired         HookKind = "timer.fired" // Duration is the lateness: how long after its due time it fired
	// HookLeaseTakeover: this node took over what another node held. With
	// Instance set, one instance whose lease, held by node Name, had
	// expired; with Instance empty, every lease of node Name, which the
	// cluster declared failed (taken at once, before they expire).
	HookLeaseTakeover HookKind = "lease.takeover"
)

// HookEvent is one observation.
type HookEvent struct {
	Kind     HookKind
	Instance string
	Workflow string
	Name     string // activity, channel or timer
	Ref      string // activity ID, message ID
	Attempt  int
	Err      error
	Duration time.Duration
	At       time.Time
}

// Hooks observes a node: metrics, tracing, audit. Observe is called
// synchronously on the runtime's goroutines, so it must be quick and must
// not call back into the System. For activity events ctx is the attempt's
// context (see ActivityContexter); for the others it is the System's.
type Hooks interface {
	Observe(ctx context.Context, e HookEvent)
}

// ActivityContexter is implemented by Hooks that put values into the
// context of each activity attempt, such as a tracing span, so that the
// activity's code (and the services it calls) can see them. ActivityContext
// is called just before HookActivityStarted with that event; the context it
// returns is the attempt's context, and the one that the attempt's
// HookActivityStarted, HookActivityFinished and HookActivityAbandoned
// events are observed with. It must derive from ctx.
type ActivityContexter interface {
	ActivityContext(ctx context.Context, started HookEvent) context.Context
}

// MultiHooks hands every event to each of hs in order, and each
// ActivityContexter among them its turn at an activity's context (in the
// same order), so that a node can have metrics, traces and logs at once.
// Nil entries are skipped.
func MultiHooks(hs ...Hooks) Hooks {
	var m multiHooks
	for _, h := range hs {
		if h != nil {
			m = append(m, h)
		}
	}
	return m
}

type multiHooks []Hooks

func (m multiHooks) Observe(ctx context.Context, e HookEvent) {
	for _, h := range m {
		h.Observe(ctx, e)
	}
}

func (m multiHooks) ActivityContext(ctx context.Context, e HookEvent) context.Context {
	for _, h := range m {
		if c, ok := h.(ActivityContexter); ok {
			ctx = c.ActivityContext(ctx, e)
		}
	}
	return ctx
}

// SlogHooks logs every event at Level (default: Debug) — the default Hooks.
type SlogHooks struct {
	Logger *slog.Logger
	Level  slog.Level
}

// Observe logs e.
func (h SlogHooks) Observe(ctx context.Context, e HookEvent) {
	if !h.Logger.Enabled(ctx, h.Level) {
		return
	}
	attrs := []slog.Attr{slog.String("instance", e.Instance)}
	if e.Workflow != "" {
		attrs = append(attrs, slog.String("workflow", e.Workflow))
	}
	if e.Name != "" {
		attrs = append(attrs, slog.String("name", e.Name))
	}
	if e.Ref != "" {
		attrs = append(attrs, slog.String("ref", e.Ref))
	}
	if e.Attempt > 0 {
		attrs = append(attrs, slog.Int("attempt", e.Attempt))
	}
	if e.Duration > 0 {
		attrs = append(attrs, slog.Duration("duration", e.Duration))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("err", e.Err.Error()))
	}
	h.Logger.LogAttrs(ctx, h.Level, string(e.Kind), attrs...)
}

// hook reports e for this activation's instance.
func (a *activation) hook(e HookEvent) {
	e.Instance, e.Workflow = a.id, a.def.Name()
	a.env.hook(e)
}

func (v *env) hook(e HookEvent) {
	v.hookCtx(v.ctx, e)
}

func (v *env) hookCtx(ctx context.Context, e HookEvent) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	v.cfg.Hooks.Observe(ctx, e)
}

// activityHooks reports an attempt's start: it lets the hooks extend the
// attempt's context (ActivityContexter) and returns the context to run it
// with, which its later events are observed with too.
func (a *activation) activityHooks(ctx context.Context, e HookEvent) context.Context {
	e.Instance, e.Workflow, e.At = a.id, a.def.Name(), time.Now()
	if c, ok := a.env.cfg.Hooks.(ActivityContexter); ok {
		ctx = c.ActivityContext(ctx, e)
	}
	a.env.hookCtx(ctx, e)
	return ctx
}

// hookCtx reports e for this activation's instance, observed with ctx.
func (a *activation) hookCtx(ctx context.Context, e HookEvent) {
	e.Instance, e.Workflow = a.id, a.def.Name()
	a.env.hookCtx(ctx, e)
}
