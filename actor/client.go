package actor

import (
	"context"
	"fmt"
	"time"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// SpawnOption configures Spawn.
type SpawnOption func(*spawnConfig)

type spawnConfig struct{ id string }

// WithID gives the instance a chosen ID. Spawning an ID that exists returns
// the existing PID and starts nothing.
func WithID(id string) SpawnOption { return func(c *spawnConfig) { c.id = id } }

// Spawn starts a new instance of wf with input in. It returns once the
// instance is durable.
func Spawn[In, Out any](ctx context.Context, sys *System, wf *WorkflowDef[In, Out], in In, opts ...SpawnOption) (PID, error) {
	if wf == nil {
		return "", fmt.Errorf("%w: nil workflow", ErrUnknownWorkflow)
	}
	if def, ok := sys.defs[wf.name]; !ok || def != Definition(wf) {
		return "", fmt.Errorf("%w: %q is not registered on this system", ErrUnknownWorkflow, wf.name)
	}
	var cfg spawnConfig
	for _, o := range opts {
		o(&cfg)
	}
	input, err := sys.encode(in)
	if err != nil {
		return "", err
	}
	return sys.spawn(ctx, wf, input, cfg.id, "")
}

func (s *System) spawn(ctx context.Context, def Definition, input []byte, id, parent string) (PID, error) {
	if id == "" {
		id = def.Name() + "-" + newSortableID()
	}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return "", ErrStopped
	}
	_, busy := s.starting[id]
	if !busy {
		s.starting[id] = false
	}
	s.mu.Unlock()
	now := time.Now()
	inst := persistence.Instance{ID: id, Workflow: def.Name(), Status: persistence.StatusRunning, Input: input, Parent: parent,
		LeaseOwner: s.cfg.NodeID, LeaseEpoch: 1, LeaseExpires: now.Add(s.cfg.LeaseTTL), HistoryLen: 1}
	started := persistence.Event{Seq: 0, Kind: EventStarted, Name: def.Name(), Ref: s.codec.Name(), Payload: input, At: now}
	// Apply even when an activation start is already under way for this ID:
	// only the store can say whether the instance is durable.
	res, err := s.store.Apply(ctx, persistence.Step{Create: &inst, History: []persistence.Event{started}})
	if err != nil || res.Existing != nil || busy {
		if !busy {
			s.clearStarting(id)
		}
		if err != nil {
			return "", fmt.Errorf("norn: spawn %s: %w", id, err)
		}
		return PID(id), nil
	}
	s.hook(HookEvent{Kind: HookInstanceStarted, Instance: id, Workflow: def.Name()})
	s.launch(newActivation(s, def, inst, []persistence.Event{started}))
	return PID(id), nil
}

// Await blocks until the instance ends and returns its typed result. It
// works for any instance in the store, including ones started before a
// restart or on another node.
func Await[In, Out any](ctx context.Context, sys *System, wf *WorkflowDef[In, Out], pid PID) (Out, error) {
	var zero Out
	inst, err := sys.awaitDone(ctx, pid)
	if err != nil {
		return zero, err
	}
	if inst.Workflow != wf.Name() {
		return zero, fmt.Errorf("%w: %s runs workflow %q, not %q", ErrInvalidInput, pid, inst.Workflow, wf.Name())
	}
	switch inst.Status {
	case persistence.StatusCompleted:
		out, err := decodeWith[Out](sys.codec, inst.Output)
		if err != nil {
			return zero, fmt.Errorf("norn: result of %s does not decode as %s: %w", pid, typeName[Out](), err)
		}
		return out, nil
	case persistence.StatusCancelled:
		return zero, fmt.Errorf("%w: %s", ErrCancelled, inst.Error)
	default:
		var cause error
		if rec := parseErrorRecord(string(inst.Output)); rec != nil && len(inst.Output) > 0 {
			cause = sys.rebuildError(rec)
		}
		return zero, &WorkflowError{Instance: string(pid), Message: inst.Error, cause: cause}
	}
}

// awaitPoll is the safety net of AwaitDone for instances that end on another
// node (a local end wakes the waiter directly).
const awaitPoll = time.Second

// AwaitDone blocks until the instance has ended and returns its record.
func (s *System) AwaitDone(ctx context.Context, pid PID) (Instance, error) {
	inst, err := s.awaitDone(ctx, pid)
	if err != nil {
		return Instance{}, err
	}
	return s.instance(inst), nil
}

func (s *System) awaitDone(ctx context.Context, pid PID) (persistence.Instance, error) {
	id := string(pid)
	t := time.NewTimer(awaitPoll)
	defer t.Stop()
	for {
		c := s.waitEnd(id)
		inst, err := s.store.Instance(ctx, id)
		if err != nil || inst.Status.Terminal() {
			s.dropWaiter(id, c)
			return inst, err
		}
		// An instance this node holds ends here and wakes the waiter; the
		// poll is for instances other nodes run.
		poll := awaitPoll
		if inst.LeaseOwner == s.cfg.NodeID {
			poll = 10 * awaitPoll
		}
		t.Reset(poll)
		select {
		case end := <-c:
			return end, nil
		case <-t.C:
			s.dropWaiter(id, c)
		case <-ctx.Done():
			s.dropWaiter(id, c)
			return inst, ctx.Err()
		}
	}
}

// Cancel asks the instance to end as cancelled. The request is durable when
// Cancel returns; the instance's wait returns ErrCancelled and it ends
// (Await reports ErrCancelled). Cancelling an ended instance fails with
// ErrInstanceDone.
func (s *System) Cancel(ctx context.Context, pid PID, reason string) error {
	id := string(pid)
	if err := s.store.RequestCancel(ctx, id, reason); err != nil {
		return err
	}
	s.mu.Lock()
	if a, ok := s.acts[id]; ok {
		if a.passivating {
			a.rewake = true
		} else {
			a.deliver(sigCancel) // under s.mu, as in wake
		}
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	s.wake(id)
	return nil
}

// Send delivers msg to pid's mailbox; it returns once the message is durable.
func (s *System) Send(ctx context.Context, pid PID, msg any) error {
	return s.sendMessage(ctx, "", pid, msg)
}

// SendOn delivers msg to pid on a direct channel.
func (s *System) SendOn(ctx context.Context, channel string, pid PID, msg any) error {
	if channel == "" {
		return fmt.Errorf("%w: SendOn needs a channel", ErrInvalidInput)
	}
	return s.sendMessage(ctx, channel, pid, msg)
}

func (s *System) sendMessage(ctx context.Context, channel string, pid PID, msg any) error {
	payload, err := s.encode(msg)
	if err != nil {
		return err
	}
	step := persistence.Step{Send: []persistence.NewMessage{{ID: newMessageID(), Channel: channel, Target: string(pid), Type: messageType(msg),
		Payload: payload, MustDeliver: true}}}
	res, err := s.store.Apply(ctx, step)
	if err != nil {
		return err
	}
	s.afterCommit("", &step, res)
	return nil
}

// Publish puts msg on a channel and returns its message ID once durable.
func (s *System) Publish(ctx context.Context, channel string, msg any) (string, error) {
	return s.PublishWith(ctx, channel, msg, nil)
}

// PublishWith is Publish with message metadata.
func (s *System) PublishWith(ctx context.Context, channel string, msg any, metadata map[string]string) (string, error) {
	if channel == "" {
		return "", fmt.Errorf("%w: Publish needs a channel", ErrInvalidInput)
	}
	payload, err := s.encode(msg)
	if err != nil {
		return "", err
	}
	id := newMessageID()
	step := persistence.Step{Send: []persistence.NewMessage{{ID: id, Channel: channel, Type: messageType(msg), Payload: payload, Metadata: metadata}}}
	res, err := s.store.Apply(ctx, step)
	if err != nil {
		return "", err
	}
	s.afterCommit("", &step, res)
	return id, nil
}

// ChannelStat summarises one channel.
type ChannelStat struct {
	Channel     string
	Mode        Mode // empty if the channel has no subscribers
	Subscribers int
	Waiting     int // messages not yet consumed (queue plus per-subscriber copies)
}

// ChannelStats reports, per channel, its mode, subscribers and waiting messages.
func (s *System) ChannelStats(ctx context.Context) ([]ChannelStat, error) {
	st, err := s.store.ChannelStats(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ChannelStat, len(st))
	for i, c := range st {
		out[i] = ChannelStat{Channel: c.Channel, Mode: c.Mode, Subscribers: c.Subscribers, Waiting: c.Waiting}
	}
	return out, nil
}

// Subscribers is re-exported for callers that only import actor.
type Mode = mailbox.Mode
