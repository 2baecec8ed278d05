package actor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nornlabs/norn/actor/internal/journal"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

type signal int

const (
	sigWake signal = iota
	sigCancel
	sigStop
	// sigHand is the wake of a hand-off (see hand.go): the activation looks
	// at what it was handed, and owes no look at the queue for it.
	sigHand
)

// stopPanic unwinds a workflow goroutine whose activation must end without
// touching the instance (shutdown, passivation, lost lease).
type stopPanic struct{ reason string }

// infraPanic unwinds a workflow goroutine after a store failure.
type infraPanic struct{ err error }

// replayDone unwinds a side-effect-free replay (Replay) once history is used up.
type replayDone struct{}

// workflowPanic carries a panic of the workflow function with its stack.
type workflowPanic struct{ err *PanicError }

// activation is the live actor of one instance on this node: signals
// (wake, cancel, stop, hand-over) delivered to the goroutine running the
// workflow function, which replays history and then carries on live.
type activation struct {
	// env is what the workflow's code needs (codec, errors, hooks); sys
	// is the runtime, nil in a Replay.
	env   *env
	sys   *System
	id    string
	def   Definition
	inst  persistence.Instance
	epoch int64

	// j replays the run's history and records its new events; the
	// pending step carries its other changes.
	j        *journal.Journal
	pending  persistence.Step // recorded but not yet committed (History: j.Pending)
	consumed map[int64]bool   // messages consumed by pending
	// onCommit are hooks of what pending records, reported once it commits.
	onCommit []HookEvent
	// deferredAt is when a park first left pending uncommitted (see
	// deferTakes); zero once it commits.
	deferredAt time.Time
	spread     int            // rotates the pick among competing messages
	prefetch   map[string]int // competing channels subscribed with Prefetch: how many to take
	// prefetched are messages this run claimed into its own mailbox
	// (Prefetch) and has not received yet, in arrival order.
	prefetched []persistence.Message
	// competing are the channels it consumes competitively (rebuilt by
	// replay); fetch is how it takes their messages (see fetchQueued).
	competing map[string]bool
	fetch     fetchState
	// hand holds what publishes on this node handed to it (see hand.go).
	hand handSlot

	deferred []*command // activities to start once replay ends
	inbox    chan attemptResult
	inflight int            // activity attempts running
	runners  sync.WaitGroup // their goroutines

	wakeCh chan struct{}
	// plainWake: a wake other than a hand-off's was delivered since the
	// last park that received one.
	plainWake atomic.Bool
	stopCh    chan struct{}
	cancelCh  chan struct{}
	stopOne   sync.Once
	cancOne   sync.Once

	mu      sync.Mutex // guards actCancels
	actCtl  map[*command]context.CancelFunc
	runCtx  context.Context
	runStop context.CancelFunc

	cancelReason string
	recheck      atomic.Bool // a remote wake: the cancel flag may have changed in the store
	// handover: the instance's bucket moved to another node; the
	// activation passivates at its next park with no work in flight, and
	// its end wakes the new owner.
	handover atomic.Bool
	lost     atomic.Bool // the lease was taken over (see leaseLost)
	// leased: this activation holds the instance's lease at epoch. A
	// passivated instance that is woken is read and replayed without one,
	// and its first write takes it (Step.TakeLease), so that waking costs
	// no commit of its own; an activity or compensation starts only once
	// it is held (takeLease).
	leased atomic.Bool
	// slot: this activation holds one of System.fresh, from its start
	// without the lease until it takes it, parks or ends.
	slot atomic.Bool
	// finishing: the end step, which gives the lease back, is in flight or
	// committed, so a renewal that misses the lease must not call it lost.
	finishing atomic.Bool
	// rewoken: the activation has been woken from a park at least once
	// (workflow goroutine only). Until then its parks give the lease up
	// (see releaseAtPark).
	rewoken bool

	// guarded by sys.mu
	passivating bool
	rewake      bool

	// registered: the activation waits on its receives in System.compete
	// (workflow goroutine only).
	registered bool

	comps []compensation   // completed calls of compensable activities, in order
	links supervisor.Links // linked children spawned so far (replayed too), and whether exits are trapped

	// quietMail: the instance was created by this activation's node and
	// the activation has neither committed nor been woken since, so its
	// mailbox is empty: every message that reaches it from now on wakes it
	// (the start in progress records wakes until the activation is
	// registered). Its first wait parks without reading the store (see
	// await). Workflow goroutine only, once launched.
	quietMail bool
	// preMail is the mailbox as read with the instance and its history
	// when the activation was loaded (persistence.Loader): the first
	// mailbox scan uses it instead of reading the store, unless a wake
	// came first (then the mailbox may hold more). Workflow goroutine
	// only, once launched.
	preMail *preMail
	// mailSeen is the last message the latest mailbox scan read; waits is
	// what the instance's row says it is parked on (see noteWaits).
	mailSeen int64
	waits    []byte
	// parked is what the activation waits for in its current park (nil
	// while it runs): Inspect reads it from other goroutines.
	parked atomic.Pointer[parkedOn]

	locals map[any]any // Context.SetLocal: rebuilt by replay

	finishRetry time.Duration // the end failed to commit: execute again after this

	ctx   *Context
	final persistence.Instance // the ended instance, once finish committed

	// queries are answered while parked (System.Query); exited is closed
	// when the workflow goroutine has ended, and answers no more.
	queries chan *queryAsk
	exited  chan struct{}
}

func newActivation(s *System, def Definition, inst persistence.Instance, hist journal.History) *activation {
	return newActivationIn(&s.env, s, def, inst, hist)
}

// newActivationIn makes an activation in v; s is nil for a Replay, which
// never reaches the runtime (its journal ends the run before any call would
// go live).
func newActivationIn(v *env, s *System, def Definition, inst persistence.Instance, hist journal.History) *activation {
	a := &activation{
		env: v, sys: s, id: inst.ID, def: def,
		wakeCh: make(chan struct{}, 1), stopCh: make(chan struct{}), cancelCh: make(chan struct{}),
		inbox: make(chan attemptResult, 16), actCtl: map[*command]context.CancelFunc{},
		queries: make(chan *queryAsk), exited: make(chan struct{}),
	}
	a.ctx = &Context{a: a}
	a.waits = inst.Waits
	a.j = journal.New(hist)
	a.reset(inst, hist)
	return a
}

// reset makes a fresh start from inst and its history (also after a crash:
// a restart replays history in the same activation).
func (a *activation) reset(inst persistence.Instance, hist journal.History) {
	base := a.env.ctx
	if base == nil {
		base = context.Background()
	}
	a.newRun(base)
	a.inst, a.epoch = inst, inst.LeaseEpoch
	a.leased.Store(inst.LeaseOwner == a.env.cfg.NodeID)
	a.j.Reset(hist)
	a.pending, a.onCommit = persistence.Step{}, nil
	a.consumed = map[int64]bool{}
	a.prefetch, a.prefetched = map[string]int{}, nil
	a.competing, a.fetch = nil, fetchState{}
	a.hand.take() // a new run reads its mailbox, where they are
	a.deferred, a.inflight = nil, 0
	a.comps, a.links = nil, supervisor.Links{}
	a.locals = nil
	a.quietMail, a.preMail = false, nil
	if inst.CancelReason != "" {
		a.cancelReason = inst.CancelReason
		a.cancOne.Do(func() { close(a.cancelCh) })
	}
}

// signal hands sig to the activation (see deliver).
func (a *activation) signal(sig signal) { a.deliver(sig) }

// deliver hands a signal to the workflow goroutine. It never blocks: a
// wake is a flag (one pending wake stands for any number), a cancel and a
// stop close channels once.
func (a *activation) deliver(sig signal) {
	switch sig {
	case sigWake, sigHand:
		if sig == sigWake {
			a.plainWake.Store(true) // before the send: park reads it after
		}
		a.busy(1) // carried by the wake until park receives it (see Idle)
		select {
		case a.wakeCh <- struct{}{}:
		default:
			a.busy(-1)
		}
	case sigCancel:
		a.cancOne.Do(func() { close(a.cancelCh) })
		a.cancelActivities()
	case sigStop:
		a.stop()
	}
}

// leaseLost stops an activation whose lease another node took; it reports
// whether this call stopped it.
func (a *activation) leaseLost() bool {
	if !a.lost.CompareAndSwap(false, true) {
		return false
	}
	a.hook(HookEvent{Kind: HookInstanceLost})
	a.stop()
	return true
}

func (a *activation) stop() {
	a.stopOne.Do(func() {
		close(a.stopCh)
		a.stopRun()
	})
}

// newRun starts a new context for activity attempts (a fresh execution).
// Attempts of the previous one must have ended.
func (a *activation) newRun(base context.Context) {
	ctx, cancel := context.WithCancel(base)
	a.mu.Lock()
	a.runCtx, a.runStop = ctx, cancel
	if a.stopped() {
		cancel()
	}
	a.mu.Unlock()
}

// stopRun cancels the current execution's attempts.
func (a *activation) stopRun() {
	a.mu.Lock()
	stop := a.runStop
	a.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// cancelActivities cancels the contexts of running activity attempts.
func (a *activation) cancelActivities() {
	a.mu.Lock()
	for _, cancel := range a.actCtl {
		cancel()
	}
	a.mu.Unlock()
}

func (a *activation) stopped() bool {
	select {
	case <-a.stopCh:
		return true
	default:
		return false
	}
}

type outcome int

const (
	outDone outcome = iota
	outStopped
	outNonDeterminism
	outCrash
	outReplayed
)

// run is the workflow goroutine: it executes the workflow and, after a
// crash, waits out the restart back-off and executes it again from history.
func (a *activation) run() {
	finished := false
	defer close(a.exited)
	defer func() { a.sys.ended(a, finished) }()
	defer func() { a.stopRun() }()
	for {
		out, oc, crash, infra, werr := a.execute()
		a.endAttempts()
		switch oc {
		case outStopped, outReplayed:
			return
		case outNonDeterminism:
			finished = a.finish(persistence.StatusFailed, nil, werr)
		case outCrash:
			// Wakes for queued messages are not held through the back-off.
			a.registered = false
			a.sys.passOnWakes(a)
			delay, again, done := a.crashed(crash, infra)
			finished = done
			if again && a.restartAfter(delay) {
				continue
			}
		case outDone:
			switch {
			case werr == nil:
				finished = a.finish(persistence.StatusCompleted, out, nil)
			case a.j.Cancelled():
				finished = a.finish(persistence.StatusCancelled, nil, &recordedErr{msg: a.reason(), kind: ErrCancelled})
			default:
				finished = a.finish(persistence.StatusFailed, nil, werr)
			}
		}
		// An end that could not be committed (the store failed) is tried
		// again from history, or the instance would sit under our lease.
		if !finished && a.finishRetry > 0 {
			d := a.finishRetry
			a.finishRetry = 0
			if a.restartAfter(d) {
				continue
			}
		}
		return
	}
}

// endAttempts stops the activity attempts of an execution that ended.
func (a *activation) endAttempts() {
	a.stopRun()
	a.runners.Wait()
	a.mu.Lock()
	clear(a.actCtl)
	a.mu.Unlock()
	for drained := false; !drained; {
		select {
		case <-a.inbox:
			a.busy(-1)
		default:
			drained = true
		}
	}
}

// restartAfter waits out a restart back-off, then reloads the instance and
// its history for a fresh execution. It reports false if the activation
// must end instead (stopping, lost lease, instance gone).
func (a *activation) restartAfter(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-a.stopCh:
		return false
	}
	s := a.sys
	for {
		inst, err := s.store.AcquireLease(s.ctx, a.id, s.cfg.NodeID, s.cfg.LeaseTTL)
		var hist journal.History
		if err == nil {
			hist, err = readHist(s.ctx, s.store, a.id, inst.HistoryLen, s.cfg.HistoryPage)
		}
		if err == nil {
			a.reset(inst, hist)
			a.hook(HookEvent{Kind: HookInstanceActivated})
			return true
		}
		if errors.Is(err, persistence.ErrLeaseHeld) || errors.Is(err, persistence.ErrInstanceDone) ||
			errors.Is(err, persistence.ErrNotFound) || s.ctx.Err() != nil {
			return false
		}
		s.log.Warn("restart: store unavailable; retrying", "instance", a.id, "err", err)
		t.Reset(storeRetryDelay())
		select {
		case <-t.C:
		case <-a.stopCh:
			return false
		}
	}
}

func (a *activation) reason() string {
	if a.cancelReason != "" {
		return a.cancelReason
	}
	if a.sys != nil { // a Replay has no store to read
		if in, err := a.sys.store.Instance(a.env.ctx, a.id); err == nil && in.CancelReason != "" {
			return in.CancelReason
		}
	}
	return "cancelled"
}

// execute runs the workflow function, turning the control-flow panics back
// into outcomes.
func (a *activation) execute() (out []byte, oc outcome, crash error, infra bool, werr error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		switch p := r.(type) {
		case stopPanic:
			oc = outStopped
		case replayDone:
			oc = outReplayed
		case *NonDeterminismError:
			oc, werr = outNonDeterminism, p
		case infraPanic:
			oc, crash, infra = outCrash, fmt.Errorf("store: %w", p.err), transient(p.err)
		case workflowPanic:
			oc, crash = outCrash, p.err
		default:
			oc, crash = outCrash, &PanicError{Value: fmt.Sprint(r), Stack: string(debug.Stack())}
		}
	}()
	for {
		start, err := a.j.Start(a.env.codec.Name())
		a.must(err)
		out, werr = a.runWorkflow(start.Payload)
		var r *recurSignal
		if errors.As(werr, &r) {
			a.recur(r.input)
			continue
		}
		if werr != nil && len(a.comps) > 0 {
			a.compensate()
		}
		return out, outDone, nil, false, werr
	}
}

// runWorkflow calls the workflow function once. A linked child's failure
// (which unwinds from any wait) becomes its error, so that the saga's
// compensations still run; a panic keeps the stack where it happened.
func (a *activation) runWorkflow(input []byte) (out []byte, err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		switch p := r.(type) {
		case *linkedExit:
			err = p
		case stopPanic, replayDone, *NonDeterminismError, infraPanic, workflowPanic:
			panic(r)
		default:
			panic(workflowPanic{err: &PanicError{Value: fmt.Sprint(r), Stack: string(debug.Stack())}})
		}
	}()
	return a.def.run(a.ctx, input)
}

// transient says whether a store error may go away by itself (connection,
// busy, closing), so that retrying without a budget is right. Anything else
// the store rejects will be rejected again: it counts against the restart
// budget, so the instance ends with the error instead of looping.
func transient(err error) bool {
	return !errors.Is(err, persistence.ErrInvalidRecord) && !errors.Is(err, ErrInvalidInput) &&
		!errors.Is(err, persistence.ErrHistoryGap)
}

// compensation undoes one completed activity call (saga).
type compensation struct {
	name, id string
	run      func(ctx context.Context) error
	retry    supervisor.RetryPolicy
}

// compensate runs the compensations of completed calls in reverse order,
// each recorded, so that a crash part-way resumes without re-running the
// finished ones. A compensation that still fails after its retries is
// recorded as failed and the rest still run.
func (a *activation) compensate() {
	a.cancelActivities()
	a.immediate(EventCompensating, "", "", func() persistence.Event {
		e := a.recordNow(persistence.Event{Kind: EventCompensating})
		a.pending.Status = persistence.StatusCompensating
		a.flush()
		return e
	})
	for i := len(a.comps) - 1; i >= 0; i-- {
		c := a.comps[i]
		e := a.immediate(EventCompensation, c.name, "", func() persistence.Event {
			err := a.runCompensation(c)
			if a.stopped() {
				panic(stopPanic{reason: "stopping"})
			}
			ev := persistence.Event{Kind: EventCompensation, Name: c.name, Ref: c.id}
			if err != nil {
				ev.Error = a.env.recordError(err).marshal()
			}
			e := a.recordNow(ev)
			if err != nil {
				a.hookOnCommit(HookEvent{Kind: HookCompensationFailed, Name: c.name, Ref: c.id, Err: err})
			}
			a.flush()
			return e
		})
		if e.Ref != c.id {
			a.nondet(e, "compensation of "+c.id)
		}
	}
}

func (a *activation) runCompensation(c compensation) error {
	a.takeLease()
	start := time.Now()
	for n := 1; ; n++ {
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = &PanicError{Value: fmt.Sprint(r), Stack: string(debug.Stack())}
				}
			}()
			ctx := context.WithValue(a.env.ctx, activityInfoKey{}, ActivityInfo{InstanceID: a.id, ActivityID: "compensate:" + c.id,
				IdempotencyKey: a.id + "/compensate:" + c.id, Attempt: n})
			return c.run(ctx)
		}()
		if err == nil || a.env.ctx.Err() != nil {
			return err
		}
		wait, retry := c.retry.Next(n, time.Since(start), err)
		if !retry {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-a.stopCh:
			t.Stop()
			return err
		}
	}
}

// recurSignal is the error Recur returns; the activation turns it into a new run.
type recurSignal struct{ input []byte }

func (r *recurSignal) Error() string { return "norn: continue as new" }

// recur ends the current run and starts the next with the same PID: history
// starts over with the new input; mailbox and subscriptions carry over.
func (a *activation) recur(input []byte) {
	if a.replaying() {
		// The previous run's history is gone once its recur committed, so
		// replay never reaches here; be safe anyway.
		a.must(a.j.Unexpected("continue as new"))
	}
	a.cancelActivities()
	a.endAttempts()
	a.newRun(a.env.ctx)
	a.inflight = 0
	// What the old run recorded and did not commit is dropped: its history
	// is gone with the step that starts the new one.
	// Hooks waiting for the pending step still fire when it commits: what
	// it consumes or fires is done for good, though the new run's history
	// starts over.
	a.j.NewRun(persistence.Event{Kind: EventStarted, Name: a.def.Name(), Ref: a.env.codec.Name(), Payload: input, At: time.Now()})
	a.pending.ResetHistory = true
	a.flush()
	a.inst.Run++
	a.comps, a.deferred = nil, nil
}

// finish commits the instance's end. It reports whether the end is durable.
func (a *activation) finish(status persistence.Status, out []byte, werr error) bool {
	s := a.sys
	kind := map[persistence.Status]string{persistence.StatusCompleted: EventCompleted,
		persistence.StatusFailed: EventFailed, persistence.StatusCancelled: EventCancelled}[status]
	// Linked children end with their parent. Asked before the end commits,
	// so that a crash in between asks again on the next try.
	for _, child := range a.links.Children {
		err := s.Cancel(s.ctx, PID(child), "parent "+a.id+" ended")
		if err != nil && !errors.Is(err, persistence.ErrInstanceDone) && !errors.Is(err, persistence.ErrNotFound) {
			a.finishRetry, _, _ = a.crashed(fmt.Errorf("store: %w", err), true)
			return false
		}
	}
	var msg, recJSON string
	if werr != nil {
		rec := s.recordError(werr)
		msg = oneLine(werr.Error())
		var le *linkedExit
		if errors.As(werr, &le) {
			rec = &errorRecord{Kind: "error", Message: msg}
		}
		recJSON = rec.marshal()
		if status == persistence.StatusFailed {
			out = []byte(recJSON)
		}
	}
	a.record(persistence.Event{Kind: kind, Name: a.def.Name(), Payload: out, Error: recJSON})
	msg = cleanText(msg)
	a.pending.Status, a.pending.Output, a.pending.Error = status, out, msg
	// The parent and the monitors learn of our end in the same transaction
	// (a monitor channel without subscribers drops the message).
	a.pending.Send = append(a.pending.Send, downMessages(a.id, a.inst.Parent, status, msg, out)...)
	a.finishing.Store(true)
	if err := a.commit(); err != nil {
		a.finishing.Store(false)
		if !errors.Is(err, persistence.ErrFenced) && !errors.Is(err, persistence.ErrInstanceDone) && s.ctx.Err() == nil {
			a.finishRetry, _, _ = a.crashed(fmt.Errorf("store: %w", err), true)
			return false
		}
		return false
	}
	a.final = a.inst
	a.final.Status, a.final.Output, a.final.Error = status, out, msg
	he := HookEvent{Kind: HookInstanceCompleted}
	switch status {
	case persistence.StatusFailed:
		he = HookEvent{Kind: HookInstanceFailed, Err: werr}
	case persistence.StatusCancelled:
		he = HookEvent{Kind: HookInstanceCancelled, Err: werr}
	}
	a.hook(he)
	a.final.LeaseOwner, a.final.HistoryLen, a.final.UpdatedAt = "", a.j.Seq(), time.Now()
	return true
}

// crashed handles a panic or a store failure. A panic restarts the
// instance from history after a back-off, within the workflow's restart
// budget (intensity over a period, counted in the store so that it holds
// across processes); past it, the instance fails. A transient store failure
// (store down, lost connection) is not the workflow's fault: it is retried
// until the store answers again, whatever the budget.
//
// It returns the back-off, whether to execute again, and whether the
// instance ended.
func (a *activation) crashed(reason error, infra bool) (time.Duration, bool, bool) {
	s := a.sys
	if s.ctx.Err() != nil {
		return 0, false, false
	}
	a.discard()
	if infra {
		delay := storeRetryDelay()
		s.log.Warn("store failure; restarting from history", "instance", a.id, "in", delay, "err", oneLine(reason.Error()))
		a.hook(HookEvent{Kind: HookInstanceRestarted, Err: reason, Duration: delay})
		return delay, true, false
	}
	delay, log, ok := a.def.restartPolicy().Restart(a.inst.RecentRestarts, time.Now())
	if !ok {
		s.log.Info("instance exhausted its restart budget", "instance", a.id, "reason", oneLine(reason.Error()))
		return 0, false, a.finish(persistence.StatusFailed, nil, &budgetError{cause: reason})
	}
	step := persistence.Step{Instance: a.id, Epoch: a.epoch, IncRestarts: true, RestartLog: log}
	take := a.withLease(&step)
	if _, err := s.store.Apply(s.ctx, step); err != nil {
		if errors.Is(err, persistence.ErrFenced) || errors.Is(err, persistence.ErrLeaseHeld) || s.ctx.Err() != nil {
			return 0, false, false
		}
		return storeRetryDelay(), true, false
	}
	a.tookLease(take)
	a.inst.RecentRestarts = log
	a.hook(HookEvent{Kind: HookInstanceRestarted, Err: reason, Duration: delay})
	return delay, true, false
}

// budgetError ends an instance whose restart budget ran out.
type budgetError struct{ cause error }

func (e *budgetError) Error() string { return "restart budget exhausted: " + oneLine(e.cause.Error()) }
func (e *budgetError) Unwrap() error { return e.cause }

// storeRetryDelay spaces attempts to reach a failing store.
func storeRetryDelay() time.Duration {
	return time.Duration(float64(time.Second) * (0.75 + 0.5*mrand.Float64()))
}

// passivate gives the instance back to the store (status waiting, no lease)
// so that the activation can end. Wake-ups that arrive meanwhile are kept
// (rewake) and start a new activation.
func (a *activation) passivate() bool {
	s := a.sys
	s.mu.Lock()
	select {
	case <-a.wakeCh:
		s.mu.Unlock()
		a.busy(-1)
		a.deliver(sigWake)
		return false
	case <-a.cancelCh: // park's select may have picked the idle timer over it
		s.mu.Unlock()
		return false
	default:
	}
	a.passivating = true
	s.mu.Unlock()
	// One that holds no lease (it never took it since it was woken, or
	// gave it up at its first park) left the instance waiting and free;
	// it writes only what it waits for, if its row says something else
	// (mail it looked at since), under the epoch it read, which any take
	// of the lease since fences.
	var err error
	var step persistence.Step
	if p := a.parked.Load(); p != nil && p.Hist == a.j.Len() {
		// What it waits for, for readers without the workflow's code.
		if w := p.encode(); !bytes.Equal(w, a.waits) {
			step.Waits, step.SetWaits = w, true
		}
	}
	if leased := a.leased.Load(); leased || step.SetWaits {
		step.Instance, step.Epoch = a.id, a.epoch
		if leased {
			step.Status, step.ReleaseLease = persistence.StatusWaiting, true
		}
		_, err = s.store.Apply(s.ctx, step)
	}
	if err == nil || errors.Is(err, persistence.ErrFenced) {
		a.hook(HookEvent{Kind: HookInstancePassivated})
		return true
	}
	s.log.Warn("passivation failed; staying active", "instance", a.id, "err", err)
	s.mu.Lock()
	a.passivating = false
	rewake := a.rewake
	a.rewake = false
	s.mu.Unlock()
	if rewake {
		a.deliver(sigWake)
	}
	return false
}
