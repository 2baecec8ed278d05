package actor

import (
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// EventKind names an entry of an instance's history.
type EventKind = string

// History event kinds.
const (
	EventStarted        EventKind = "started"         // the run's input; Ref names the codec
	EventActivity       EventKind = "activity"        // an activity's result or failure (Ref: call ID)
	EventActivityRetry  EventKind = "activity_retry"  // a failed attempt and the wait before the next
	EventNow            EventKind = "now"             // ctx.Now
	EventTimer          EventKind = "timer"           // a timer set (Name: timer ID, payload: due time)
	EventTimerFired     EventKind = "timer_fired"     // that timer fired
	EventReceived       EventKind = "received"        // a consumed message (Name: receive ID)
	EventReceiveWait    EventKind = "receive_wait"    // a receive with a timeout started waiting
	EventReceiveTimeout EventKind = "receive_timeout" // that receive timed out
	EventSent           EventKind = "sent"            // ctx.Send / SendOn (Name: target)
	EventPublished      EventKind = "published"       // ctx.Publish (Name: channel)
	EventSubscribed     EventKind = "subscribed"
	EventUnsubscribed   EventKind = "unsubscribed"
	EventCompensating   EventKind = "compensating" // the saga started undoing
	EventCompensation   EventKind = "compensation" // one compensation ran
	EventChildSpawned   EventKind = "child_spawned"
	EventLinkedExit     EventKind = "linked_exit" // a linked child's failure ended this instance
	EventMonitor        EventKind = "monitor"
	EventCancelSent     EventKind = "cancel_sent"
	EventCancelObserved EventKind = "cancel_observed" // the workflow saw its cancel request here
	EventVersion        EventKind = "version"         // ctx.Version's marker
	EventCompleted      EventKind = "completed"
	EventFailed         EventKind = "failed"
	EventCancelled      EventKind = "cancelled"
)

// command is one durable call that does not answer at once: an activity, a
// timer or a receive. It is resolved by its completion event, which the
// live run records (in the order the workflow goroutine observes results)
// and replay reads back in that same order.
type command struct {
	key     string // "a:"+call ID, "t:"+timer ID, "r:"+receive ID
	done    bool
	rseq    int64 // resolution order, for Select
	value   any
	err     error
	resolve func(e persistence.Event) (any, error) // decodes the completion event
	// activity
	act *activityCall
	// timer
	due    time.Time
	stored bool
	timer  bool
	// receive
	recv *receiveCall
}

// completionKey maps a history event to the command it resolves or advances.
func completionKey(e persistence.Event) (string, bool) {
	switch e.Kind {
	case EventActivity, EventActivityRetry:
		return "a:" + e.Ref, true
	case EventTimerFired:
		return "t:" + e.Name, true
	case EventReceived, EventReceiveTimeout, EventReceiveWait:
		return "r:" + e.Name, true
	}
	return "", false
}

// progress reports events that advance a command without resolving it.
func progress(kind string) bool { return kind == EventActivityRetry || kind == EventReceiveWait }

// replaying reports whether calls are still answered from history. The
// first time it finds history used up it starts the live work that replay
// deferred (activities in flight when the last activation ended).
func (a *activation) replaying() bool {
	if a.pos < a.hist.len() {
		return true
	}
	if !a.live {
		a.live = true
		if a.replayOnly {
			panic(replayDone{})
		}
		a.startDeferred()
	}
	return false
}

// skipMarkers passes version markers no call asked for (code that dropped
// an old ctx.Version call still replays).
func (a *activation) skipMarkers() {
	for a.pos < a.hist.len() && a.hist.at(a.pos).Kind == EventVersion {
		a.pos++
	}
}

func (a *activation) nondet(e persistence.Event, got string) {
	panic(&NonDeterminismError{Seq: e.Seq, Expected: describe(e), Got: got})
}

func describe(e persistence.Event) string {
	s := e.Kind
	if e.Name != "" {
		s += " " + e.Name
	}
	if e.Ref != "" && e.Kind == EventActivity {
		s += " (" + e.Ref + ")"
	}
	return s
}

// immediate is the one record/replay path of calls that answer at once:
// on replay it checks the next event (kind, name, input digest) and returns
// it; live it lets fn record the event and returns what was recorded. The
// caller decodes its answer from the returned event either way.
func (a *activation) immediate(kind, name, dig string, fn func() persistence.Event) persistence.Event {
	a.skipMarkers()
	if a.replaying() {
		e := a.hist.at(a.pos)
		if e.Kind != kind || e.Name != name {
			a.nondet(e, kind+" "+name)
		}
		if dig != "" && e.Digest != "" && e.Digest != dig {
			a.nondet(e, kind+" "+name+" with another input")
		}
		a.pos++
		return e
	}
	return fn()
}

// recordNow records e live and returns it (for immediate's fn).
func (a *activation) recordNow(e persistence.Event) persistence.Event {
	a.record(e)
	return a.pending.History[len(a.pending.History)-1]
}

// record appends a new event to the pending step.
func (a *activation) record(e persistence.Event) {
	e.Error = cleanText(e.Error)
	e.Seq = a.seq
	if e.At.IsZero() {
		e.At = time.Now()
	}
	a.seq++
	a.pending.History = append(a.pending.History, e)
}

func (a *activation) nextID(name string) string {
	a.counters[name]++
	return name + ":" + strconv.Itoa(a.counters[name])
}

// observeCancel reports whether the workflow is to see its cancel request
// now. Seeing it is recorded, so replay sees it at the same call.
func (a *activation) observeCancel() bool {
	if a.cancelled {
		return true
	}
	if a.replaying() {
		// Look past version markers without taking them: a Version call
		// after this one may still ask for them.
		i := a.pos
		for i < a.hist.len() && a.hist.at(i).Kind == EventVersion {
			i++
		}
		if i < a.hist.len() && a.hist.at(i).Kind == EventCancelObserved {
			a.pos = i + 1
			a.cancelled = true
			return true
		}
		if i < a.hist.len() {
			return false // history goes on: the first run saw no cancel here
		}
		// Only version markers are left: from here on the run is live.
	}
	if a.cancelRequested() {
		a.record(persistence.Event{Kind: EventCancelObserved})
		a.cancelled = true
		a.cancelActivities()
	}
	return a.cancelled
}

// add registers a pending command.
func (a *activation) add(c *command) {
	a.cmds[c.key] = c
	a.order = append(a.order, c)
}

// apply feeds a command its completion or progress event.
func (a *activation) apply(c *command, e persistence.Event) {
	if progress(e.Kind) {
		c.advance(a, e)
		return
	}
	c.done = true
	a.rseqN++
	c.rseq = a.rseqN
	c.value, c.err = c.resolve(e)
	delete(a.cmds, c.key)
	for i, o := range a.order {
		if o == c {
			a.order = append(a.order[:i:i], a.order[i+1:]...)
			break
		}
	}
}

func (c *command) advance(a *activation, e persistence.Event) {
	switch {
	case c.act != nil:
		c.act.advance(a, e)
	case c.recv != nil:
		c.recv.advance(a, e)
	}
}

// consumeCompletions reads, while replaying, every completion or progress
// event of a pending command that comes next in history.
func (a *activation) consumeCompletions() {
	for a.pos < a.hist.len() {
		e := a.hist.at(a.pos)
		key, ok := completionKey(e)
		if !ok {
			return
		}
		c := a.cmds[key]
		if c == nil {
			return
		}
		if call := c.act; call != nil && (e.Name != call.name || (e.Digest != "" && e.Digest != call.digest)) {
			a.nondet(e, "activity "+call.name+" ("+call.id+") with another input")
		}
		a.pos++
		a.apply(c, e)
	}
}

// await blocks until done holds. It is the one wait of every durable call:
// replay resolves commands from history, the live run from activity results,
// timers and the mailbox (recv are the receives being waited for), recording
// each resolution. Both take the same steps in the same order:
// resolutions, then done, then a cancel already seen, then a linked child's
// failure, then a new cancel request, then park.
func (a *activation) await(done func() bool, recv []*command) error {
	defer a.sys.consumerBusy(a)
	// A new instance's mailbox is empty until something wakes it: a
	// receive-first workflow parks at once. Anything it is about to
	// commit (a subscription, say) may bring mail without a wake.
	scan := !a.quietMail || !a.pendingEmpty()
	for {
		if a.replaying() {
			a.consumeCompletions()
			if done() {
				return nil
			}
			if a.cancelled {
				return ErrCancelled
			}
			// A marker no call asked for (the Version call was dropped)
			// may hide a completion behind it: look again past it.
			before := a.pos
			a.skipMarkers()
			if a.pos != before || !a.replaying() {
				continue
			}
			e := a.hist.at(a.pos)
			switch e.Kind {
			case EventLinkedExit:
				a.pos++
				panic(a.linkedExitFrom(e))
			case EventCancelObserved:
				a.pos++
				a.cancelled = true
				return ErrCancelled
			}
			a.nondet(e, "a wait for "+waitingFor(a.order))
		}
		if a.stopped() {
			// A workflow that always finds mail never parks: it must
			// still stop when asked (it resumes from history). What it
			// recorded is committed first, as a park would: a retry
			// counted before the stop stays counted.
			a.flush()
			panic(stopPanic{reason: "stopping"})
		}
		a.poll()
		if done() {
			return nil
		}
		if a.cancelled {
			return ErrCancelled
		}
		if scan && (len(recv) > 0 || a.watchLinks()) {
			a.quietMail = false
			if len(recv) > 0 && !a.replayOnly {
				// Before the read: a message committed from now on wakes
				// this activation or another consumer.
				a.sys.consumerWaiting(a, recv)
			}
			if a.scanMail(recv) {
				a.sys.consumerBusy(a)
				continue
			}
		}
		a.recheckCancel()
		if a.cancelRequested() {
			a.record(persistence.Event{Kind: EventCancelObserved})
			a.cancelled = true
			a.cancelActivities()
			return ErrCancelled
		}
		if a.receiveTimeouts(recv) {
			continue
		}
		if len(recv) > 0 {
			a.sys.beforePark(a.id)
		}
		if scan = a.park(recv); scan {
			a.quietMail = false
		}
	}
}

func waitingFor(order []*command) string {
	if len(order) == 0 {
		return "nothing"
	}
	return order[0].key
}

// poll records what live work has finished: activity attempts, due timers,
// and back-offs that have passed (their next attempt starts).
func (a *activation) poll() {
	for drained := false; !drained; {
		select {
		case o := <-a.inbox:
			a.outcome(o)
		default:
			drained = true
		}
	}
	now := time.Now()
	for _, c := range append([]*command(nil), a.order...) {
		switch {
		case c.timer && !now.Before(c.due):
			a.record(persistence.Event{Kind: EventTimerFired, Name: c.key[2:]})
			a.hook(HookEvent{Kind: HookTimerFired, Name: c.key[2:], Duration: time.Since(c.due)})
			if c.stored && !a.dropPendingTimer(c.key[2:]) {
				a.pending.FireTimers = append(a.pending.FireTimers, c.key[2:])
			}
			a.apply(c, a.pending.History[len(a.pending.History)-1])
		case c.act != nil && c.act.ready(now) && !a.cancelRequested():
			a.startAttempt(c)
		}
	}
}

// nextDue is the earliest time poll has something to do.
func (a *activation) nextDue(recv []*command) time.Time {
	var t time.Time
	min := func(d time.Time) {
		if !d.IsZero() && (t.IsZero() || d.Before(t)) {
			t = d
		}
	}
	for _, c := range a.order {
		switch {
		case c.timer:
			min(c.due)
		case c.act != nil && c.act.started && !c.act.running:
			min(c.act.nextAt)
		}
	}
	for _, c := range recv {
		if c.recv.waiting {
			min(c.recv.due)
		}
	}
	return t
}

// dropPendingTimer removes timer id from the pending step's AddTimers and
// reports whether it was there: a timer that came due before the step that
// adds it committed has no row to fire (firing it would fail the step with
// ErrTimerGone, since a step fires timers before it adds them).
func (a *activation) dropPendingTimer(id string) bool {
	for i, t := range a.pending.AddTimers {
		if t.ID == id {
			// Copy: marks taken earlier may share the backing array.
			a.pending.AddTimers = append(a.pending.AddTimers[:i:i], a.pending.AddTimers[i+1:]...)
			return true
		}
	}
	return false
}

// park flushes and waits for something to happen: a wake (mail, timer,
// cancel), an activity result, or the next due time. It reports whether the
// mailbox may have changed. Shutdown and passivation unwind the goroutine.
func (a *activation) park(recv []*command) bool {
	a.flush()
	a.releaseSlot()
	var due <-chan time.Time
	if t := a.nextDue(recv); !t.IsZero() {
		tm := time.NewTimer(time.Until(t))
		defer tm.Stop()
		due = tm.C
	}
	idle := time.NewTimer(a.sys.cfg.PassivateAfter)
	defer idle.Stop()
	cancel := a.cancelCh
	if a.cancelled {
		cancel = nil
	}
	var handover chan struct{}
	if a.handover.Load() {
		handover = make(chan struct{})
		close(handover)
	}
	for {
		select {
		case <-a.wakeCh:
			return true
		case o := <-a.inbox:
			a.outcome(o)
			return false
		case <-due:
			return false
		case <-cancel:
			return false
		case <-a.stopCh:
			panic(stopPanic{reason: "stopping"})
		case <-idle.C:
			if a.inflight == 0 && !a.memoryBackoff() && a.passivate() {
				panic(stopPanic{reason: "passivated"})
			}
			idle.Reset(a.sys.cfg.PassivateAfter)
		case <-handover:
			// Work in flight finishes here first; its outcome parks again
			// and the hand-over is looked at then.
			handover = nil
			if a.inflight == 0 && !a.memoryBackoff() && a.passivate() {
				panic(stopPanic{reason: "handed over"})
			}
		}
	}
}

// memoryBackoff reports an activity waiting out a back-off that no durable
// timer covers: the activation must stay to start its next attempt.
func (a *activation) memoryBackoff() bool {
	for _, c := range a.order {
		if c.act != nil && c.act.started && !c.act.running && !c.act.durable {
			return true
		}
	}
	return false
}

// recheckCancel reads the cancel flag from the store after a remote wake:
// another process's cancel request arrives only that way.
func (a *activation) recheckCancel() {
	if a.replayOnly || !a.recheck.Swap(false) || a.cancelRequested() {
		return
	}
	inst, err := a.sys.store.Instance(a.sys.ctx, a.id)
	if err != nil {
		a.fail(err)
	}
	if inst.CancelReason != "" {
		a.cancelReason = inst.CancelReason
		a.deliver(sigCancel)
	}
}

func (a *activation) cancelRequested() bool {
	select {
	case <-a.cancelCh:
		return true
	default:
		return false
	}
}

// linkedExitFrom rebuilds the exit a recorded linked_exit event describes.
func (a *activation) linkedExitFrom(e persistence.Event) *linkedExit {
	d, _ := decodeWith[mailbox.Down](JSON{}, e.Payload)
	return &linkedExit{child: string(d.PID), reason: d.Error, down: d}
}

// mark is a point in the pending step to go back to.
type mark struct {
	step persistence.Step
	seq  int64
}

func (a *activation) mark() mark { return mark{step: a.pending, seq: a.seq} }

func (a *activation) restore(m mark) {
	for _, seq := range a.pending.Consume[len(m.step.Consume):] {
		delete(a.consumed, seq)
	}
	a.pending, a.seq = m.step, m.seq
}

func (a *activation) pendingEmpty() bool {
	p := &a.pending
	return len(p.History) == 0 && len(p.Consume) == 0 && len(p.Claim) == 0 && len(p.Send) == 0 && len(p.Subscribe) == 0 &&
		len(p.Unsubscribe) == 0 && len(p.AddTimers) == 0 && len(p.CancelTimers) == 0 && len(p.FireTimers) == 0 && p.Status == ""
}

// commit applies the pending step and returns the store's error.
func (a *activation) commit() error {
	_, err := a.commitResult()
	return err
}

// commitResult is commit, with the store's result.
func (a *activation) commitResult() (persistence.StepResult, error) { return a.commitStep(false) }

// commitStep commits what is pending; with lease, also a step with nothing
// else in it if that is what it takes to take the lease.
func (a *activation) commitStep(lease bool) (persistence.StepResult, error) {
	if a.pendingEmpty() && (!lease || a.leased.Load()) {
		return persistence.StepResult{}, nil
	}
	if a.replayOnly {
		panic(replayDone{})
	}
	a.quietMail = false
	step := a.pending
	step.Instance, step.Epoch = a.id, a.epoch
	take := a.withLease(&step)
	res, err := a.sys.store.Apply(a.sys.ctx, step)
	if err != nil {
		return res, err
	}
	a.tookLease(take)
	a.pending = persistence.Step{}
	clear(a.consumed)
	if len(step.Unsubscribe) > 0 || step.Status.Terminal() && len(a.prefetch) > 0 {
		// The step gave claimed messages back: before the wakes, so that
		// the consumers woken for them do not skip them as claimed here.
		a.sys.claims.forget(a)
	}
	a.sys.afterCommit(a.id, &step, res)
	return res, nil
}

// flush commits the pending step; a failure unwinds the workflow goroutine
// (lost lease: stop; anything else: crash and restart from history).
func (a *activation) flush() {
	if err := a.commit(); err != nil {
		a.fail(err)
	}
}

// withLease makes step take the lease if this activation does not hold it
// yet; it reports whether it did.
func (a *activation) withLease(step *persistence.Step) bool {
	if a.leased.Load() {
		return false
	}
	step.TakeLease, step.LeaseTTL = a.sys.cfg.NodeID, a.sys.cfg.LeaseTTL
	return true
}

// tookLease records that a step made by withLease committed: the lease is
// held, one epoch on.
func (a *activation) tookLease(take bool) {
	if take {
		a.epoch++
		a.inst.LeaseOwner, a.inst.LeaseEpoch = a.sys.cfg.NodeID, a.epoch
		a.leased.Store(true)
		a.releaseSlot()
	}
}

// releaseSlot gives back the System.fresh slot, if this activation holds one.
func (a *activation) releaseSlot() {
	if a.slot.CompareAndSwap(true, false) {
		<-a.sys.fresh
	}
}

// takeLease makes sure the lease is held before something runs outside the
// store (an activity, a compensation): it commits what is pending, and
// takes the lease with it, even if nothing is. On another node's lease the
// activation stops (see fail).
func (a *activation) takeLease() {
	if _, err := a.commitStep(true); err != nil {
		a.fail(err)
	}
}

func (a *activation) fail(err error) {
	// A lost lease, or an instance another node has already ended (it took
	// over while this one was slow), or one that another node took while
	// this one replayed it without the lease: this activation has nothing
	// left to do.
	if errors.Is(err, persistence.ErrFenced) || errors.Is(err, persistence.ErrInstanceDone) ||
		errors.Is(err, persistence.ErrLeaseHeld) || a.sys.ctx.Err() != nil {
		panic(stopPanic{reason: err.Error()})
	}
	panic(infraPanic{err: err})
}

// isUserError says whether a failed step was rejected for what the workflow
// asked (which the workflow gets back as an error) rather than for the
// store's state.
func isUserError(err error) bool {
	return errors.Is(err, persistence.ErrChannelMode) || errors.Is(err, persistence.ErrNotFound) ||
		errors.Is(err, persistence.ErrInstanceDone) || errors.Is(err, persistence.ErrInvalidRecord) ||
		errors.Is(err, ErrInvalidInput) || errors.Is(err, ErrIDConflict) || errors.Is(err, ErrPayloadTooLarge)
}

// effect records e with the changes add makes and commits at once, so that
// an error the store finds in the request (mode conflict, dead target)
// reaches the workflow; the failure is then recorded instead, for replay.
func (a *activation) effect(e persistence.Event, add func(*persistence.Step)) persistence.Event {
	m := a.mark()
	a.record(e)
	add(&a.pending)
	err := a.commit()
	if err == nil {
		return e
	}
	if !isUserError(err) {
		a.fail(err)
	}
	a.restore(m)
	e.Error = a.sys.recordError(err).marshal()
	return a.recordNow(e)
}

// eventError is the error a recorded event carries, rebuilt.
func (a *activation) eventError(e persistence.Event) error {
	return a.sys.rebuildError(parseErrorRecord(e.Error))
}

// cleanText makes error text storable: valid UTF-8 without NUL bytes (an
// error message can hold anything; the store takes only clean text).
func cleanText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
