package actor

import (
	"context"
	"time"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// Status is the lifecycle state of an instance.
type Status = persistence.Status

// Instance statuses. Running covers executing and parked activations;
// Waiting means passivated (no activation; mail, a timer or a cancel brings
// it back).
const (
	StatusRunning      = persistence.StatusRunning
	StatusWaiting      = persistence.StatusWaiting
	StatusCompensating = persistence.StatusCompensating
	StatusCompleted    = persistence.StatusCompleted
	StatusFailed       = persistence.StatusFailed
	StatusCancelled    = persistence.StatusCancelled
)

// Instance is one durable run of a workflow, as users see it.
type Instance struct {
	ID       string
	Workflow string
	Status   Status
	Input    []byte // encoded input of the current run
	Output   []byte // encoded result, once completed
	// Error is the one-line reason of a failed or cancelled instance.
	Error string
	// Failure is the recorded cause of a failed instance, rebuilt: a
	// *PanicError (with its stack), *ActivityError, *NonDeterminismError or
	// a registered error.
	Failure      error
	Parent       string // instance that spawned it, if any
	CancelReason string // set once a cancel was requested
	Restarts     int64  // restarts after crashes, over the instance's life
	Run          int64  // continue-as-new generation, 0 for the first run
	HistoryLen   int64  // events in the current run's history
	// Node is the node whose activation holds the instance's lease, if
	// any. Inspect also names this node while an activation here runs an
	// instance that it has not written yet (a woken instance takes the
	// lease with its first write).
	Node      string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// HistoryEvent is one entry of an instance's history.
type HistoryEvent struct {
	Seq     int64
	Kind    EventKind
	Name    string // activity, channel, timer, receive or workflow name
	Ref     string // activity call ID, message ID, child ID …
	Payload []byte // the recorded value (encoded)
	// Error is the recorded failure's one-line text; Failure the failure
	// rebuilt as the workflow saw it.
	Error   string
	Failure error
	Digest  string // identifies the call's input
	At      time.Time
	raw     string // the failure as recorded
}

// Subscription is one channel an instance listens to.
type Subscription struct {
	Channel string
	Mode    mailbox.Mode
}

// InstanceInfo is what Inspect reports.
type InstanceInfo struct {
	Instance
	History       []HistoryEvent
	MailboxDepth  int
	Subscriptions []Subscription
	// Active reports an activation of the instance on this node.
	Active bool
}

func (s *System) instance(in persistence.Instance) Instance {
	out := Instance{ID: in.ID, Workflow: in.Workflow, Status: in.Status, Input: in.Input, Error: in.Error,
		Parent: in.Parent, CancelReason: in.CancelReason, Restarts: in.Restarts, Run: in.Run, HistoryLen: in.HistoryLen,
		CreatedAt: in.CreatedAt, UpdatedAt: in.UpdatedAt}
	if in.LeaseOwner != "" && time.Now().Before(in.LeaseExpires) {
		out.Node = in.LeaseOwner
	}
	switch in.Status {
	case StatusCompleted:
		out.Output = in.Output
	case StatusFailed:
		if len(in.Output) > 0 {
			out.Failure = s.rebuildError(parseErrorRecord(string(in.Output)))
		}
	}
	return out
}

func (s *System) historyEvent(e persistence.Event) HistoryEvent {
	h := HistoryEvent{Seq: e.Seq, Kind: e.Kind, Name: e.Name, Ref: e.Ref, Payload: e.Payload, Digest: e.Digest, At: e.At, raw: e.Error}
	if rec := parseErrorRecord(e.Error); rec != nil {
		h.Failure = s.rebuildError(rec)
		h.Error = oneLine(h.Failure.Error())
	}
	return h
}

// Inspect reads an instance's state, history and mailbox.
func (s *System) Inspect(ctx context.Context, pid PID) (InstanceInfo, error) {
	id := string(pid)
	inst, err := s.store.Instance(ctx, id)
	if err != nil {
		return InstanceInfo{}, err
	}
	info := InstanceInfo{Instance: s.instance(inst)}
	hist, err := s.store.History(ctx, id, 0)
	if err != nil {
		return info, err
	}
	for _, e := range hist {
		info.History = append(info.History, s.historyEvent(e))
	}
	msgs, err := s.store.Mailbox(ctx, id, 0)
	if err != nil {
		return info, err
	}
	info.MailboxDepth = len(msgs)
	subs, err := s.store.Subscriptions(ctx, id)
	if err != nil {
		return info, err
	}
	for _, sub := range subs {
		info.Subscriptions = append(info.Subscriptions, Subscription{Channel: sub.Channel, Mode: sub.Mode})
	}
	s.mu.Lock()
	_, info.Active = s.acts[id]
	s.mu.Unlock()
	if info.Active && info.Node == "" && !info.Status.Terminal() {
		info.Node = s.cfg.NodeID
	}
	return info, nil
}
