package actor

import (
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nornlabs/norn/actor/internal/journal"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/norntype"
	"github.com/nornlabs/norn/persistence"
)

// EventKind names an entry of an instance's history.
type EventKind = norntype.EventKind

// History event kinds: norntype's, as untyped constants, so that they
// compare with HistoryEvent.Kind and with the store's Event.Kind alike
// (TestEventKindsMatchNorntype keeps the two lists equal).
const (
	EventStarted        = "started"         // the run's input; Ref names the codec
	EventActivity       = "activity"        // an activity's result or failure (Ref: call ID)
	EventActivityRetry  = "activity_retry"  // a failed attempt and the wait before the next
	EventNow            = "now"             // ctx.Now
	EventTimer          = "timer"           // a timer set (Name: timer ID, payload: due time)
	EventTimerFired     = "timer_fired"     // that timer fired
	EventReceived       = "received"        // a consumed message (Name: receive ID)
	EventReceiveWait    = "receive_wait"    // a receive with a timeout started waiting
	EventReceiveTimeout = "receive_timeout" // that receive timed out
	EventSent           = "sent"            // ctx.Send / SendOn (Name: target)
	EventPublished      = "published"       // ctx.Publish (Name: channel)
	EventSubscribed     = "subscribed"
	EventUnsubscribed   = "unsubscribed"
	EventCompensating   = "compensating" // the saga started undoing
	EventCompensation   = "compensation" // one compensation ran
	EventChildSpawned   = "child_spawned"
	EventLinkedExit     = "linked_exit" // a linked child's failure ended this instance
	EventMonitor        = "monitor"
	EventCancelSent     = "cancel_sent"
	EventCancelObserved = "cancel_observed" // the workflow saw its cancel request here
	EventVersion        = "version"         // ctx.Version's marker
	EventCompleted      = "completed"
	EventFailed         = "failed"
	EventCancelled      = "cancelled"
)

// command is one durable call that does not answer at once: an activity, a
// timer or a receive. The journal keeps its place and outcome; the fields
// here are the live work behind it.
type command struct {
	journal.Call
	// activity
	act *activityCall
	// timer
	due    time.Time
	stored bool
	timer  bool
	// receive
	recv *receiveCall
}

// newCommand makes a command whose journal call points back to it.
func newCommand(key string) *command {
	c := &command{Call: journal.Call{Key: key}}
	c.Data = c
	return c
}

// commandOf is the command behind a journal call.
func commandOf(c *journal.Call) *command { return c.Data.(*command) }

// replaying reports whether calls are still answered from history. The
// first time it finds history used up it starts the live work that replay
// deferred (activities in flight when the last activation ended); a
// side-effect-free replay ends there instead (see must).
func (a *activation) replaying() bool {
	if a.j.Replaying() {
		return true
	}
	first, err := a.j.GoLive()
	a.must(err)
	if first {
		a.startDeferred()
	}
	return false
}

// must unwinds the workflow goroutine on a journal error: a divergence
// stops the instance with a NonDeterminismError, the end of a replay-only
// history ends the replay, and a history read that failed crashes the
// activation (it is restarted, as after a failed commit).
func (a *activation) must(err error) {
	if err == nil {
		return
	}
	var d *journal.Divergence
	switch {
	case errors.As(err, &d):
		panic(&NonDeterminismError{Seq: d.Seq, Expected: d.Expected, Got: d.Got})
	case errors.Is(err, journal.ErrEnd):
		panic(replayDone{})
	}
	panic(infraPanic{err: err})
}

// nondet unwinds with the divergence of e from what the code asked for.
func (a *activation) nondet(e persistence.Event, got string) {
	a.must(journal.Diverged(e, got))
}

// immediate is the one record/replay path of calls that answer at once:
// on replay it checks the next event (kind, name, input digest) and returns
// it; live it lets fn record the event and returns what was recorded. The
// caller decodes its answer from the returned event either way.
func (a *activation) immediate(kind, name, dig string, fn func() persistence.Event) persistence.Event {
	return a.immediateOf(kind, name, []string{dig}, fn)
}

// immediateOf is immediate for a call whose input had other digests in
// earlier builds (a message type's earlier names): replay accepts any of
// digs, and a live run records digs[0].
func (a *activation) immediateOf(kind, name string, digs []string, fn func() persistence.Event) persistence.Event {
	a.must(a.j.SkipMarkers())
	if a.replaying() {
		var err error
		for _, dig := range digs {
			var e persistence.Event
			if e, err = a.j.Next(kind, name, dig); err == nil {
				return e
			}
		}
		a.must(err)
	}
	return fn()
}

// recordNow records e live and returns it as recorded (for immediate's fn).
func (a *activation) recordNow(e persistence.Event) persistence.Event { return a.record(e) }

// record appends a new event to the pending step and returns it.
func (a *activation) record(e persistence.Event) persistence.Event {
	e.Error = cleanText(e.Error)
	if e.At.IsZero() {
		e.At = time.Now()
	}
	return a.j.Record(e)
}

func (a *activation) nextID(name string) string { return a.j.NextID(name) }

// observeCancel reports whether the workflow is to see its cancel request
// now. Seeing it is recorded, so replay sees it at the same call.
func (a *activation) observeCancel() bool {
	if a.j.Cancelled() {
		return true
	}
	if a.replaying() {
		seen, decided, err := a.j.ReplayCancel()
		a.must(err)
		if decided {
			return seen
		}
		// Only version markers are left: from here on the run is live.
	}
	if a.cancelRequested() {
		a.j.ObserveCancel(persistence.Event{At: time.Now()})
		a.cancelActivities()
	}
	return a.j.Cancelled()
}

// add registers a pending command.
func (a *activation) add(c *command) { a.j.Add(&c.Call) }

// apply feeds a command its completion or progress event.
func (a *activation) apply(c *command, e persistence.Event) { a.must(a.j.Apply(&c.Call, e)) }

// pendingCommands lists the unresolved commands in issue order (a copy:
// callers may resolve them as they go).
func (a *activation) pendingCommands() []*command {
	calls := a.j.Calls()
	out := make([]*command, len(calls))
	for i, c := range calls {
		out[i] = commandOf(c)
	}
	return out
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
	woken := false // a scan follows a wake: it looks whatever the router says
	for {
		if a.replaying() {
			w, e, err := a.j.ReplayWait(done)
			a.must(err)
			switch w {
			case journal.WaitDone:
				return nil
			case journal.WaitCancelled:
				return ErrCancelled
			case journal.WaitLinkedExit:
				panic(a.linkedExitFrom(e))
			}
			continue // history is used up: on live
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
		if a.j.Cancelled() {
			return ErrCancelled
		}
		if scan && (len(recv) > 0 || a.watchLinks()) {
			a.quietMail = false
			if len(recv) > 0 {
				// Before the read: a message committed from now on wakes
				// this activation or another consumer.
				if quiet := a.sys.consumerWaiting(a, recv); !quiet || woken {
					a.fetch.owed = true
				}
			}
			if a.scanMail(recv) {
				a.sys.consumerBusy(a)
				continue
			}
		}
		a.recheckCancel()
		if a.cancelRequested() {
			a.j.ObserveCancel(persistence.Event{At: time.Now()})
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
			woken = woken || a.plainWake.Swap(false)
		}
	}
}

// deferTakesFor is how long a parked instance may leave the messages it
// took uncommitted, waiting for more to commit with them.
const deferTakesFor = 50 * time.Millisecond

// deferTakes reports whether a park may leave the pending step uncommitted
// for now (and notes since when): it holds nothing but the takes of
// messages that are this instance's already (sent to it, handed to it or
// moved into its mailbox by a claim), with what it waits for, while the
// activation holds its lease and runs nothing. A consumer that parks after
// each message would otherwise commit once per message; this way one
// commit records what it took within deferTakesFor, at most
// flushFetchedAt messages, and before it does anything else (a send, an
// activity, a timer, its end) or leaves the node. Nothing outside the
// instance sees a take before it commits: a crash meanwhile makes the next
// activation take the same messages again, from its mailbox, in the same
// order. A take that claims a message from a channel's queue is committed
// at once, since another consumer may claim it first.
func (a *activation) deferTakes() bool {
	p := &a.pending
	evs := a.j.Pending()
	if len(evs) == 0 || !a.leased.Load() || a.inflight > 0 || a.memoryBackoff() || len(a.consumed) >= flushFetchedAt ||
		p.Status != "" || len(p.Claim) > 0 || len(p.Send) > 0 || len(p.Subscribe) > 0 || len(p.Unsubscribe) > 0 ||
		len(p.AddTimers) > 0 || len(p.CancelTimers) > 0 || len(p.FireTimers) > 0 || len(p.Emit) > 0 ||
		p.ReleaseLease || p.ResetHistory || p.Reopen || p.IncRestarts {
		return false
	}
	for _, e := range evs {
		if e.Kind != EventReceived {
			return false
		}
	}
	now := time.Now()
	if a.deferredAt.IsZero() {
		a.deferredAt = now
	}
	return now.Before(a.deferredAt.Add(deferTakesFor))
}

// markParked makes the step a park commits say "waiting" when the
// instance waits for nothing but durable events (a message, a timer, a
// child's end: no activity attempt runs, no back-off sleeps in memory), so
// that every listing shows it waiting from the moment it parks, not only
// once it passivates. It stays waiting through the commits of what it does
// when woken (receive, send, spawn) until an activity starts (startAttempt
// makes it running). The status rides on the park's commit; it costs a
// write of its own only when nothing else is pending and the stored status
// says running (a new instance parking at once, a run whose last activity
// ended with its result committed). A woken passivated instance that finds
// nothing parks again without a write.
func (a *activation) markParked() {
	if a.pending.Status != "" || a.inflight > 0 || a.memoryBackoff() {
		return
	}
	switch a.inst.Status {
	case persistence.StatusRunning:
		a.pending.Status = persistence.StatusWaiting
	case persistence.StatusWaiting:
		// A step that takes the lease turns a waiting instance to
		// running unless it says otherwise.
		if !a.leased.Load() && !a.pendingEmpty() {
			a.pending.Status = persistence.StatusWaiting
		}
	}
}

// releaseAtPark makes the commit of the activation's first park give the
// lease up, on a node outside a cluster, when the park waits for durable
// events only (no activity attempt runs, no back-off sleeps in memory:
// markParked made it waiting) and the instance consumes no competing
// channel (the node's fetcher hands queued messages only to leased
// consumers). Most instances that park right after their start wait long
// (an approval, a timer of days): the park's write then holds everything
// their passivation would write, and the passivation writes nothing, which
// saves a row version and its index entries for every such instance; and
// a restart after a crash has no expired lease to wait for and no parked
// instance to activate again. The activation stays live; its next write
// takes the lease again (Step.TakeLease), fenced by the epoch like any
// wake of a passivated instance. Once woken it keeps the lease through its
// parks, as a chatty actor would otherwise give it up and take it again
// for every message. A cluster node keeps it: the lease of a live parked
// instance is how the node's death or departure hands the instance over
// at once, and how a node cut off from the others finds it lost it.
func (a *activation) releaseAtPark() {
	if a.env.cfg.Cluster != nil || a.rewoken || !a.leased.Load() || a.pendingEmpty() || a.inflight > 0 || a.memoryBackoff() ||
		len(a.competing) > 0 || len(a.prefetch) > 0 || a.j.Cancelled() {
		return
	}
	// The status the commit leaves: waiting, or nothing to release for.
	st := a.pending.Status
	if st == "" {
		st = a.inst.Status
	}
	if st != persistence.StatusWaiting {
		return
	}
	a.pending.ReleaseLease = true
}

// poll records what live work has finished: activity attempts, due timers,
// and back-offs that have passed (their next attempt starts).
func (a *activation) poll() {
	for drained := false; !drained; {
		select {
		case o := <-a.inbox:
			a.busy(-1)
			a.outcome(o)
		default:
			drained = true
		}
	}
	now := a.env.now()
	for _, c := range a.pendingCommands() {
		switch {
		case c.timer && !now.Before(c.due):
			id := c.Key[2:]
			e := a.record(persistence.Event{Kind: EventTimerFired, Name: id})
			// A fact once the firing commits: a fenced firing reports nothing.
			a.hookOnCommit(HookEvent{Kind: HookTimerFired, Name: id, Duration: e.At.Sub(c.due)})
			if c.stored && !a.dropPendingTimer(id) {
				a.pending.FireTimers = append(a.pending.FireTimers, id)
			}
			a.apply(c, e)
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
	for _, c := range a.j.Calls() {
		switch c := commandOf(c); {
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
	a.markParked()
	a.noteWaits(recv)
	defer func() { a.rewoken = true }()
	// own: the goroutine still counts as work (see below) because what it
	// took is not committed yet.
	var flushDue <-chan time.Time
	own := a.deferTakes()
	if own {
		t := time.NewTimer(time.Until(a.deferredAt.Add(deferTakesFor)))
		defer t.Stop()
		flushDue = t.C
	} else {
		a.releaseAtPark()
		a.flush()
	}
	// settle commits what a park deferred, before the activation leaves
	// (passivation, hand-over, stop) or once it has waited long enough.
	settle := func() {
		if own {
			a.flush()
			own = false
			flushDue = nil
			a.busy(-1)
		}
	}
	a.releaseSlot()
	var due <-chan struct{}
	if t := a.nextDue(recv); !t.IsZero() {
		tm := a.sys.newClockTimer(t.Sub(a.env.now()))
		defer tm.Stop()
		due = tm.C
	}
	idle := time.NewTimer(a.env.cfg.PassivateAfter)
	defer idle.Stop()
	cancel := a.cancelCh
	if a.j.Cancelled() {
		cancel = nil
	}
	var handover chan struct{}
	if a.handover.Load() {
		handover = make(chan struct{})
		close(handover)
	}
	// Parked: the goroutine no longer counts as work (see System.Idle),
	// unless it still has takes to commit (own). A wake, an outcome or a
	// due time carries a count of its own, which the goroutine takes over
	// (held); anything else counts it again.
	if !own {
		a.busy(-1)
	}
	held := false
	defer func() {
		switch {
		case !held && !own:
			a.busy(1)
		case held && own:
			a.busy(-1)
		}
	}()
	for {
		select {
		case <-flushDue:
			settle()
		case <-a.wakeCh:
			held = true
			a.preMail = nil // mail may have come since the load
			return true
		case q := <-a.queries:
			// A query sees what is committed: what another node
			// replaying the history would see too.
			settle()
			a.answerQuery(q)
		case o := <-a.inbox:
			held = true
			a.outcome(o)
			return false
		case <-due:
			held = true
			return false
		case <-cancel:
			return false
		case <-a.stopCh:
			settle()
			panic(stopPanic{reason: "stopping"})
		case <-idle.C:
			settle()
			a.busy(1)
			held = true
			if a.inflight == 0 && !a.memoryBackoff() && a.passivate() {
				panic(stopPanic{reason: "passivated"})
			}
			a.busy(-1)
			held = false
			idle.Reset(a.env.cfg.PassivateAfter)
		case <-handover:
			// Work in flight finishes here first; its outcome parks again
			// and the hand-over is looked at then.
			handover = nil
			settle()
			a.busy(1)
			held = true
			if a.inflight == 0 && !a.memoryBackoff() && a.passivate() {
				panic(stopPanic{reason: "handed over"})
			}
			a.busy(-1)
			held = false
		}
	}
}

// memoryBackoff reports an activity waiting out a back-off that no durable
// timer covers: the activation must stay to start its next attempt.
func (a *activation) memoryBackoff() bool {
	for _, c := range a.j.Calls() {
		if c := commandOf(c); c.act != nil && c.act.started && !c.act.running && !c.act.durable {
			return true
		}
	}
	return false
}

// recheckCancel reads the cancel flag from the store after a remote wake:
// another process's cancel request arrives only that way.
func (a *activation) recheckCancel() {
	if !a.recheck.Swap(false) || a.cancelRequested() {
		return
	}
	inst, err := a.sys.store.Instance(a.env.ctx, a.id)
	if err != nil {
		a.fail(err)
	}
	if inst.Status.Terminal() {
		// Ended from outside (System.Terminate): nothing left to do here.
		panic(stopPanic{reason: "ended elsewhere"})
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
	step  persistence.Step
	hist  journal.Mark
	hooks int
}

func (a *activation) mark() mark {
	return mark{step: a.pending, hist: a.j.Mark(), hooks: len(a.onCommit)}
}

func (a *activation) restore(m mark) {
	for _, seq := range a.pending.Consume[len(m.step.Consume):] {
		delete(a.consumed, seq)
	}
	a.pending = m.step
	a.j.Restore(m.hist)
	a.onCommit = a.onCommit[:m.hooks:m.hooks]
}

// discard drops what is pending: a step that will never commit, and the
// hooks that waited for it.
func (a *activation) discard() {
	a.pending = persistence.Step{}
	a.j.Discard()
	clear(a.consumed)
	a.onCommit = nil
}

// hookOnCommit reports e once the pending step commits (at once if nothing
// is pending): hooks report facts, and a step that is fenced or fails
// reports nothing.
func (a *activation) hookOnCommit(e HookEvent) {
	if a.pendingEmpty() {
		a.hook(e)
		return
	}
	a.onCommit = append(a.onCommit, e)
}

func (a *activation) pendingEmpty() bool {
	p := &a.pending
	return len(a.j.Pending()) == 0 && len(p.Consume) == 0 && len(p.Claim) == 0 && len(p.Send) == 0 && len(p.Subscribe) == 0 &&
		len(p.Unsubscribe) == 0 && len(p.AddTimers) == 0 && len(p.CancelTimers) == 0 && len(p.FireTimers) == 0 && p.Status == "" && !p.SetWaits
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
	step, take := a.nextStep()
	res, err := a.sys.store.Apply(a.env.ctx, step)
	if err != nil {
		return res, err
	}
	a.committed(step, res, take)
	return res, nil
}

// nextStep is the step that commits what is pending, and whether it takes
// the lease.
func (a *activation) nextStep() (persistence.Step, bool) {
	a.quietMail = false
	step := a.pending
	step.History = a.j.Pending()
	step.Instance, step.Epoch = a.id, a.epoch
	take := a.withLease(&step)
	if take && step.Status == "" && a.inst.Status == persistence.StatusWaiting {
		// Taking the lease would make the instance running; it is still
		// waiting until an activity starts (see markParked and
		// startAttempt), so the status costs no write between two parks.
		step.Status = persistence.StatusWaiting
	}
	return step, take
}

// committed updates the activation for step (made by nextStep), which
// committed with res.
func (a *activation) committed(step persistence.Step, res persistence.StepResult, take bool) {
	a.tookLease(take)
	if step.ReleaseLease {
		// See releaseAtPark: live, without the lease, at the same epoch.
		a.leased.Store(false)
		a.inst.LeaseOwner = ""
	}
	if step.Status != "" {
		a.inst.Status = step.Status
	}
	if step.SetWaits {
		a.waits = step.Waits
	}
	a.pending = persistence.Step{}
	a.deferredAt = time.Time{}
	a.j.Committed()
	clear(a.consumed)
	if len(step.Unsubscribe) > 0 || step.Status.Terminal() && len(a.prefetch) > 0 {
		// The step gave claimed messages back: before the wakes, so that
		// the consumers woken for them do not skip them as claimed here.
		a.sys.claims.Forget(a)
	}
	a.sys.afterCommit(a.id, &step, res)
	if len(a.onCommit) > 0 {
		hooks := a.onCommit
		a.onCommit = nil
		for _, e := range hooks {
			a.hook(e)
		}
	}
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
	step.TakeLease, step.LeaseTTL = a.env.cfg.NodeID, a.env.cfg.LeaseTTL
	return true
}

// tookLease records that a step made by withLease committed: the lease is
// held, one epoch on.
func (a *activation) tookLease(take bool) {
	if take {
		a.epoch++
		a.inst.LeaseOwner, a.inst.LeaseEpoch = a.env.cfg.NodeID, a.epoch
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
		errors.Is(err, persistence.ErrLeaseHeld) || a.env.ctx.Err() != nil {
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
	e = a.record(e)
	add(&a.pending)
	err := a.commit()
	if err == nil {
		return e
	}
	if !isUserError(err) {
		a.fail(err)
	}
	a.restore(m)
	e.Error = a.env.recordError(err).marshal()
	return a.recordNow(e)
}

// eventError is the error a recorded event carries, rebuilt.
func (a *activation) eventError(e persistence.Event) error {
	return a.env.rebuildError(parseErrorRecord(e.Error))
}

// cleanText makes error text storable: valid UTF-8 without NUL bytes (an
// error message can hold anything; the store takes only clean text).
func cleanText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
