package actor

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nornlabs/norn/actor/internal/journal"
	"github.com/nornlabs/norn/persistence"
)

// SpawnOption configures Spawn.
type SpawnOption func(*spawnConfig)

type spawnConfig struct {
	id string
}

// WithID gives the instance a chosen ID. Spawning an ID that exists returns
// the existing PID and starts nothing (SpawnID tells which happened); if
// the ID belongs to another workflow, Spawn fails with an *IDConflictError.
func WithID(id string) SpawnOption { return func(c *spawnConfig) { c.id = id } }

// Spawn starts a new instance of wf with input in. It returns once the
// instance is durable; from then on it runs (here, or on another node if
// this one stops first), however many Spawns of its ID race, in this
// process or others.
func Spawn[In, Out any](ctx context.Context, sys *System, wf *WorkflowDef[In, Out], in In, opts ...SpawnOption) (PID, error) {
	var cfg spawnConfig
	for _, o := range opts {
		o(&cfg)
	}
	r, err := spawnWorkflow(ctx, sys, wf, cfg.id, in)
	return r.PID, err
}

// Spawned is what SpawnID reports.
type Spawned struct {
	PID PID
	// Existed: the instance existed already, and the call started nothing.
	Existed bool
}

// SpawnID is Spawn with the ID given by WithID(id), and it also reports
// whether this call created the instance or found it existing: what a
// caller that retries needs in order to tell its first attempt from a
// repeat.
func SpawnID[In, Out any](ctx context.Context, sys *System, wf *WorkflowDef[In, Out], id string, in In) (Spawned, error) {
	if id == "" {
		return Spawned{}, fmt.Errorf("%w: SpawnID needs an ID", ErrInvalidInput)
	}
	return spawnWorkflow(ctx, sys, wf, id, in)
}

// spawnWorkflow is Spawn and SpawnID; an empty id makes a fresh one.
func spawnWorkflow[In, Out any](ctx context.Context, sys *System, wf *WorkflowDef[In, Out], id string, in In) (Spawned, error) {
	if wf == nil {
		return Spawned{}, fmt.Errorf("%w: nil workflow", ErrUnknownWorkflow)
	}
	if err := sys.checkRegistered(wf); err != nil {
		return Spawned{}, err
	}
	input, err := sys.encode(in)
	if err != nil {
		return Spawned{}, err
	}
	if err := sys.checkPayload("input", input); err != nil {
		return Spawned{}, err
	}
	if err := sys.enter(); err != nil {
		return Spawned{}, err
	}
	defer sys.leave()
	pid, existed, err := sys.create(ctx, wf, input, id, "")
	if err != nil {
		return Spawned{}, err
	}
	return Spawned{PID: pid, Existed: existed}, nil
}

// checkRegistered checks that def is the definition this node registered under
// its name (the System runs the registered value, not the one given). A
// client runs nothing, so it may spawn what it has not registered.
func (s *System) checkRegistered(def Definition) error {
	got, ok := s.defs[def.Name()]
	switch {
	case !ok && !s.role.hosts():
		return nil
	case !ok:
		return fmt.Errorf("%w: %q is not registered on this system", ErrUnknownWorkflow, def.Name())
	case got != def:
		return fmt.Errorf("%w: a different definition is registered under the name %q; pass the value given in Config.Workflows",
			ErrUnknownWorkflow, def.Name())
	}
	return nil
}

// checkPayload enforces Config.MaxPayload on an encoded input or message;
// what names it in the error.
func (e *env) checkPayload(what string, b []byte) error {
	if len(b) > e.cfg.MaxPayload {
		return &PayloadTooLargeError{Field: what, Size: len(b), Max: e.cfg.MaxPayload}
	}
	return nil
}

// spawn creates an instance (see create) and reports its PID.
func (s *System) spawn(ctx context.Context, def Definition, input []byte, id, parent string) (PID, error) {
	pid, _, err := s.create(ctx, def, input, id, parent)
	return pid, err
}

// create makes the instance durable and sees that it runs; existed reports
// that the ID was taken (by this workflow) and nothing was created.
//
// If no start of the ID is in progress here and this node owns the ID,
// create holds the start: the instance is created under this node's lease
// and launched at once (no lease round trip, no history read). Otherwise
// (another Spawn of the ID, an activator, a live activation, another owner)
// the instance is created without a lease and woken: the wake reaches
// whoever holds the start, who acts on it once done, or the owner. Either
// way no instance is left under a lease nobody runs.
//
// with adds to the creating step (events after started, messages): all of
// it commits with the creation, or none of it.
func (s *System) create(ctx context.Context, def Definition, input []byte, id, parent string, with ...func(*persistence.Step)) (pid PID, existed bool, err error) {
	if id == "" {
		id = def.Name() + "-" + newSortableID()
	}
	if err := validID("instance ID", id); err != nil {
		return "", false, err
	}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return "", false, ErrStopped
	}
	_, live := s.acts[id]
	// An instance another node owns is created without a lease and woken
	// there.
	held := !live && !s.starts.Starting(id) && s.owns(id)
	if held {
		s.starts.Begin(id)
	}
	s.mu.Unlock()
	now := time.Now()
	inst := persistence.Instance{ID: id, Workflow: def.Name(), Status: persistence.StatusRunning, Input: input, Parent: parent,
		HistoryLen: 1}
	var leaseTTL time.Duration
	if held {
		// The store starts the lease on its own clock (a shared store's is
		// its server's): this host's may be skewed, and the step may wait
		// for the store before it is written.
		inst.LeaseOwner, inst.LeaseEpoch, leaseTTL = s.cfg.NodeID, 1, s.cfg.LeaseTTL
	}
	started := persistence.Event{Seq: 0, Kind: EventStarted, Name: def.Name(), Ref: s.codec.Name(), Payload: input, At: now}
	step := persistence.Step{Create: &inst, LeaseTTL: leaseTTL, History: []persistence.Event{started}}
	for _, f := range with {
		f(&step)
	}
	inst.HistoryLen = int64(len(step.History))
	res, err := s.store.Apply(ctx, step)
	switch {
	case err != nil:
		if held {
			s.endStart(id, false)
		}
		// The step may have committed all the same (a cancelled ctx, a lost
		// reply): look, so that an instance created under our lease runs.
		s.wake(id)
		return "", false, fmt.Errorf("norn: spawn %s: %w", id, err)
	case res.Existing != nil:
		if held {
			// Whoever created it runs it; a wake that came meanwhile
			// (mail, a creation by a Spawn that found us starting) is
			// acted on.
			s.endStart(id, true)
		}
		if res.Existing.Workflow != def.Name() {
			return "", false, &IDConflictError{ID: id, Workflow: res.Existing.Workflow, Requested: def.Name()}
		}
		return PID(id), true, nil
	}
	s.hook(HookEvent{Kind: HookInstanceStarted, Instance: id, Workflow: def.Name()})
	if len(step.Send) > 0 {
		s.afterCommit(id, &step, res)
	}
	if !held {
		s.wake(id)
		return PID(id), false, nil
	}
	s.hook(HookEvent{Kind: HookInstanceActivated, Instance: id, Workflow: def.Name()})
	a := newActivation(s, def, inst, journal.Events(step.History))
	a.quietMail = true
	s.launch(a)
	return PID(id), false, nil
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
	return s.awaitEnd(ctx, string(pid), awaitPoll/64, awaitPoll)
}

// awaitEnd waits for instance id to end: woken by its end if it runs here,
// else polling the store, every first at first and then less and less
// often, up to every most: most awaited instances are short.
func (s *System) awaitEnd(ctx context.Context, id string, first, most time.Duration) (persistence.Instance, error) {
	t := time.NewTimer(most)
	defer t.Stop()
	remote := first
	for {
		c, live := s.waitEnd(id)
		if live {
			// Running here: its end signals the waiter. The store is
			// still read every most: an activation parked here without
			// the lease may not be the one that ends it (another process
			// sharing the store, outside a cluster, may take its next
			// message and end it), and learns of that only at its next
			// wake or its passivation.
			t.Reset(most)
			select {
			case end := <-c:
				if end != nil {
					return *end, nil
				}
				continue // it ended unfinished: look again
			case <-t.C:
				if inst, err := s.store.Instance(ctx, id); err != nil || inst.Status.Terminal() {
					s.dropWaiter(id, c)
					return inst, err
				}
				s.dropWaiter(id, c)
				continue
			case <-ctx.Done():
				s.dropWaiter(id, c)
				return persistence.Instance{}, ctx.Err()
			}
		}
		inst, err := s.store.Instance(ctx, id)
		if err != nil || inst.Status.Terminal() {
			s.dropWaiter(id, c)
			return inst, err
		}
		// An instance this node holds ends here and wakes the waiter; the
		// poll is for instances other nodes run.
		poll := remote
		remote = min(2*remote, most)
		if inst.LeaseOwner == s.cfg.NodeID {
			poll = 10 * most
		}
		t.Reset(poll)
		select {
		case end := <-c:
			if end != nil {
				return *end, nil
			}
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
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	id := string(pid)
	if err := s.store.RequestCancel(ctx, id, reason); err != nil {
		return err
	}
	// Signal, record for a start in progress, or start: one decision under
	// s.mu, so that an activation registered meanwhile still gets it.
	s.forward(s.poke(id, sigCancel, fromHere))
	return nil
}

// WithMessageID gives the message a caller-chosen ID, which makes a call
// from outside the workflows (System.Send, SendOn, Publish, PublishWith)
// safe to retry: a message with an ID already used (within
// Config.DedupeWindow) is not delivered again, whichever of them (or
// Deliver, PublishBatch) sent it. Deliver also reports such a repeat.
// Without it, or with an empty ID, every call gets a fresh random ID and no
// such check. Inside a workflow (ctx.Send, ctx.Publish) sends are recorded
// and never repeated on replay anyway; an ID given there is checked the same
// way against sends from anywhere, and a duplicate is silently not delivered.
func WithMessageID(id string) SendOption { return func(c *sendConfig) { c.id = id } }

// Send delivers msg to pid's mailbox; it returns once the message is durable.
func (s *System) Send(ctx context.Context, pid PID, msg any, opts ...SendOption) error {
	_, err := s.put(ctx, persistence.NewMessage{Target: string(pid), MustDeliver: true}, msg, opts)
	return err
}

// SendOn delivers msg to pid on a direct channel.
func (s *System) SendOn(ctx context.Context, channel string, pid PID, msg any, opts ...SendOption) error {
	if channel == "" {
		return fmt.Errorf("%w: SendOn needs a channel", ErrInvalidInput)
	}
	_, err := s.put(ctx, persistence.NewMessage{Channel: channel, Target: string(pid), MustDeliver: true}, msg, opts)
	return err
}

// Publish puts msg on a channel and returns its message ID once durable
// (the one given with WithMessageID, if any). Broadcast subscribers get a
// copy each; on a channel with none it waits in the channel's queue for a
// competing consumer, for at most Config.QueueRetention.
func (s *System) Publish(ctx context.Context, channel string, msg any, opts ...SendOption) (string, error) {
	return s.PublishWith(ctx, channel, msg, nil, opts...)
}

// PublishWith is Publish with message metadata (non-nil, it takes the
// place of a WithMetadata option).
func (s *System) PublishWith(ctx context.Context, channel string, msg any, metadata map[string]string, opts ...SendOption) (string, error) {
	if channel == "" {
		return "", fmt.Errorf("%w: Publish needs a channel", ErrInvalidInput)
	}
	return s.put(ctx, persistence.NewMessage{Channel: channel, Metadata: metadata}, msg, opts)
}

// put adds one message from outside the workflows and returns its ID.
func (s *System) put(ctx context.Context, m persistence.NewMessage, msg any, opts []SendOption) (string, error) {
	var cfg sendConfig
	for _, o := range opts {
		o(&cfg)
	}
	payload, err := s.encode(msg)
	if err != nil {
		return "", err
	}
	if err := s.checkPayload("message", payload); err != nil {
		return "", err
	}
	m.Payload, m.Type = payload, s.messageType(msg)
	if err := checkNotReserved(m.Channel, m.Type); err != nil {
		return "", err
	}
	if m.Metadata == nil {
		m.Metadata = cfg.metadata
	}
	if cfg.id != "" {
		m.ID, m.Dedupe = cfg.id, true
	} else {
		m.ID = newMessageID()
	}
	sent, err := s.add(ctx, m)
	return sent.ID, err
}

// Sent is what Deliver reports about one message.
type Sent struct {
	ID string // the message's ID: the one given, or a fresh random one
	// Duplicate: the given ID had been used already (within
	// Config.DedupeWindow), and the call delivered nothing.
	Duplicate bool
	// Listeners is how many instances the message reached or may go to:
	// the target of a send; each subscriber of a broadcast channel (each
	// got a copy); the subscribers of a competing channel that were told
	// of it (one of them, or another consumer, takes it), counted up to
	// persistence.MaxQueuedSubscribers, or 1 when it was handed at once to
	// a consumer of this node that waited idle for it. 0 for a message
	// published where nobody subscribes.
	Listeners int
	// Queued: the message waits in the channel's queue for a competing
	// consumer (at most Config.QueueRetention): the channel has competing
	// subscribers, or no subscriber at all yet. False for a message
	// handed to a waiting consumer: it is in that consumer's mailbox.
	Queued bool
}

// Deliver adds one message from outside the workflows, as PublishBatch does
// several: Outgoing says where it goes (the way of Send, SendOn or Publish)
// and with which ID. It returns once the message is durable, and reports
// whether an ID given had been used already, so that a caller that retries
// can tell its first attempt from a repeat.
func (s *System) Deliver(ctx context.Context, o Outgoing) (Sent, error) {
	m, err := s.outgoing(o)
	if err != nil {
		return Sent{}, err
	}
	return s.add(ctx, m)
}

// add applies one message m, made by put or outgoing, as its own step.
func (s *System) add(ctx context.Context, m persistence.NewMessage) (Sent, error) {
	if err := s.enter(); err != nil {
		return Sent{}, err
	}
	defer s.leave()
	to := s.pickHandTo(&m)
	step := persistence.Step{Send: []persistence.NewMessage{m}}
	res, err := s.store.Apply(ctx, step)
	wakes := res
	if to != nil {
		// handed has woken the consumer: a second wake would only make
		// it look again once it has taken the message.
		s.handed(to, m.ID, res, err)
		wakes.Woken = slices.DeleteFunc(slices.Clone(res.Woken), func(id string) bool { return id == to.id })
	}
	if err != nil {
		if m.Target == "" {
			s.queueUnsure()
		}
		return Sent{}, err
	}
	s.afterCommit("", &step, wakes)
	sent := Sent{ID: m.ID, Duplicate: m.Dedupe && slices.Contains(res.Duplicates, m.ID)}
	if !sent.Duplicate {
		seen := map[string]bool{}
		for _, id := range res.Woken {
			seen[id] = true
		}
		sent.Listeners = len(seen)
		sent.Queued = len(res.Queued) > 0 || m.Target == "" && sent.Listeners == 0
	}
	return sent, nil
}

// ChannelStat summarises one channel.
type ChannelStat struct {
	Channel     string
	Mode        Mode // empty if the channel has no subscribers
	Subscribers int
	Waiting     int // messages not yet consumed (queue plus per-subscriber copies)
	// Oldest is when the oldest of the Waiting messages was published; zero
	// if none waits. On a queue that no competing consumer drains it shows
	// how soon Config.QueueRetention will start deleting messages.
	Oldest time.Time
}

// ChannelStats reports, per channel, its mode, subscribers and waiting
// messages, and when the oldest of these was published.
func (s *System) ChannelStats(ctx context.Context) ([]ChannelStat, error) {
	st, err := s.store.ChannelStats(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ChannelStat, len(st))
	for i, c := range st {
		out[i] = ChannelStat{Channel: c.Channel, Mode: c.Mode, Subscribers: c.Subscribers, Waiting: c.Waiting, Oldest: c.Oldest}
	}
	return out, nil
}
