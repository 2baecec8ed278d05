package actor

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// PID is the durable address of an instance.
type PID = mailbox.PID

// Context is a workflow's handle on its instance. Every durable call on it
// is recorded in history the first time and answered from history on replay,
// so workflow code must reach them in the same order every time.
type Context struct{ a *activation }

// PID is this instance's address.
func (c *Context) PID() PID { return PID(c.a.id) }

// InstanceID is this instance's ID.
func (c *Context) InstanceID() string { return c.a.id }

// Replaying reports whether the current call is answered from history.
func (c *Context) Replaying() bool { return c.a.pos < len(c.a.history) }

// Logger is the node's logger with the instance attached; it stays quiet
// while replaying so that a restart does not log everything twice.
func (c *Context) Logger() *slog.Logger {
	if c.Replaying() {
		return slog.New(slog.DiscardHandler)
	}
	return c.a.sys.log.With("instance", c.a.id)
}

// Now is the current time, recorded on first execution and replayed after.
func (c *Context) Now() time.Time {
	a := c.a
	if e, ok := a.next(evNow, ""); ok {
		var t time.Time
		if err := t.UnmarshalText(e.Payload); err != nil {
			panic(infraPanic{err: fmt.Errorf("recorded time: %w", err)})
		}
		return t
	}
	t := time.Now()
	b, _ := t.MarshalText()
	a.record(persistence.Event{Kind: evNow, Payload: b})
	return t
}

// Sleep waits d durably: the wake-up survives restarts and holds no
// goroutine once the activation is passivated.
func (c *Context) Sleep(d time.Duration) error {
	return c.sleep(func(now time.Time) time.Time { return now.Add(d) })
}

// SleepUntil waits until t. A time in the past returns at once (and is
// still recorded, so replay stays aligned).
func (c *Context) SleepUntil(t time.Time) error {
	return c.sleep(func(time.Time) time.Time { return t })
}

type timerRecord struct {
	Due    time.Time `json:"due"`
	Stored bool      `json:"stored"` // a timer row exists until it fires
}

func (c *Context) sleep(dueFn func(time.Time) time.Time) error {
	a := c.a
	id := a.nextID("sleep")
	var rec timerRecord
	if e, ok := a.next(evTimer, id); ok {
		if err := json.Unmarshal(e.Payload, &rec); err != nil {
			panic(infraPanic{err: fmt.Errorf("recorded timer: %w", err)})
		}
	} else {
		if a.isCancelled() {
			return ErrCancelled
		}
		now := time.Now()
		rec = timerRecord{Due: dueFn(now)}
		rec.Stored = rec.Due.After(now)
		b, _ := json.Marshal(rec)
		a.record(persistence.Event{Kind: evTimer, Name: id, Payload: b})
		if rec.Stored {
			a.pending.AddTimers = append(a.pending.AddTimers, persistence.Timer{ID: id, Due: rec.Due})
		}
	}
	return a.awaitTimer(id, rec)
}

// awaitTimer waits for a recorded timer: from history on replay, else by
// parking until it is due and recording that it fired.
func (a *activation) awaitTimer(id string, rec timerRecord) error {
	if _, ok := a.next(evTimerFired, id); ok {
		return nil
	}
	for time.Now().Before(rec.Due) {
		if err := a.park(); err != nil {
			return err
		}
	}
	a.record(persistence.Event{Kind: evTimerFired, Name: id})
	a.hook(HookEvent{Kind: HookTimerFired, Name: id, Duration: time.Since(rec.Due)})
	if rec.Stored && !a.dropPendingTimer(id) {
		a.pending.FireTimers = append(a.pending.FireTimers, id)
	}
	return nil
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

// Send delivers msg to pid's mailbox. It fails with ErrNotFound or
// ErrInstanceDone if there is no such live instance.
func (c *Context) Send(pid PID, msg any) error { return c.send("", pid, msg) }

// SendOn delivers msg to pid on a direct channel.
func (c *Context) SendOn(channel string, pid PID, msg any) error {
	if channel == "" {
		return fmt.Errorf("%w: SendOn needs a channel", ErrInvalidInput)
	}
	return c.send(channel, pid, msg)
}

func (c *Context) send(channel string, pid PID, msg any) error {
	a := c.a
	if e, ok := a.next(evSent, string(pid)); ok {
		return recordedError(e.Error)
	}
	payload, err := encode(msg)
	if err != nil {
		return err
	}
	id := newMessageID()
	return a.effect(persistence.Event{Kind: evSent, Name: string(pid), Ref: id}, func(p *persistence.Step) {
		p.Send = append(p.Send, persistence.NewMessage{ID: id, Channel: channel, Target: string(pid), Sender: a.id,
			Payload: payload, MustDeliver: true})
	})
}

// Publish puts msg on a channel and returns its message ID.
func (c *Context) Publish(channel string, msg any) (string, error) {
	a := c.a
	if channel == "" {
		return "", fmt.Errorf("%w: Publish needs a channel", ErrInvalidInput)
	}
	if e, ok := a.next(evPublished, channel); ok {
		return e.Ref, recordedError(e.Error)
	}
	payload, err := encode(msg)
	if err != nil {
		return "", err
	}
	id := newMessageID()
	err = a.effect(persistence.Event{Kind: evPublished, Name: channel, Ref: id}, func(p *persistence.Step) {
		p.Send = append(p.Send, persistence.NewMessage{ID: id, Channel: channel, Sender: a.id, Payload: payload})
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

// Subscribe starts receiving a channel's messages in the given mode. It fails
// with ErrChannelModeConflict if the channel has subscribers in another mode.
func (c *Context) Subscribe(channel string, mode mailbox.Mode) error {
	a := c.a
	if channel == "" || !mode.Valid() {
		return fmt.Errorf("%w: subscribe to %q in mode %q (want broadcast, competing or direct)", ErrInvalidInput, channel, mode)
	}
	if e, ok := a.next(evSubscribed, channel); ok {
		return recordedError(e.Error)
	}
	return a.effect(persistence.Event{Kind: evSubscribed, Name: channel, Payload: []byte(mode)}, func(p *persistence.Step) {
		p.Subscribe = append(p.Subscribe, persistence.Subscription{Channel: channel, Mode: mode})
	})
}

// Unsubscribe stops receiving a channel's messages; copies already in the
// mailbox stay.
func (c *Context) Unsubscribe(channel string) {
	a := c.a
	if _, ok := a.next(evUnsubscribed, channel); ok {
		return
	}
	a.record(persistence.Event{Kind: evUnsubscribed, Name: channel})
	a.pending.Unsubscribe = append(a.pending.Unsubscribe, channel)
}

// effect records e with the changes add makes and commits at once, so that
// an error the store finds in the request (mode conflict, dead target)
// reaches the workflow; the failure is then recorded instead, for replay.
func (a *activation) effect(e persistence.Event, add func(*persistence.Step)) error {
	m := a.mark()
	a.record(e)
	add(&a.pending)
	err := a.commit()
	if err == nil {
		if e.Kind == evSent || e.Kind == evPublished {
			a.hook(HookEvent{Kind: HookMessageSent, Name: e.Name, Ref: e.Ref})
		}
		return nil
	}
	if !isUserError(err) {
		a.fail(err)
	}
	a.restore(m)
	e.Error = errorCode(err) + err.Error()
	a.record(e)
	return recordedError(e.Error)
}

// Recorded errors keep a code so that replay hands back an error that
// errors.Is still recognises.
var errorCodes = []struct {
	code string
	err  error
}{
	{"not_found: ", ErrNotFound},
	{"instance_done: ", ErrInstanceDone},
	{"mode_conflict: ", ErrChannelModeConflict},
	{"invalid: ", ErrInvalidInput},
	{"timeout: ", ErrTimeout},
	{"cancelled: ", ErrCancelled},
}

func errorCode(err error) string {
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	if errors.Is(err, persistence.ErrInvalidRecord) {
		return "invalid: "
	}
	return ""
}

type recordedErr struct {
	msg  string
	kind error
}

func (e *recordedErr) Error() string { return e.msg }
func (e *recordedErr) Unwrap() error { return e.kind }

func recordedError(s string) error {
	if s == "" {
		return nil
	}
	for _, c := range errorCodes {
		if rest, ok := strings.CutPrefix(s, c.code); ok {
			return &recordedErr{msg: rest, kind: c.err}
		}
	}
	return errors.New(s)
}

func newMessageID() string { return "m-" + randomHex(12) }

// Recur ends this run and continues as new with the same PID: history starts
// over with next as the input, while unconsumed mail and subscriptions carry
// over. Use it as the workflow's error: return zero, actor.Recur(ctx, next).
func Recur(ctx *Context, next any) error {
	b, err := encode(next)
	if err != nil {
		return err
	}
	return &recurSignal{input: b}
}
