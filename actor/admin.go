package actor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// What an operator does to an instance from outside its workflow: end it
// now (Terminate), or give an ended one a new run (Reset, Retry, Restart).
//
// A new run keeps the instance's PID and replays the events it keeps,
// answering the workflow's durable calls from them as after a crash, then
// carries on live: activities recorded there are not run again, those
// after the point are. The timers and subscriptions the kept events hold
// are restored with the new run. What the old run received after the
// point is not delivered again (its messages were consumed), and its
// children are left as they are.

// ErrInstanceLive: the operation needs an ended instance (Reset, Retry,
// Restart) and this one has not ended; terminate or cancel it first.
var ErrInstanceLive = persistence.ErrInstanceLive

// ErrNotFailed: Retry needs a failed instance and this one ended otherwise
// (Restart runs it again from its start).
var ErrNotFailed = errors.New("norn: instance did not fail")

// Terminate ends pid now, as cancelled with the given reason, without
// running compensations and without waiting for its workflow: on whatever
// node runs it, the activation stops at its next step or wake, and
// activities in flight there finish but their results are dropped. Its
// parent and monitors get their Down as for any end; its children are
// left running (terminate or cancel them on their own). It fails with
// ErrInstanceDone if the instance has ended already, ErrNotFound if there
// is none.
func (s *System) Terminate(ctx context.Context, pid PID, reason string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	id := string(pid)
	if err := validID("pid", id); err != nil {
		return err
	}
	if reason == "" {
		reason = "terminated"
	}
	msg := cleanText("terminated: " + oneLine(reason))
	rec := s.recordError(&recordedErr{msg: msg, kind: ErrCancelled}).marshal()
	// The workflow's own steps may commit meanwhile: read again and retry
	// until ours is the one that lands at the end of history.
	for attempt := 0; ; attempt++ {
		inst, err := s.store.Instance(ctx, id)
		if err != nil {
			return err
		}
		if inst.Status.Terminal() {
			return fmt.Errorf("%w: %s is %s", ErrInstanceDone, id, inst.Status)
		}
		step := persistence.Step{Instance: id, Epoch: inst.LeaseEpoch, Status: persistence.StatusCancelled, Error: msg,
			History: []persistence.Event{{Seq: inst.HistoryLen, Kind: EventCancelled, Name: inst.Workflow, Error: rec}},
			Send:    downMessages(id, inst.Parent, persistence.StatusCancelled, msg, nil)}
		res, err := s.store.Apply(ctx, step)
		switch {
		case err == nil:
			s.afterCommit(id, &step, res)
			s.stopEnded(id)
			s.hook(HookEvent{Kind: HookInstanceCancelled, Instance: id, Workflow: inst.Workflow, Err: errors.New(msg)})
			return nil
		case (errors.Is(err, persistence.ErrHistoryGap) || errors.Is(err, persistence.ErrFenced)) && attempt < 100 && ctx.Err() == nil:
			continue
		default:
			return err
		}
	}
}

// stopEnded makes the activation of an instance that was ended from
// outside (Terminate) go: a local one stops at once; the node that owns
// the instance, if another, is woken and reads the instance again.
func (s *System) stopEnded(id string) {
	s.mu.Lock()
	a := s.acts[id]
	s.mu.Unlock()
	switch {
	case a != nil:
		a.stop()
	case !s.owns(id):
		s.forward([]string{id})
	}
}

// Reset starts a new run of the ended instance pid that keeps the first
// keep events of its history (the first, the run's input, at least; fewer
// than all of them) and carries on live from there; see Retry and Restart
// for the two usual points. The events are numbered as Inspect and
// System.History show them (Seq), so keep is the Seq of the first event
// dropped. It fails with ErrInstanceLive if the instance has not ended and
// with ErrInvalidInput for a keep out of range. Of two resets of one end,
// only the first applies; the second fails with persistence.ErrFenced.
func (s *System) Reset(ctx context.Context, pid PID, keep int64) error {
	return s.newRun(ctx, pid, func(inst persistence.Instance, hist []persistence.Event) (int, error) {
		if keep < 1 || keep >= int64(len(hist)) {
			return 0, fmt.Errorf("%w: reset %s to keep %d events: its history has %d, of which the first and not the last may be kept",
				ErrInvalidInput, inst.ID, keep, len(hist))
		}
		return int(keep), nil
	})
}

// Retry resumes the failed instance pid from its last recorded step: a new
// run (see Reset) that keeps everything but the failure, with a fresh
// restart budget. An activity whose retries ran out runs again, with its
// retry policy afresh; a workflow that panicked or diverged from its
// history (fixed by a deploy since) runs its code on from its last durable
// call. A workflow that returned the error itself decides the same again
// unless what it reads has changed; one that compensated has undone its
// work (Restart runs it again from the start). It fails with
// ErrInstanceLive for a live instance and ErrNotFailed for one that ended
// otherwise.
func (s *System) Retry(ctx context.Context, pid PID) error {
	return s.newRun(ctx, pid, func(inst persistence.Instance, hist []persistence.Event) (int, error) {
		if inst.Status != persistence.StatusFailed {
			return 0, fmt.Errorf("%w: %s is %s (Restart runs it again from its start)", ErrNotFailed, inst.ID, inst.Status)
		}
		return retryPoint(hist), nil
	})
}

// newRun gives the ended instance pid a new run that keeps as many events
// of its history as keep decides.
func (s *System) newRun(ctx context.Context, pid PID, keep func(persistence.Instance, []persistence.Event) (int, error)) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	id := string(pid)
	if err := validID("pid", id); err != nil {
		return err
	}
	inst, hist, err := s.endedRun(ctx, id)
	if err != nil {
		return err
	}
	n, err := keep(inst, hist)
	if err != nil {
		return err
	}
	return s.reopen(ctx, inst, hist[:n])
}

// retryPoint is how many events of a failed run a retry keeps: all but
// its end, and, when an activity's failure caused it, but that failure and
// the attempts recorded just before it, so that the new run calls the
// activity again with its retries afresh.
func retryPoint(hist []persistence.Event) int {
	keep := len(hist) - 1 // the failed event
	if keep > 1 && hist[keep-1].Kind == EventActivity && hist[keep-1].Error != "" {
		ref := hist[keep-1].Ref
		for keep > 1 && hist[keep-1].Ref == ref && (hist[keep-1].Kind == EventActivity || hist[keep-1].Kind == EventActivityRetry) {
			keep--
		}
	}
	return max(keep, 1)
}

// Restart runs the ended instance pid again from its start, with the same
// input and PID: a new run (see Reset) that keeps only the input.
func (s *System) Restart(ctx context.Context, pid PID) error {
	return s.Reset(ctx, pid, 1)
}

// endedRun reads the ended instance id and its run's history.
func (s *System) endedRun(ctx context.Context, id string) (persistence.Instance, []persistence.Event, error) {
	inst, err := s.store.Instance(ctx, id)
	if err != nil {
		return inst, nil, err
	}
	if !inst.Status.Terminal() {
		return inst, nil, fmt.Errorf("%w: %s is %s; terminate or cancel it first", ErrInstanceLive, id, inst.Status)
	}
	hist, err := s.store.History(ctx, id, 0)
	if err != nil {
		return inst, nil, err
	}
	if len(hist) == 0 || hist[0].Kind != EventStarted {
		return inst, nil, fmt.Errorf("%w: %s has no history to run again", ErrInvalidInput, id)
	}
	return inst, hist, nil
}

// reopen commits the new run of inst that keeps events kept, with the
// timers and subscriptions they hold, and wakes it.
func (s *System) reopen(ctx context.Context, inst persistence.Instance, kept []persistence.Event) error {
	timers, subs, err := openWork(kept)
	if err != nil {
		return fmt.Errorf("reset %s: %w", inst.ID, err)
	}
	hist := make([]persistence.Event, len(kept))
	copy(hist, kept)
	step := persistence.Step{Instance: inst.ID, Epoch: inst.LeaseEpoch, Reopen: true, ResetHistory: true,
		Status: persistence.StatusRunning, History: hist, AddTimers: timers, Subscribe: subs, RestartLog: []time.Time{}}
	res, err := s.store.Apply(ctx, step)
	if err != nil {
		return err
	}
	s.afterCommit(inst.ID, &step, res)
	s.wake(inst.ID)
	return nil
}

// openWork lists the timers and subscriptions that a run's events hold
// once they are all replayed: timers set and not fired (sleeps, receive
// timeouts, durable retry back-offs), channels subscribed and not left,
// instances monitored whose Down has not come. An instance's end drops
// them from the store, and a new run that keeps these events needs them
// back (a replayed Sleep waits for its stored timer).
func openWork(events []persistence.Event) ([]persistence.Timer, []persistence.Subscription, error) {
	timers := map[string]persistence.Timer{}
	var timerOrder []string
	setTimer := func(id string, due time.Time) {
		if _, ok := timers[id]; !ok {
			timerOrder = append(timerOrder, id)
		}
		timers[id] = persistence.Timer{ID: id, Due: due}
	}
	retryTimer := map[string]string{} // activity call ID -> its back-off timer
	subs := map[string]persistence.Mode{}
	var subOrder []string
	subscribe := func(ch string, m persistence.Mode) {
		if _, ok := subs[ch]; !ok {
			subOrder = append(subOrder, ch)
		}
		subs[ch] = m
	}
	for _, e := range events {
		if t, ok := retryTimer[e.Ref]; ok && e.Ref != "" {
			delete(timers, t) // the next attempt ran: its back-off is over
			delete(retryTimer, e.Ref)
		}
		switch e.Kind {
		case EventTimer, EventReceiveWait:
			var rec timerRecord
			if err := json.Unmarshal(e.Payload, &rec); err != nil {
				return nil, nil, fmt.Errorf("event %d (%s): %w", e.Seq, e.Kind, err)
			}
			if rec.Stored {
				setTimer(e.Name, rec.Due)
			}
		case EventTimerFired, EventReceived, EventReceiveTimeout:
			delete(timers, e.Name)
		case EventActivityRetry:
			var r retryRecord
			if err := json.Unmarshal(e.Payload, &r); err != nil {
				return nil, nil, fmt.Errorf("event %d (%s): %w", e.Seq, e.Kind, err)
			}
			if r.Timer != "" {
				setTimer(r.Timer, r.Next)
				retryTimer[e.Ref] = r.Timer
			}
		case EventSubscribed:
			if e.Error == "" {
				subscribe(e.Name, persistence.Mode(e.Payload))
			}
		case EventUnsubscribed:
			delete(subs, e.Name)
		case EventMonitor:
			if e.Error == "" && string(e.Payload) != "down" {
				subscribe(mailbox.MonitorChannel(PID(e.Name)), mailbox.Broadcast)
			}
		}
	}
	var ts []persistence.Timer
	for _, id := range timerOrder {
		if t, ok := timers[id]; ok {
			ts = append(ts, t)
			delete(timers, id) // once, if set twice
		}
	}
	var ss []persistence.Subscription
	for _, ch := range subOrder {
		if m, ok := subs[ch]; ok {
			ss = append(ss, persistence.Subscription{Channel: ch, Mode: m})
			delete(subs, ch)
		}
	}
	return ts, ss, nil
}

// downMessages are what an instance's end sends: a Down on its monitor
// channel (for its monitors) and one to its parent.
func downMessages(id, parent string, status persistence.Status, msg string, out []byte) []persistence.NewMessage {
	down, _ := JSON{}.Marshal(mailbox.Down{PID: PID(id), Status: string(status), Error: msg, Output: out})
	ms := []persistence.NewMessage{{ID: newMessageID(), Channel: mailbox.MonitorChannel(PID(id)),
		Sender: id, Type: downType, Payload: down}}
	if parent != "" {
		ms = append(ms, persistence.NewMessage{ID: newMessageID(), Channel: mailbox.DownChannel,
			Target: parent, Sender: id, Type: downType, Payload: down})
	}
	return ms
}
