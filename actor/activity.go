package actor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/nornlabs/norn/actor/internal/journal"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

// CallOption configures one activity call.
type CallOption func(*callConfig)

type callConfig struct{ id string }

// WithActivityID gives the call an explicit activity ID instead of the
// deterministic "name:N".
func WithActivityID(id string) CallOption { return func(c *callConfig) { c.id = id } }

// Run calls the activity from a workflow and waits for its outcome. The
// first time, it runs the function (with the retry policy and timeout) and
// records the outcome; on replay it returns the recorded outcome without
// running anything. Either way the result is decoded from what was
// recorded, so the first run and every replay see the same value.
func (d *ActivityDef[In, Out]) Run(ctx *Context, in In, opts ...CallOption) (Out, error) {
	return d.Go(ctx, in, opts...).Get(ctx)
}

// Go starts the activity and returns at once with a Future of its outcome,
// so that a workflow can run several activities at the same time and wait
// for all of them (WaitAll) or the first (Select).
func (d *ActivityDef[In, Out]) Go(ctx *Context, in In, opts ...CallOption) *Future[Out] {
	a := ctx.a
	var cc callConfig
	for _, o := range opts {
		o(&cc)
	}
	id := a.nextID(d.name)
	if cc.id != "" {
		id = cc.id
	}
	if err := validID("activity ID", id); err != nil {
		return failedFuture[Out](a, err)
	}
	if a.observeCancel() {
		return failedFuture[Out](a, ErrCancelled)
	}
	input, err := a.env.encode(in)
	if err != nil {
		return failedFuture[Out](a, err)
	}
	call := &activityCall{name: d.name, id: id, digest: digest(input), retry: d.retry,
		run:     func(ctx context.Context) (any, error) { return d.fn(ctx, in) },
		timeout: d.timeout}
	if d.txfn != nil {
		call.runTx = func(ctx context.Context, tx Tx) (any, error) { return d.txfn(ctx, tx, in) }
	}
	call.encode = func(v any) ([]byte, error) {
		b, err := a.env.encode(v.(Out))
		if err != nil {
			return nil, err
		}
		// What cannot be read back must not be recorded: replay would fail.
		if _, derr := decodeWith[Out](a.env.codec, b); derr != nil {
			return nil, fmt.Errorf("%w: result %T does not decode back: %v", ErrInvalidInput, v, derr)
		}
		return b, nil
	}
	c := newCommand(journal.ActivityKey(id))
	c.act, c.Name, c.Digest = call, d.name, call.digest
	c.Advance = call.advance
	c.Resolve = func(e persistence.Event) (any, error) {
		if e.Error != "" {
			return nil, a.eventError(e)
		}
		out, err := decodeWith[Out](a.env.codec, e.Payload)
		if err != nil {
			panic(&NonDeterminismError{Seq: e.Seq, Expected: "activity " + id + " result", Got: "a value that does not decode as " + typeName[Out]() + ": " + err.Error()})
		}
		if d.compensation != nil {
			a.comps = append(a.comps, compensation{name: d.name, id: id, retry: d.retry,
				run: func(ctx context.Context) error { return d.compensation(ctx, in, out) }})
		}
		return out, nil
	}
	a.add(c)
	f := &Future[Out]{a: a, c: c}
	if a.replaying() {
		// Nothing runs while replaying: the call's recorded events (if
		// any) are checked against it as replay reaches them (see
		// consumeCompletions) and resolve it.
		call.deferred = true
		a.deferred = append(a.deferred, c)
		return f
	}
	call.started = true
	a.startAttempt(c)
	return f
}

// activityCall is the live state of one activity call.
type activityCall struct {
	name, id string
	digest   string
	retry    supervisor.RetryPolicy
	timeout  time.Duration
	run      func(context.Context) (any, error)
	runTx    func(context.Context, Tx) (any, error) // a transactional activity's (see startTxAttempt)
	encode   func(any) ([]byte, error)

	deferred bool      // issued during replay; starts when replay ends
	started  bool      // attempts may run
	running  bool      // an attempt is running
	attempt  int       // attempts made (recorded)
	first    time.Time // when the first attempt started
	nextAt   time.Time // earliest start of the next attempt
	durable  bool      // a durable timer covers the wait for nextAt
	timerID  string
}

// retryRecord is a failed attempt in history.
type retryRecord struct {
	Attempt int       `json:"attempt"`
	Start   time.Time `json:"start"` // first attempt's start (for MaxDuration)
	Next    time.Time `json:"next"`  // next attempt not before
	Timer   string    `json:"timer,omitempty"`
	Error   string    `json:"error"`
}

// advance applies a recorded failed attempt.
func (c *activityCall) advance(e persistence.Event) error {
	var r retryRecord
	if err := json.Unmarshal(e.Payload, &r); err != nil {
		return &journal.Divergence{Seq: e.Seq, Expected: "a readable retry record", Got: err.Error()}
	}
	c.attempt, c.first, c.nextAt, c.timerID, c.durable = r.Attempt, r.Start, r.Next, r.Timer, r.Timer != ""
	return nil
}

// ready says whether the next attempt may start now.
func (c *activityCall) ready(now time.Time) bool {
	return c.started && !c.running && !now.Before(c.nextAt)
}

// startDeferred starts the activities that were issued while replaying and
// whose outcome history does not hold: they were in flight when the last
// activation ended.
func (a *activation) startDeferred() {
	for _, c := range a.deferred {
		if c.Done() {
			continue
		}
		c.act.started = true
		if c.act.ready(time.Now()) && !a.cancelRequested() {
			a.startAttempt(c)
		}
	}
	a.deferred = nil
}

// attemptResult is what an attempt's goroutine reports.
type attemptResult struct {
	c   *command
	n   int
	out any
	err error
}

// startAttempt runs the next attempt of c in a goroutine of its own. What
// the workflow recorded before is committed first, so that it is visible
// before the attempt's side effects start.
func (a *activation) startAttempt(c *command) {
	call := c.act
	if call.runTx != nil {
		a.startTxAttempt(c)
		return
	}
	if a.inst.Status == persistence.StatusWaiting && a.pending.Status == "" {
		a.pending.Status = persistence.StatusRunning // see markParked
	}
	a.takeLease()
	call.running = true
	if call.attempt == 0 {
		call.first = time.Now()
	}
	if call.durable {
		a.pending.CancelTimers = append(a.pending.CancelTimers, call.timerID)
		call.durable, call.timerID = false, ""
	}
	n := call.attempt + 1
	a.mu.Lock()
	runCtx := a.runCtx
	a.mu.Unlock()
	ctx, cancel := context.WithCancel(runCtx)
	a.mu.Lock()
	a.actCtl[c] = cancel
	a.mu.Unlock()
	a.inflight++
	a.runners.Add(1)
	go func() {
		defer a.runners.Done()
		defer cancel()
		out, err := a.attempt(ctx, call, n)
		select {
		case a.inbox <- attemptResult{c: c, n: n, out: out, err: err}:
		case <-runCtx.Done():
		}
	}()
}

// abandonGrace is how long an attempt whose context ended may take to
// return before it is abandoned (left running, reported through Hooks).
const abandonGrace = 500 * time.Millisecond

// attempt runs one attempt with its timeout. The function runs on a
// goroutine of its own so that one ignoring its context cannot hold the
// workflow: past the timeout (or a cancel, or shutdown) and a short grace it
// is abandoned.
func (a *activation) attempt(ctx context.Context, call *activityCall, n int) (any, error) {
	if call.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, call.timeout)
		defer cancel()
	}
	ctx = context.WithValue(ctx, activityInfoKey{}, ActivityInfo{InstanceID: a.id, ActivityID: call.id,
		IdempotencyKey: a.id + "/" + call.id, Attempt: n})
	ctx = a.activityHooks(ctx, HookEvent{Kind: HookActivityStarted, Name: call.name, Ref: call.id, Attempt: n})
	start := time.Now()
	type result struct {
		out any
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r = result{err: &PanicError{Value: fmt.Sprint(p), Stack: string(debug.Stack())}}
			}
			done <- r
		}()
		r.out, r.err = call.run(ctx)
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		grace := time.NewTimer(abandonGrace)
		select {
		case r = <-done:
			grace.Stop()
		case <-grace.C:
			r = result{err: ctx.Err()}
			a.hookCtx(ctx, HookEvent{Kind: HookActivityAbandoned, Name: call.name, Ref: call.id, Attempt: n, Err: ctx.Err(), Duration: time.Since(start)})
		}
	}
	if r.err != nil && call.timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) && isCtxErr(r.err) {
		r.err = fmt.Errorf("%w after %v: %w", ErrActivityTimeout, call.timeout, r.err)
	}
	a.hookCtx(ctx, HookEvent{Kind: HookActivityFinished, Name: call.name, Ref: call.id, Attempt: n, Err: r.err, Duration: time.Since(start)})
	return r.out, r.err
}

// outcome records what an attempt reported: the result, the failure, or
// the failed attempt and the wait before the next one.
func (a *activation) outcome(o attemptResult) {
	c, call := o.c, o.c.act
	a.inflight--
	call.running = false
	a.mu.Lock()
	delete(a.actCtl, c)
	a.mu.Unlock()
	call.attempt = o.n
	if c.Done() || a.runCtx.Err() != nil {
		return
	}
	if o.err != nil && isCtxErr(o.err) && !errors.Is(o.err, ErrActivityTimeout) && a.cancelRequested() {
		// Cut short by the instance's cancel: not an outcome of the call.
		call.started = false
		return
	}
	ev := persistence.Event{Kind: EventActivity, Name: call.name, Ref: call.id, Digest: call.digest}
	err := o.err
	if err == nil {
		b, eerr := call.encode(o.out)
		if eerr == nil {
			ev.Payload = b
			a.apply(c, a.record(ev))
			// Commit the result now: work done is not redone if the
			// workflow crashes before its next wait.
			a.flush()
			return
		}
		err = supervisor.Terminal(eerr)
	}
	wait, retry := call.retry.Next(o.n, time.Since(call.first), err)
	if retry && a.env.ctx.Err() == nil {
		r := retryRecord{Attempt: o.n, Start: call.first, Next: time.Now().Add(wait), Error: oneLine(err.Error())}
		if wait >= a.env.cfg.DurableBackoff {
			r.Timer = "retry:" + call.id + ":" + strconv.Itoa(o.n)
			a.pending.AddTimers = append(a.pending.AddTimers, persistence.Timer{ID: r.Timer, Due: r.Next})
		}
		b, _ := json.Marshal(r)
		a.apply(c, a.record(persistence.Event{Kind: EventActivityRetry, Name: call.name, Ref: call.id, Digest: call.digest, Payload: b}))
		// Reported once the retry is recorded for good: a retry that is
		// fenced away is made again by the activation that took over.
		a.hookOnCommit(HookEvent{Kind: HookActivityRetried, Name: call.name, Ref: call.id, Attempt: o.n, Err: err, Duration: wait})
		return
	}
	rec := a.env.recordError(err)
	ae := &errorRecord{Kind: "activity", Activity: call.name, ID: call.id, Type: rec.Type, Message: rec.Message,
		Code: rec.Code, Details: rec.Details, Terminal: supervisor.IsTerminal(err), Attempts: o.n,
		Timeout: errors.Is(err, ErrActivityTimeout)}
	var pe *PanicError
	if errors.As(err, &pe) {
		ae.Stack = pe.Stack
		ae.Message = pe.Error()
	}
	ev.Error = ae.marshal()
	a.apply(c, a.record(ev))
	a.hookOnCommit(HookEvent{Kind: HookActivityFailed, Name: call.name, Ref: call.id, Attempt: o.n, Err: err})
	a.flush()
}
