package actor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

type signal int

const (
	sigWake signal = iota
	sigCancel
	sigStop
)

// Event kinds recorded in history.
const (
	evStarted        = "started"
	evActivity       = "activity"
	evRetry          = "activity_retry"
	evNow            = "now"
	evTimer          = "timer"
	evTimerFired     = "timer_fired"
	evReceived       = "received"
	evReceiveWait    = "receive_wait"
	evReceiveTimeout = "receive_timeout"
	evSent           = "sent"
	evPublished      = "published"
	evSubscribed     = "subscribed"
	evUnsubscribed   = "unsubscribed"
	evCompensating   = "compensating"
	evChild          = "child_spawned"
	evLinkedExit     = "linked_exit"
	evMonitor        = "monitor"
	evMonitorDown    = "monitor_down"
	evCancelSent     = "cancel_sent"
	evCompensation   = "compensation"
	evCompleted      = "completed"
	evFailed         = "failed"
	evCancelled      = "cancelled"
)

// stopPanic unwinds a workflow goroutine whose activation must end without
// touching the instance (shutdown, passivation, lost lease).
type stopPanic struct{ reason string }

// infraPanic unwinds a workflow goroutine after a store failure.
type infraPanic struct{ err error }

// activation is the live actor of one instance on this node: a protoactor
// actor (shell) that receives signals, plus the goroutine running the
// workflow function, which replays history and then carries on live.
type activation struct {
	sys   *System
	id    string
	def   Definition
	inst  persistence.Instance
	epoch int64

	history []persistence.Event // recorded events to replay
	pos     int                 // next event to replay
	seq     int64               // seq of the next event to record

	pending  persistence.Step // recorded but not yet committed
	consumed map[int64]bool   // messages consumed by pending
	counters map[string]int   // deterministic call IDs per name
	spread   int              // rotates the pick among competing messages

	wakeCh   chan struct{}
	stopCh   chan struct{}
	cancelCh chan struct{}
	stopOne  sync.Once
	cancOne  sync.Once

	mu        sync.Mutex // guards actCancel
	actCancel context.CancelFunc
	runCtx    context.Context
	runStop   context.CancelFunc

	cancelled    bool // a cancel has been observed by the workflow
	cancelReason string

	// guarded by sys.mu
	passivating bool
	rewake      bool

	comps     []compensation // completed calls of compensable activities, in order
	children  []string       // linked children spawned so far (replayed too)
	trapExits bool           // a failed child's Down is a message, not our end

	pid   *protoactor.PID
	ctx   *Context
	final persistence.Instance // the ended instance, once finish committed
}

func newActivation(s *System, def Definition, inst persistence.Instance, hist []persistence.Event) *activation {
	a := &activation{
		sys: s, id: inst.ID, def: def, inst: inst, epoch: inst.LeaseEpoch,
		history: hist, seq: int64(len(hist)),
		consumed: map[int64]bool{}, counters: map[string]int{},
		wakeCh: make(chan struct{}, 1), stopCh: make(chan struct{}), cancelCh: make(chan struct{}),
	}
	a.runCtx, a.runStop = context.WithCancel(s.ctx)
	if inst.CancelReason != "" {
		a.cancelReason = inst.CancelReason
		a.cancOne.Do(func() { close(a.cancelCh) })
	}
	a.ctx = &Context{a: a}
	return a
}

// signal sends sig through the activation's actor.
func (a *activation) signal(sig signal) {
	if a.pid == nil {
		a.deliver(sig)
		return
	}
	a.sys.actors.Root.Send(a.pid, sig)
}

// deliver hands a signal to the workflow goroutine (called by the shell actor).
func (a *activation) deliver(sig signal) {
	switch sig {
	case sigWake:
		select {
		case a.wakeCh <- struct{}{}:
		default:
		}
	case sigCancel:
		a.cancOne.Do(func() { close(a.cancelCh) })
		a.cancelActivity()
	case sigStop:
		a.stop()
	}
}

func (a *activation) stop() {
	a.stopOne.Do(func() {
		close(a.stopCh)
		a.runStop()
	})
}

func (a *activation) cancelActivity() {
	a.mu.Lock()
	if a.actCancel != nil {
		a.actCancel()
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

// isCancelled reports (and latches) whether a cancel reached the activation.
func (a *activation) isCancelled() bool {
	if a.cancelled {
		return true
	}
	select {
	case <-a.cancelCh:
		a.cancelled = true
	default:
	}
	return a.cancelled
}

type outcome int

const (
	outDone outcome = iota
	outStopped
	outNonDeterminism
	outCrash
)

// run is the workflow goroutine.
func (a *activation) run() {
	finished := false
	defer func() { a.sys.ended(a, finished) }()
	defer a.runStop()
	out, oc, crash, infra, werr := a.execute()
	switch oc {
	case outStopped:
		return
	case outNonDeterminism:
		finished = a.finish(persistence.StatusFailed, nil, werr.Error())
	case outCrash:
		finished = a.crashed(crash, infra)
	case outDone:
		switch {
		case werr == nil:
			finished = a.finish(persistence.StatusCompleted, out, "")
		case a.cancelled:
			finished = a.finish(persistence.StatusCancelled, nil, a.reason())
		default:
			finished = a.finish(persistence.StatusFailed, nil, werr.Error())
		}
	}
}

func (a *activation) reason() string {
	if a.cancelReason != "" {
		return a.cancelReason
	}
	if in, err := a.sys.store.Instance(a.sys.ctx, a.id); err == nil && in.CancelReason != "" {
		return in.CancelReason
	}
	return "cancelled"
}

// execute runs the workflow function, turning the control-flow panics back
// into outcomes.
func (a *activation) execute() (out []byte, oc outcome, crash string, infra bool, werr error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		switch p := r.(type) {
		case stopPanic:
			oc = outStopped
		case *NonDeterminismError:
			oc, werr = outNonDeterminism, p
		case *linkedExit:
			oc, werr = outDone, p
		case infraPanic:
			oc, crash, infra = outCrash, "store: "+p.err.Error(), true
		default:
			oc, crash = outCrash, fmt.Sprintf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	if len(a.history) == 0 || a.history[0].Kind != evStarted {
		panic(&NonDeterminismError{Expected: "started", Got: "history without a start event"})
	}
	for {
		a.pos = 1
		out, werr = a.def.run(a.ctx, a.history[0].Payload)
		var r *recurSignal
		if errors.As(werr, &r) {
			a.recur(r.input)
			continue
		}
		if werr != nil && len(a.comps) > 0 {
			a.compensate()
		}
		return out, outDone, "", false, werr
	}
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
	if _, ok := a.next(evCompensating, ""); !ok {
		a.record(persistence.Event{Kind: evCompensating})
		a.pending.Status = persistence.StatusCompensating
		a.flush()
	}
	for i := len(a.comps) - 1; i >= 0; i-- {
		c := a.comps[i]
		if e, ok := a.next(evCompensation, c.name); ok {
			if e.Ref != c.id {
				panic(&NonDeterminismError{Seq: e.Seq, Expected: "compensation " + e.Ref, Got: "compensation " + c.id})
			}
			continue
		}
		err := a.runCompensation(c)
		if a.stopped() {
			panic(stopPanic{reason: "stopping"})
		}
		ev := persistence.Event{Kind: evCompensation, Name: c.name, Ref: c.id}
		if err != nil {
			ev.Error = err.Error()
			a.sys.log.Warn("compensation failed", "instance", a.id, "activity", c.id, "err", err)
		}
		a.record(ev)
		a.flush()
	}
}

func (a *activation) runCompensation(c compensation) error {
	start := time.Now()
	for n := 1; ; n++ {
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("compensation of %s panicked: %v", c.id, r)
				}
			}()
			ctx := context.WithValue(a.runCtx, activityInfoKey{}, ActivityInfo{InstanceID: a.id, ActivityID: "compensate:" + c.id,
				IdempotencyKey: a.id + "/compensate:" + c.id, Attempt: n})
			return c.run(ctx)
		}()
		if err == nil || a.runCtx.Err() != nil {
			return err
		}
		wait, retry := c.retry.Next(n, time.Since(start), err)
		if !retry {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-a.runCtx.Done():
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
	step := a.pending
	step.History = []persistence.Event{{Seq: 0, Kind: evStarted, Name: a.def.Name(), Payload: input, At: time.Now()}}
	step.ResetHistory = true
	a.pending = step
	a.seq = 0
	a.flush()
	a.history = step.History
	a.pos, a.seq = 1, 1
	a.comps = nil
	clear(a.counters)
}

// finish commits the instance's end. It reports whether the end is durable.
func (a *activation) finish(status persistence.Status, out []byte, msg string) bool {
	kind := map[persistence.Status]string{persistence.StatusCompleted: evCompleted,
		persistence.StatusFailed: evFailed, persistence.StatusCancelled: evCancelled}[status]
	// Linked children end with their parent. Asked before the end commits,
	// so that a crash in between asks again on the next try.
	for _, child := range a.children {
		err := a.sys.Cancel(a.sys.ctx, PID(child), "parent "+a.id+" ended")
		if err != nil && !errors.Is(err, persistence.ErrInstanceDone) && !errors.Is(err, persistence.ErrNotFound) {
			a.crashed("store: "+err.Error(), true)
			return false
		}
	}
	a.record(persistence.Event{Kind: kind, Name: a.def.Name(), Payload: out, Error: msg})
	a.pending.Status, a.pending.Output, a.pending.Error = status, out, msg
	// The parent and the monitors learn of our end in the same transaction
	// (a monitor channel without subscribers drops the message).
	down, _ := json.Marshal(mailbox.Down{PID: PID(a.id), Status: string(status), Error: msg, Output: out})
	a.pending.Send = append(a.pending.Send, persistence.NewMessage{ID: newMessageID(), Channel: mailbox.MonitorChannel(PID(a.id)),
		Sender: a.id, Payload: down})
	if a.inst.Parent != "" {
		a.pending.Send = append(a.pending.Send, persistence.NewMessage{ID: newMessageID(), Channel: mailbox.DownChannel,
			Target: a.inst.Parent, Sender: a.id, Payload: down})
	}
	if err := a.commit(); err != nil {
		if !errors.Is(err, persistence.ErrFenced) && a.sys.ctx.Err() == nil {
			a.crashed("store: "+err.Error(), true)
		}
		return false
	}
	a.final = a.inst
	a.final.Status, a.final.Output, a.final.Error = status, out, msg
	he := HookEvent{Kind: HookInstanceCompleted}
	switch status {
	case persistence.StatusFailed:
		he = HookEvent{Kind: HookInstanceFailed, Err: errors.New(msg)}
	case persistence.StatusCancelled:
		he = HookEvent{Kind: HookInstanceCancelled, Err: errors.New(msg)}
	}
	a.hook(he)
	a.final.LeaseOwner, a.final.HistoryLen, a.final.UpdatedAt = "", a.seq, time.Now()
	if status == persistence.StatusFailed {
		a.sys.log.Warn("instance failed", "instance", a.id, "workflow", a.def.Name(), "err", msg)
	}
	return true
}

// crashed handles a panic or a store failure. A panic restarts the
// activation from history after a back-off, within the workflow's restart
// budget; past it, the instance fails. A store failure (store down, lost
// connection) is not the workflow's fault: it is retried until the store
// answers again, whatever the budget.
//
// It reports whether the instance ended (budget exhausted, failure committed).
func (a *activation) crashed(reason string, infra bool) bool {
	s := a.sys
	if s.ctx.Err() != nil {
		return false
	}
	delay := storeRetryDelay()
	if !infra {
		var ok bool
		if delay, ok = s.restartDecision(a.id, a.def); !ok {
			s.log.Error("instance exhausted its restart budget", "instance", a.id, "reason", reason)
			a.seq -= int64(len(a.pending.History))
			a.pending = persistence.Step{}
			clear(a.consumed)
			return a.finish(persistence.StatusFailed, nil, "restart budget exhausted: "+reason)
		}
	}
	s.log.Warn("activation crashed; restarting from history", "instance", a.id, "in", delay, "reason", reason)
	a.hook(HookEvent{Kind: HookInstanceRestarted, Err: errors.New(reason), Duration: delay})
	_, _ = s.store.Apply(s.ctx, persistence.Step{Instance: a.id, Epoch: a.epoch, IncRestarts: !infra, ReleaseLease: true})
	s.wakeLater(a.id, delay)
	return false
}

// storeRetryDelay spaces attempts to reach a failing store.
func storeRetryDelay() time.Duration {
	return time.Duration(float64(time.Second) * (0.75 + 0.5*mrand.Float64()))
}

// next returns the next recorded event if replay is still going on; a
// recorded event of another kind or name is a NonDeterminismError.
func (a *activation) next(kind, name string) (persistence.Event, bool) {
	if a.pos >= len(a.history) {
		return persistence.Event{}, false
	}
	e := a.history[a.pos]
	if e.Kind != kind || e.Name != name {
		panic(&NonDeterminismError{Seq: e.Seq, Expected: e.Kind + " " + e.Name, Got: kind + " " + name})
	}
	a.pos++
	return e, true
}

// peek returns the next recorded event without consuming it.
func (a *activation) peek() (persistence.Event, bool) {
	if a.pos >= len(a.history) {
		return persistence.Event{}, false
	}
	return a.history[a.pos], true
}

func (a *activation) nextID(name string) string {
	a.counters[name]++
	return name + ":" + strconv.Itoa(a.counters[name])
}

// record appends a new event to the pending step.
func (a *activation) record(e persistence.Event) {
	e.Seq = a.seq
	if e.At.IsZero() {
		e.At = time.Now()
	}
	a.seq++
	a.pending.History = append(a.pending.History, e)
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
	return len(p.History) == 0 && len(p.Consume) == 0 && len(p.Send) == 0 && len(p.Subscribe) == 0 &&
		len(p.Unsubscribe) == 0 && len(p.AddTimers) == 0 && len(p.CancelTimers) == 0 && len(p.FireTimers) == 0 && p.Status == ""
}

// commit applies the pending step and returns the store's error.
func (a *activation) commit() error {
	if a.pendingEmpty() {
		return nil
	}
	step := a.pending
	step.Instance, step.Epoch = a.id, a.epoch
	res, err := a.sys.store.Apply(a.sys.ctx, step)
	if err != nil {
		return err
	}
	a.pending = persistence.Step{}
	clear(a.consumed)
	a.sys.afterCommit(a.id, &step, res)
	return nil
}

// flush commits the pending step; a failure unwinds the workflow goroutine
// (lost lease: stop; anything else: crash and restart from history).
func (a *activation) flush() {
	if err := a.commit(); err != nil {
		a.fail(err)
	}
}

func (a *activation) fail(err error) {
	if errors.Is(err, persistence.ErrFenced) || a.sys.ctx.Err() != nil {
		panic(stopPanic{reason: err.Error()})
	}
	panic(infraPanic{err: err})
}

// isUserError says whether a failed step was rejected for what the workflow
// asked (which the workflow gets back as an error) rather than for the
// store's state.
func isUserError(err error) bool {
	return errors.Is(err, persistence.ErrChannelMode) || errors.Is(err, persistence.ErrNotFound) ||
		errors.Is(err, persistence.ErrInstanceDone) || errors.Is(err, persistence.ErrInvalidRecord)
}

// park flushes and waits for a wake-up. It returns ErrCancelled once the
// instance is cancelled; shutdown and passivation unwind the goroutine.
func (a *activation) park() error {
	a.flush()
	if a.isCancelled() {
		return ErrCancelled
	}
	idle := time.NewTimer(a.sys.cfg.PassivateAfter)
	defer idle.Stop()
	for {
		select {
		case <-a.wakeCh:
			return nil
		case <-a.cancelCh:
			a.cancelled = true
			return ErrCancelled
		case <-a.stopCh:
			panic(stopPanic{reason: "stopping"})
		case <-idle.C:
			if a.passivate() {
				panic(stopPanic{reason: "passivated"})
			}
			idle.Reset(a.sys.cfg.PassivateAfter)
		}
	}
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
		a.deliver(sigWake)
		return false
	case <-a.cancelCh: // park's select may have picked the idle timer over it
		s.mu.Unlock()
		return false
	default:
	}
	a.passivating = true
	s.mu.Unlock()
	_, err := s.store.Apply(s.ctx, persistence.Step{Instance: a.id, Epoch: a.epoch, Status: persistence.StatusWaiting, ReleaseLease: true})
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
