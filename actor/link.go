package actor

import (
	"errors"
	"fmt"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

// SpawnChild starts a linked child instance (its ID is derived from the
// parent's, so the call is idempotent across replays). When the child ends,
// a mailbox.Down arrives on mailbox.DownChannel; if the child fails and the
// parent does not trap exits, the parent fails too (at its next wait, with
// its saga compensations); when the parent ends, its still-running children
// are cancelled.
func SpawnChild[In, Out any](ctx *Context, wf *WorkflowDef[In, Out], in In) (PID, error) {
	a := ctx.a
	call := a.nextID("child")
	if a.observeCancel() {
		return "", ErrCancelled
	}
	input, err := a.env.encode(in)
	if err != nil {
		return "", err
	}
	e := a.immediate(EventChildSpawned, wf.Name(), digest(input), func() persistence.Event {
		def := Definition(wf)
		ev := persistence.Event{Kind: EventChildSpawned, Name: wf.Name(), Digest: digest(input)}
		if err := a.sys.checkRegistered(def); err != nil {
			ev.Error = a.env.recordError(err).marshal()
			return a.recordNow(ev)
		}
		if err := a.env.checkPayload("input", input); err != nil {
			ev.Error = a.env.recordError(err).marshal()
			return a.recordNow(ev)
		}
		a.flush()
		id := a.id + "/" + call
		if _, err := a.sys.spawn(a.env.ctx, def, input, id, a.id); err != nil {
			if !isUserError(err) {
				a.fail(err)
			}
			ev.Error = a.env.recordError(err).marshal()
			return a.recordNow(ev)
		}
		ev.Ref = id
		return a.recordNow(ev)
	})
	if err := a.eventError(e); err != nil {
		return "", err
	}
	a.links.Children = append(a.links.Children, e.Ref)
	return PID(e.Ref), nil
}

// AwaitChild waits for a child's end and returns its typed result.
func AwaitChild[In, Out any](ctx *Context, wf *WorkflowDef[In, Out], pid PID) (Out, error) {
	return AwaitChildAsync(ctx, wf, pid).Get(ctx)
}

// AwaitChildAsync is AwaitChild as a Future, to wait for several children
// (WaitAll) or the first of them (Select).
func AwaitChildAsync[In, Out any](ctx *Context, wf *WorkflowDef[In, Out], pid PID) *Future[Out] {
	a := ctx.a
	f := ReceiveAsync[mailbox.Down](ctx, mailbox.OnChannel(mailbox.DownChannel), mailbox.From(pid))
	inner := f.c.Resolve
	f.c.Resolve = func(e persistence.Event) (any, error) {
		v, err := inner(e)
		if err != nil {
			return nil, err
		}
		d := v.(Received[mailbox.Down]).Value
		return a.childResult(pid, d, func(b []byte) (any, error) { return decodeWith[Out](a.env.codec, b) })
	}
	return &Future[Out]{a: a, c: f.c}
}

func (a *activation) childResult(pid PID, d mailbox.Down, dec func([]byte) (any, error)) (any, error) {
	switch persistence.Status(d.Status) {
	case persistence.StatusCompleted:
		out, err := dec(d.Output)
		if err != nil {
			return nil, fmt.Errorf("norn: result of %s does not decode as expected: %w", pid, err)
		}
		return out, nil
	case persistence.StatusCancelled:
		return nil, &recordedErr{msg: "norn: child " + string(pid) + " cancelled: " + d.Error, kind: ErrCancelled}
	}
	var cause error
	if rec := parseErrorRecord(string(d.Output)); rec != nil && len(d.Output) > 0 {
		cause = a.env.rebuildError(rec)
	}
	return nil, &WorkflowError{Instance: string(pid), Message: d.Error, cause: cause}
}

// TrapExits turns a linked child's failure into an ordinary mailbox.Down
// message instead of failing this instance.
func (c *Context) TrapExits() { c.a.links.TrapExits = true }

// linkedExit ends a parent whose linked child failed.
type linkedExit struct {
	child, reason string
	down          mailbox.Down
}

func (e *linkedExit) Error() string {
	return fmt.Sprintf("linked child %s failed: %s", e.child, e.reason)
}

// watchLinks says whether waits must look for linked children's failures.
func (a *activation) watchLinks() bool { return a.links.Watching() }

// checkLinks is called on the messages a wait scanned: a Down from a failed
// child that no waited-for receive asks for ends this instance, unless it
// traps exits. The exit is recorded, so that replay ends at the same wait.
func (a *activation) checkLinks(recv []*command, msgs []persistence.Message) {
	waiting := make([]mailbox.Receive, len(recv))
	for i, c := range recv {
		waiting[i] = c.recv.accept()
	}
	m, d, ok := a.links.Exit(msgs, func(seq int64) bool { return a.consumed[seq] }, waiting)
	if !ok {
		return
	}
	a.record(persistence.Event{Kind: EventLinkedExit, Ref: m.ID, Payload: m.Payload})
	a.pending.Consume = append(a.pending.Consume, m.Seq)
	a.consumed[m.Seq] = true
	panic(&linkedExit{child: string(d.PID), reason: d.Error, down: d})
}

// Monitor asks for a mailbox.Down (on mailbox.DownChannel) when the instance
// pid ends — at once if it has already ended or does not exist (status
// "noproc"). Exactly one Down arrives per Monitor call.
func (c *Context) Monitor(pid PID) error {
	a := c.a
	if err := validID("pid", string(pid)); err != nil {
		return err
	}
	e := a.immediate(EventMonitor, string(pid), "", func() persistence.Event {
		ev := persistence.Event{Kind: EventMonitor, Name: string(pid)}
		// Subscribe first (committed without an event: a crash before the
		// event is recorded subscribes again, which is harmless), then look:
		// an instance that ended before the subscription committed broadcast
		// its end to nobody, so the Down is made here.
		if down, over := a.downIfEnded(pid, false); over {
			a.injectDown(pid, down)
			ev.Payload = []byte("down")
			e := a.recordNow(ev)
			a.flush()
			return e
		}
		a.pending.Subscribe = append(a.pending.Subscribe, persistence.Subscription{Channel: mailbox.MonitorChannel(pid), Mode: mailbox.Broadcast})
		if err := a.commit(); err != nil {
			if !isUserError(err) {
				a.fail(err)
			}
			a.pending.Subscribe = nil
			ev.Error = a.env.recordError(err).marshal()
			return a.recordNow(ev)
		}
		if down, over := a.downIfEnded(pid, true); over {
			a.injectDown(pid, down)
			ev.Payload = []byte("down")
		}
		e := a.recordNow(ev)
		a.flush()
		return e
	})
	return a.eventError(e)
}

// downIfEnded reads pid; if it has ended (or never existed) and, when
// checkMail is set, its broadcast Down is not already in our mailbox, it
// returns the Down to deliver.
func (a *activation) downIfEnded(pid PID, checkMail bool) ([]byte, bool) {
	inst, err := a.sys.store.Instance(a.env.ctx, string(pid))
	if err != nil && !errors.Is(err, persistence.ErrNotFound) {
		a.fail(err)
	}
	d, ended := supervisor.DownOf(pid, inst, err == nil)
	if !ended {
		return nil, false
	}
	if checkMail {
		msgs, err := a.sys.store.Mailbox(a.env.ctx, a.id, mailboxScanMax)
		if err != nil {
			a.fail(err)
		}
		for _, m := range msgs {
			if m.Channel == mailbox.MonitorChannel(pid) {
				return nil, false
			}
		}
	}
	b, _ := JSON{}.Marshal(d)
	return b, true
}

// injectDown delivers a Down to ourselves, sent in the name of pid as a
// broadcast one would be, so that mailbox.From(pid) matches it.
func (a *activation) injectDown(pid PID, down []byte) {
	a.pending.Send = append(a.pending.Send, persistence.NewMessage{ID: newMessageID(), Channel: mailbox.DownChannel,
		Target: a.id, Sender: string(pid), Type: downType, Payload: down})
}

// Cancel asks another instance to end as cancelled (as System.Cancel does).
func (c *Context) Cancel(pid PID, reason string) error {
	a := c.a
	if err := errors.Join(validID("pid", string(pid)), persistence.ValidateReason(reason)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	e := a.immediate(EventCancelSent, string(pid), "", func() persistence.Event {
		ev := persistence.Event{Kind: EventCancelSent, Name: string(pid)}
		if err := a.sys.Cancel(a.env.ctx, pid, reason); err != nil {
			if !isUserError(err) {
				a.fail(err)
			}
			ev.Error = a.env.recordError(err).marshal()
		}
		return a.recordNow(ev)
	})
	return a.eventError(e)
}
