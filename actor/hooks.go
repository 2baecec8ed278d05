package actor

import (
	"context"
	"log/slog"
	"time"
)

// HookKind names what a HookEvent reports.
type HookKind string

// Hook kinds. Hooks see live work only: replay is silent.
const (
	HookInstanceStarted    HookKind = "instance.started"   // spawn committed
	HookInstanceActivated  HookKind = "instance.activated" // an activation took the instance: a spawn launched here, or a replay of its history
	HookInstancePassivated HookKind = "instance.passivated"
	HookInstanceRestarted  HookKind = "instance.restarted" // crashed; a new activation follows after a back-off
	// HookInstanceLost: another node took the instance's lease over (this
	// node was declared failed, or could not renew in time); the
	// activation here stopped without writing.
	HookInstanceLost      HookKind = "instance.lost"
	HookInstanceCompleted HookKind = "instance.completed"
	HookInstanceFailed    HookKind = "instance.failed"
	HookInstanceCancelled HookKind = "instance.cancelled"
	HookActivityStarted   HookKind = "activity.started"
	HookActivityFinished  HookKind = "activity.finished" // Err set if the attempt failed
	HookActivityRetried   HookKind = "activity.retried"  // Duration is the back-off
	// HookActivityAbandoned: an attempt ignored its context past its timeout
	// (or a cancel, or shutdown) and was left running; its result is dropped.
	HookActivityAbandoned  HookKind = "activity.abandoned"
	HookCompensationFailed HookKind = "compensation.failed" // a saga compensation still failed after its retries
	HookMessageSent        HookKind = "message.sent"
	HookMessageConsumed    HookKind = "message.consumed"
	HookTimerFired         HookKind = "timer.fired"
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
// not call back into the System.
type Hooks interface {
	Observe(ctx context.Context, e HookEvent)
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
	a.sys.hook(e)
}

func (s *System) hook(e HookEvent) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	s.cfg.Hooks.Observe(s.ctx, e)
}
