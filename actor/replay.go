package actor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/nornlabs/norn/actor/internal/journal"
	"github.com/nornlabs/norn/persistence"
)

// ReplayOption configures Replay.
type ReplayOption func(*Config)

// ReplayCodec sets the codec the history was written with (default JSON).
func ReplayCodec(c Codec) ReplayOption { return func(cfg *Config) { cfg.Codec = c } }

// ReplayErrors registers the errors the node registered (Config.Errors), so
// that recorded failures are rebuilt the same way.
func ReplayErrors(defs ...ErrorDef) ReplayOption {
	return func(cfg *Config) { cfg.Errors = append(cfg.Errors, defs...) }
}

// ReplayMessages registers the message names the node registered
// (Config.Messages), so that receives match what they matched live.
func ReplayMessages(names ...MessageName) ReplayOption {
	return func(cfg *Config) { cfg.Messages = append(cfg.Messages, names...) }
}

// Replay runs today's code of wf against a recorded history, without side
// effects: no activity runs, nothing is written, no message is sent. It
// returns nil if the code asks for exactly what history recorded, in order,
// up to the end of history, and the *NonDeterminismError of the first
// divergence otherwise. Use it in tests ("will this change break running
// instances?") with histories taken from Inspect or System.History.
func Replay(ctx context.Context, wf Definition, history []HistoryEvent, opts ...ReplayOption) error {
	v, err := replayEnv(ctx, wf, opts)
	if err != nil {
		return err
	}
	hist := storedEvents(history)
	if len(hist) > 0 && hist[0].Kind == EventStarted && hist[0].Name != wf.Name() {
		return fmt.Errorf("%w: history is of workflow %q, not %q", ErrInvalidInput, hist[0].Name, wf.Name())
	}
	return replay(v, wf, journal.Events(hist))
}

// Replay replays the stored history of pid against the workflow code this
// node has registered, without side effects (see the package function
// Replay): a check that a deploy does not break a running instance.
func (s *System) Replay(ctx context.Context, pid PID) error {
	inst, err := s.store.Instance(ctx, string(pid))
	if err != nil {
		return err
	}
	def, ok := s.defs[inst.Workflow]
	if !ok {
		return fmt.Errorf("%w: %q (instance %s)", ErrUnknownWorkflow, inst.Workflow, pid)
	}
	hist, err := readHist(ctx, s.store, string(pid), inst.HistoryLen, s.cfg.HistoryPage)
	if err != nil {
		return err
	}
	return replay(s.replayEnv(ctx), def, hist)
}

// replay drives the workflow over a replay-only journal: every durable call
// is answered from history, and the first one that would run live ends the
// replay (see activation.must) before anything is started or written. It
// runs in v alone: there is no runtime (store, timers, node) to reach.
func replay(v *env, def Definition, hist journal.History) error {
	a := newActivationIn(v, nil, def, persistence.Instance{ID: "replay", Workflow: def.Name()}, hist)
	a.j = journal.NewReplay(hist)
	defer a.stopRun()
	out, oc, crash, _, werr := a.execute()
	a.endAttempts()
	switch oc {
	case outReplayed, outStopped:
		return nil
	case outNonDeterminism:
		return werr
	case outCrash:
		return fmt.Errorf("norn: replay: the workflow crashed: %w", crash)
	}
	// The code ended while history may go on: it must end the same way.
	want := EventCompleted
	switch {
	case werr != nil && a.j.Cancelled():
		want = EventCancelled
	case werr != nil:
		want = EventFailed
	}
	err := a.j.End(want, out)
	var d *journal.Divergence
	if errors.As(err, &d) {
		return &NonDeterminismError{Seq: d.Seq, Expected: d.Expected, Got: d.Got}
	}
	return err
}

type nopHooks struct{}

func (nopHooks) Observe(context.Context, HookEvent) {}

// History reads the current run's history of pid, as Inspect does, for
// Replay.
func (s *System) History(ctx context.Context, pid PID) ([]HistoryEvent, error) {
	hist, err := s.store.History(ctx, string(pid), 0)
	if err != nil {
		return nil, err
	}
	out := make([]HistoryEvent, len(hist))
	for i, e := range hist {
		out[i] = s.historyEvent(e)
	}
	return out, nil
}

// replayEnv is the environment of a side-effect-free replay of wf without
// a System: the options over the defaults (a replayed send checks its
// payload against MaxPayload as the live one did), no hooks, no logs.
func replayEnv(ctx context.Context, wf Definition, opts []ReplayOption) (*env, error) {
	cfg := Config{Codec: JSON{}}
	for _, o := range opts {
		o(&cfg)
	}
	cfg = cfg.withDefaults()
	cfg.Hooks = nopHooks{}
	names, err := newMessageNames(cfg.Messages)
	if err != nil {
		return nil, err
	}
	return &env{cfg: cfg, codec: cfg.Codec, ctx: ctx, defs: map[string]Definition{wf.Name(): wf}, names: names,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}, nil
}

// replayEnv is the environment of a side-effect-free replay on this node:
// its configuration, workflows, errors and message names, without hooks or
// logs.
func (s *System) replayEnv(ctx context.Context) *env {
	v := &env{cfg: s.cfg, codec: s.codec, ctx: ctx, defs: s.defs, names: s.names, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	v.cfg.Hooks = nopHooks{}
	return v
}

// storedEvents turns a history as users read it back into stored events.
func storedEvents(history []HistoryEvent) []persistence.Event {
	hist := make([]persistence.Event, len(history))
	for i, e := range history {
		hist[i] = persistence.Event{Seq: e.Seq, Kind: string(e.Kind), Name: e.Name, Ref: e.Ref, Payload: e.Payload,
			Error: e.ErrorRecord, Digest: e.Digest, At: e.At}
	}
	return hist
}
