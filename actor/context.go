package actor

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor/internal/journal"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// Context is a workflow's handle on its instance. Every durable call on it
// is recorded in history the first time and answered from history on replay,
// so workflow code must reach them in the same order every time.
type Context struct{ a *activation }

// PID is this instance's address.
func (c *Context) PID() PID { return PID(c.a.id) }

// InstanceID is this instance's ID.
func (c *Context) InstanceID() string { return c.a.id }

// Replaying reports whether the current call is answered from history.
func (c *Context) Replaying() bool { return c.a.j.Replaying() }

// Logger is the node's logger with the instance attached; it stays quiet
// while replaying so that a restart does not log everything twice.
func (c *Context) Logger() *slog.Logger {
	if c.Replaying() {
		return slog.New(slog.DiscardHandler)
	}
	return c.a.env.log.With("instance", c.a.id)
}

// Now is the current time, recorded on first execution and replayed after.
func (c *Context) Now() time.Time {
	a := c.a
	e := a.immediate(EventNow, "", "", func() persistence.Event {
		b, _ := a.env.now().MarshalText()
		return a.recordNow(persistence.Event{Kind: EventNow, Payload: b})
	})
	var t time.Time
	if err := t.UnmarshalText(e.Payload); err != nil {
		a.nondet(e, "now (unreadable time: "+err.Error()+")")
	}
	return t
}

// Sleep waits d durably: the wake-up survives restarts and holds no
// goroutine once the activation is passivated. It returns ErrCancelled if
// the instance is cancelled meanwhile.
func (c *Context) Sleep(d time.Duration) error {
	_, err := c.Timer(d).Get(c)
	return err
}

// SleepUntil waits until t. A time in the past returns at once (and is
// still recorded, so replay stays aligned).
func (c *Context) SleepUntil(t time.Time) error {
	_, err := c.timer(func(time.Time) time.Time { return t }).Get(c)
	return err
}

// Timer starts a durable timer of d and returns a Future that is ready when
// it fires, for Select against other work.
func (c *Context) Timer(d time.Duration) *Future[struct{}] {
	return c.timer(func(now time.Time) time.Time { return now.Add(d) })
}

type timerRecord struct {
	Due    time.Time `json:"due"`
	Stored bool      `json:"stored"` // a timer row exists until it fires
}

func (c *Context) timer(dueFn func(time.Time) time.Time) *Future[struct{}] {
	a := c.a
	id := a.nextID("sleep")
	if a.observeCancel() {
		return failedFuture[struct{}](a, ErrCancelled)
	}
	e := a.immediate(EventTimer, id, "", func() persistence.Event {
		now := a.env.now()
		rec := timerRecord{Due: dueFn(now)}
		rec.Stored = rec.Due.After(now)
		b, _ := json.Marshal(rec)
		if rec.Stored {
			a.pending.AddTimers = append(a.pending.AddTimers, persistence.Timer{ID: id, Due: rec.Due})
		}
		return a.recordNow(persistence.Event{Kind: EventTimer, Name: id, Payload: b})
	})
	var rec timerRecord
	if err := json.Unmarshal(e.Payload, &rec); err != nil {
		a.nondet(e, "timer (unreadable record: "+err.Error()+")")
	}
	cmd := newCommand(journal.TimerKey(id))
	cmd.timer, cmd.due, cmd.stored = true, rec.Due, rec.Stored
	cmd.Resolve = func(persistence.Event) (any, error) { return struct{}{}, nil }
	a.add(cmd)
	return &Future[struct{}]{a: a, c: cmd}
}

// SendOption configures a Send or Publish.
type SendOption func(*sendConfig)

type sendConfig struct {
	id       string
	metadata map[string]string
}

// WithMetadata attaches metadata to a message.
func WithMetadata(md map[string]string) SendOption {
	return func(c *sendConfig) { c.metadata = md }
}

// Send delivers msg to pid's mailbox. It fails with ErrNotFound or
// ErrInstanceDone if there is no such live instance.
func (c *Context) Send(pid PID, msg any, opts ...SendOption) error { return c.send("", pid, msg, opts) }

// SendOn delivers msg to pid on a direct channel.
func (c *Context) SendOn(channel string, pid PID, msg any, opts ...SendOption) error {
	if channel == "" {
		return fmt.Errorf("%w: SendOn needs a channel", ErrInvalidInput)
	}
	return c.send(channel, pid, msg, opts)
}

func (c *Context) send(channel string, pid PID, msg any, opts []SendOption) error {
	a := c.a
	var cfg sendConfig
	for _, o := range opts {
		o(&cfg)
	}
	if err := errors.Join(validID("target", string(pid)), validChannel(channel)); err != nil {
		return err
	}
	payload, err := a.env.encode(msg)
	if err != nil {
		return err
	}
	if err := a.env.checkPayload("message", payload); err != nil {
		return err
	}
	typ := a.env.messageType(msg)
	if err := checkNotReserved(channel, typ); err != nil {
		return err
	}
	var digs []string
	for _, t := range a.env.messageTypes(msg) {
		digs = append(digs, digest(append([]byte(channel+"\x00"+t+"\x00"), payload...)))
	}
	e := a.immediateOf(EventSent, string(pid), digs, func() persistence.Event {
		id, dedupe := cfg.id, cfg.id != ""
		if !dedupe {
			id = newMessageID()
		}
		return a.effect(persistence.Event{Kind: EventSent, Name: string(pid), Ref: id, Digest: digs[0]}, func(p *persistence.Step) {
			p.Send = append(p.Send, persistence.NewMessage{ID: id, Channel: channel, Target: string(pid), Sender: a.id,
				Type: typ, Payload: payload, Metadata: cfg.metadata, MustDeliver: true, Dedupe: dedupe})
		})
	})
	if e.Error == "" && !a.replaying() {
		a.hook(HookEvent{Kind: HookMessageSent, Name: string(pid), Ref: e.Ref})
	}
	return a.eventError(e)
}

// Publish puts msg on a channel and returns its message ID.
func (c *Context) Publish(channel string, msg any, opts ...SendOption) (string, error) {
	a := c.a
	if channel == "" {
		return "", fmt.Errorf("%w: Publish needs a channel", ErrInvalidInput)
	}
	var cfg sendConfig
	for _, o := range opts {
		o(&cfg)
	}
	if err := validID("channel", channel); err != nil {
		return "", err
	}
	payload, err := a.env.encode(msg)
	if err != nil {
		return "", err
	}
	if err := a.env.checkPayload("message", payload); err != nil {
		return "", err
	}
	typ := a.env.messageType(msg)
	if err := checkNotReserved(channel, typ); err != nil {
		return "", err
	}
	var digs []string
	for _, t := range a.env.messageTypes(msg) {
		digs = append(digs, digest(append([]byte(t+"\x00"), payload...)))
	}
	dig := digs[0]
	e := a.immediateOf(EventPublished, channel, digs, func() persistence.Event {
		id, dedupe := cfg.id, cfg.id != ""
		if !dedupe {
			id = newMessageID()
		}
		return a.effect(persistence.Event{Kind: EventPublished, Name: channel, Ref: id, Digest: dig}, func(p *persistence.Step) {
			p.Send = append(p.Send, persistence.NewMessage{ID: id, Channel: channel, Sender: a.id, Type: typ,
				Payload: payload, Metadata: cfg.metadata, Dedupe: dedupe})
		})
	})
	if err := a.eventError(e); err != nil {
		return "", err
	}
	return e.Ref, nil
}

// Subscribe starts receiving a channel's messages in the given mode. It fails
// with ErrChannelModeConflict if the channel has subscribers in another mode.
// A broadcast subscriber receives only messages published after it
// subscribed; a competing one also takes those already waiting in the
// channel's queue (kept for at most Config.QueueRetention). Options:
// mailbox.Prefetch, for a competing consumer to take several messages per
// claim. The runtime's channels (names starting with "$") are refused with
// ErrReserved: Monitor and Link subscribe to Downs.
func (c *Context) Subscribe(channel string, mode mailbox.Mode, opts ...mailbox.SubscribeOption) error {
	a := c.a
	if channel == "" || !mode.Valid() {
		return fmt.Errorf("%w: subscribe to %q in mode %q (want broadcast, competing or direct)", ErrInvalidInput, channel, mode)
	}
	spec := mailbox.NewSubscribeSpec(opts...)
	if spec.Prefetch < 0 || spec.Prefetch > mailbox.MaxPrefetch || spec.Prefetch > 1 && mode != mailbox.Competing {
		return fmt.Errorf("%w: prefetch %d on %q in mode %q (want 1 to %d, and the competing mode)", ErrInvalidInput,
			spec.Prefetch, channel, mode, mailbox.MaxPrefetch)
	}
	if err := validID("channel", channel); err != nil {
		return err
	}
	// The runtime's own channels ($down:…, monitors' Downs) are subscribed
	// by the runtime alone: a subscription of another mode would take the
	// Downs from the monitors, or refuse their subscriptions.
	if strings.HasPrefix(channel, persistence.SystemChannelPrefix) {
		return &reservedError{what: fmt.Sprintf("channel %q", channel)}
	}
	e := a.immediate(EventSubscribed, channel, digest([]byte(mode)), func() persistence.Event {
		return a.effect(persistence.Event{Kind: EventSubscribed, Name: channel, Payload: []byte(mode), Digest: digest([]byte(mode))},
			func(p *persistence.Step) {
				p.Subscribe = append(p.Subscribe, persistence.Subscription{Channel: channel, Mode: mode})
			})
	})
	err := a.eventError(e)
	if err == nil {
		a.noteCompeting(channel, mode == mailbox.Competing)
	}
	if err == nil && spec.Prefetch > 1 {
		// Not history: how this run takes its messages.
		a.prefetch[channel] = spec.Prefetch
	}
	return err
}

// Unsubscribe stops receiving a channel's messages; copies already in the
// mailbox stay.
func (c *Context) Unsubscribe(channel string) {
	a := c.a
	if validID("channel", channel) != nil {
		return // no such subscription can exist
	}
	a.immediate(EventUnsubscribed, channel, "", func() persistence.Event {
		a.pending.Unsubscribe = append(a.pending.Unsubscribe, channel)
		return a.recordNow(persistence.Event{Kind: EventUnsubscribed, Name: channel})
	})
	// Messages prefetched from it go back to its queue with the step.
	delete(a.prefetch, channel)
	a.dropPrefetched(channel)
	a.noteCompeting(channel, false)
}

// DefaultVersion is what Version returns where history was written by code
// that had no Version call there (instances started before the change).
const DefaultVersion = 0

// Version lets workflow code change while instances run the old code. Put
// it where the code changes, with a change ID, and branch on the result:
//
//	if ctx.Version("charge-before-reserve", 1) == 1 { …new order… } else { …old order… }
//
// An instance that reaches the call for the first time records maxVersion
// and gets it; replay returns what was recorded, or DefaultVersion for
// history written before the call existed. Once no instance can still be on
// the old branch, delete it and keep the call (or delete the call too:
// recorded markers that no call asks for are skipped).
func (c *Context) Version(changeID string, maxVersion int) int {
	a := c.a
	if err := validID("change ID", changeID); err != nil {
		panic(err) // a constant in the code: a programming error
	}
	v, found, err := a.j.Version(changeID)
	a.must(err)
	if found {
		return v
	}
	if a.replaying() {
		return DefaultVersion
	}
	a.record(persistence.Event{Kind: EventVersion, Name: changeID, Payload: []byte(strconv.Itoa(maxVersion))})
	return maxVersion
}

func newMessageID() string { return "m-" + randomHex(12) }

// Recur ends this run and continues as new with the same PID: history starts
// over with next as the input, while unconsumed mail and subscriptions carry
// over. Use it as the workflow's error: return zero, actor.Recur(ctx, next).
// next must have the workflow's input type; anything else is an
// ErrInvalidInput error (the run then fails instead of starting a run that
// cannot decode its input).
func Recur[In any](ctx *Context, next In) error {
	if want := ctx.a.def.inputType(); want != reflect.TypeFor[In]() {
		return fmt.Errorf("%w: Recur with a %s, but workflow %q takes %s", ErrInvalidInput, typeName[In](), ctx.a.def.Name(), want)
	}
	b, err := ctx.a.env.encode(next)
	if err != nil {
		return err
	}
	return &recurSignal{input: b}
}

func validChannel(channel string) error {
	if channel == "" {
		return nil
	}
	return validID("channel", channel)
}
