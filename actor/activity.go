package actor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

// CallOption configures one activity call.
type CallOption func(*callConfig)

type callConfig struct{ id string }

// WithActivityID gives the call an explicit activity ID instead of the
// deterministic "name:N".
func WithActivityID(id string) CallOption { return func(c *callConfig) { c.id = id } }

// Run calls the activity from a workflow. The first time, it runs the
// function (with the retry policy and timeout) and records the outcome; on
// replay it returns the recorded outcome without running anything.
func (d *ActivityDef[In, Out]) Run(ctx *Context, in In, opts ...CallOption) (Out, error) {
	var zero Out
	a := ctx.a
	var cc callConfig
	for _, o := range opts {
		o(&cc)
	}
	id := a.nextID(d.name)
	if cc.id != "" {
		id = cc.id
	}
	// Retry waits recorded by earlier activations of this call.
	state := retryState{attempt: 1, start: time.Now()}
	for {
		e, ok := a.peek()
		if !ok || e.Kind != evRetry || e.Name != d.name || e.Ref != id {
			break
		}
		a.pos++
		var r retryRecord
		if err := json.Unmarshal(e.Payload, &r); err != nil {
			panic(infraPanic{err: fmt.Errorf("recorded retry of %s: %w", id, err)})
		}
		state = retryState{attempt: r.Attempt + 1, start: r.Start}
		if err := a.awaitTimer(r.Timer, r.timerRecord); err != nil {
			return zero, err
		}
	}
	if e, ok := a.next(evActivity, d.name); ok {
		if e.Ref != id {
			panic(&NonDeterminismError{Seq: e.Seq, Expected: "activity " + e.Ref, Got: "activity " + id})
		}
		if e.Error != "" {
			return zero, &ActivityError{Activity: d.name, ID: id, Message: e.Error}
		}
		out, err := decode[Out](e.Payload)
		if err != nil {
			panic(infraPanic{err: fmt.Errorf("recorded result of %s does not decode as %s: %w", id, typeName[Out](), err)})
		}
		d.completed(a, id, in, out)
		return out, nil
	}
	if a.isCancelled() {
		return zero, ErrCancelled
	}
	// What the workflow did before the call becomes visible before the call's
	// side effects start.
	a.flush()
	out, err := d.attempt(a, id, in, state)
	if errors.Is(err, ErrCancelled) {
		return zero, err
	}
	if a.stopped() {
		panic(stopPanic{reason: "stopping"})
	}
	if a.isCancelled() && errors.Is(err, context.Canceled) {
		return zero, ErrCancelled
	}
	ev := persistence.Event{Kind: evActivity, Name: d.name, Ref: id}
	if err != nil {
		ev.Error = err.Error()
	} else if ev.Payload, err = encode(out); err != nil {
		ev.Error = err.Error()
	}
	a.record(ev)
	a.flush()
	if ev.Error != "" {
		return zero, &ActivityError{Activity: d.name, ID: id, Message: ev.Error, Terminal: supervisor.IsTerminal(err)}
	}
	d.completed(a, id, in, out)
	return out, nil
}

// completed remembers a finished call of a compensable activity.
func (d *ActivityDef[In, Out]) completed(a *activation, id string, in In, out Out) {
	if d.compensation == nil {
		return
	}
	a.comps = append(a.comps, compensation{name: d.name, id: id, retry: d.retry,
		run: func(ctx context.Context) error { return d.compensation(ctx, in, out) }})
}

type retryState struct {
	attempt int
	start   time.Time
}

// retryRecord is a durable retry wait in history.
type retryRecord struct {
	timerRecord
	Attempt int       `json:"attempt"`
	Start   time.Time `json:"start"`
	Timer   string    `json:"timer"`
	Error   string    `json:"error"`
}

// attempt runs the function until it succeeds or the retry policy gives up.
// Short back-offs sleep in memory; long ones wait on a durable timer.
func (d *ActivityDef[In, Out]) attempt(a *activation, id string, in In, st retryState) (Out, error) {
	for n := st.attempt; ; n++ {
		out, err := d.once(a, id, in, n)
		if err == nil {
			return out, nil
		}
		if a.runCtx.Err() != nil || a.isCancelled() {
			return out, context.Canceled
		}
		wait, retry := d.retry.Next(n, time.Since(st.start), err)
		if !retry {
			if supervisor.IsTerminal(err) || n == 1 {
				return out, err
			}
			return out, &supervisor.RetryExhaustedError{Attempts: n, Last: err}
		}
		a.hook(HookEvent{Kind: HookActivityRetried, Name: d.name, Ref: id, Attempt: n, Err: err, Duration: wait})
		if wait >= a.sys.cfg.DurableBackoff {
			r := retryRecord{timerRecord: timerRecord{Due: time.Now().Add(wait), Stored: true}, Attempt: n, Start: st.start,
				Timer: "retry:" + id + ":" + strconv.Itoa(n), Error: err.Error()}
			b, _ := json.Marshal(r)
			a.record(persistence.Event{Kind: evRetry, Name: d.name, Ref: id, Payload: b})
			a.pending.AddTimers = append(a.pending.AddTimers, persistence.Timer{ID: r.Timer, Due: r.Due})
			if werr := a.awaitTimer(r.Timer, r.timerRecord); werr != nil {
				return out, werr
			}
			a.flush()
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-a.runCtx.Done():
			t.Stop()
			return out, context.Canceled
		case <-a.cancelCh:
			t.Stop()
			a.cancelled = true
			return out, context.Canceled
		}
	}
}

func (d *ActivityDef[In, Out]) once(a *activation, id string, in In, attempt int) (out Out, err error) {
	ctx, cancel := context.WithCancel(a.runCtx)
	if d.timeout > 0 {
		cancel()
		ctx, cancel = context.WithTimeout(a.runCtx, d.timeout)
	}
	defer cancel()
	a.mu.Lock()
	a.actCancel = cancel
	a.mu.Unlock()
	a.hook(HookEvent{Kind: HookActivityStarted, Name: d.name, Ref: id, Attempt: attempt})
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("activity %s panicked: %v", id, r)
		}
		a.mu.Lock()
		a.actCancel = nil
		a.mu.Unlock()
		a.hook(HookEvent{Kind: HookActivityFinished, Name: d.name, Ref: id, Attempt: attempt, Err: err, Duration: time.Since(start)})
	}()
	ctx = context.WithValue(ctx, activityInfoKey{}, ActivityInfo{InstanceID: a.id, ActivityID: id,
		IdempotencyKey: a.id + "/" + id, Attempt: attempt})
	return d.fn(ctx, in)
}
