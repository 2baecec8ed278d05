package actor

import (
	"context"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// InstanceInfo is what Inspect reports.
type InstanceInfo struct {
	Instance
	History []HistoryEvent
	// MailboxDepth counts the messages waiting for the instance (its
	// channels' queues included, for a competing consumer), up to 1,000.
	MailboxDepth  int
	Subscriptions []Subscription
	// Active reports an activation of the instance on this node that may
	// run it: not one left parked here while another node holds the
	// instance's lease (its next write is refused, and it stops).
	Active bool
}

func (s *System) instance(in persistence.Instance) Instance {
	out := Instance{ID: in.ID, Workflow: in.Workflow, Status: in.Status, Input: in.Input, Error: in.Error,
		Parent: in.Parent, CancelReason: in.CancelReason, Restarts: in.Restarts, Run: in.Run, HistoryLen: in.HistoryLen,
		CreatedAt: in.CreatedAt, UpdatedAt: in.UpdatedAt}
	if p := s.parkedOnOf(in); p != nil {
		out.Waits = p.Waits
	}
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
	h := HistoryEvent{Seq: e.Seq, Kind: EventKind(e.Kind), Name: e.Name, Ref: e.Ref, Payload: e.Payload, Digest: e.Digest, At: e.At, ErrorRecord: e.Error}
	if rec := parseErrorRecord(e.Error); rec != nil {
		h.Failure = s.rebuildError(rec)
		h.Error = oneLine(h.Failure.Error())
	}
	return h
}

// Inspect reads an instance's state, history, subscriptions and mailbox depth,
// all as of one moment. An instance that runs on this node commits what it
// took first; on another node, its last takes show once they commit (within
// 50 ms).
func (s *System) Inspect(ctx context.Context, pid PID) (InstanceInfo, error) {
	id := string(pid)
	// An instance live here may hold back takes it has not committed yet
	// (see deferTakes): have it commit them, so that the node that runs
	// it shows what it took. It answers once parked; one that does not
	// park within deferTakesFor is running its own code, and Inspect does
	// not wait for it.
	if _, _, err := s.askLive(ctx, id, &queryAsk{}, deferTakesFor); err != nil {
		return InstanceInfo{}, err
	}
	snap, err := s.store.Snapshot(ctx, id)
	if err != nil {
		return InstanceInfo{}, err
	}
	info := InstanceInfo{Instance: s.instance(snap.Instance), MailboxDepth: snap.MailboxDepth}
	for _, e := range snap.History {
		info.History = append(info.History, s.historyEvent(e))
	}
	for _, sub := range snap.Subscriptions {
		info.Subscriptions = append(info.Subscriptions, Subscription{Channel: sub.Channel, Mode: sub.Mode})
	}
	s.mu.Lock()
	_, live := s.acts[id]
	s.mu.Unlock()
	// A parked instance whose lease is free may be taken by any node that
	// shares the store (outside a cluster, see releaseAtPark); an
	// activation still parked here after another node took it does not
	// run it.
	info.Active = live && (info.Node == "" || info.Node == s.cfg.NodeID)
	if info.Active && info.Node == "" && !info.Status.Terminal() {
		info.Node = s.cfg.NodeID
	}
	return info, nil
}
