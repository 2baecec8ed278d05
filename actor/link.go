package actor

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// SpawnChild starts a linked child instance (its ID is derived from the
// parent's, so the call is idempotent across replays). When the child ends,
// a mailbox.Down arrives on mailbox.DownChannel; if the child fails and the
// parent does not trap exits, the parent fails too (at its next Receive);
// when the parent ends, its still-running children are cancelled.
func SpawnChild[In, Out any](ctx *Context, wf *WorkflowDef[In, Out], in In) (PID, error) {
	a := ctx.a
	call := a.nextID("child")
	if e, ok := a.next(evChild, wf.Name()); ok {
		a.children = append(a.children, e.Ref)
		return PID(e.Ref), nil
	}
	def, ok := a.sys.defs[wf.Name()]
	if !ok || def != Definition(wf) {
		return "", fmt.Errorf("%w: %q is not registered on this system", ErrUnknownWorkflow, wf.Name())
	}
	input, err := encode(in)
	if err != nil {
		return "", err
	}
	if a.isCancelled() {
		return "", ErrCancelled
	}
	a.flush()
	id := a.id + "/" + call
	if _, err := a.sys.spawn(a.sys.ctx, def, input, id, a.id); err != nil {
		a.fail(err)
	}
	a.record(persistence.Event{Kind: evChild, Name: wf.Name(), Ref: id})
	a.children = append(a.children, id)
	return PID(id), nil
}

// AwaitChild waits for a child's end and returns its typed result.
func AwaitChild[In, Out any](ctx *Context, wf *WorkflowDef[In, Out], pid PID) (Out, error) {
	var zero Out
	m, err := Receive[mailbox.Down](ctx, mailbox.OnChannel(mailbox.DownChannel), mailbox.From(pid))
	if err != nil {
		return zero, err
	}
	switch persistence.Status(m.Value.Status) {
	case persistence.StatusCompleted:
		out, err := decode[Out](m.Value.Output)
		if err != nil {
			return zero, fmt.Errorf("norn: result of %s does not decode as %s: %w", pid, typeName[Out](), err)
		}
		return out, nil
	case persistence.StatusCancelled:
		return zero, fmt.Errorf("%w: %s", ErrCancelled, m.Value.Error)
	default:
		return zero, &WorkflowError{Instance: string(pid), Message: m.Value.Error}
	}
}

// TrapExits turns a linked child's failure into an ordinary mailbox.Down
// message instead of failing this instance.
func (c *Context) TrapExits() { c.a.trapExits = true }

// linkedExit ends a parent whose linked child failed.
type linkedExit struct {
	child, reason string
}

func (e *linkedExit) Error() string {
	return fmt.Sprintf("linked child %s failed: %s", e.child, e.reason)
}

// checkLinks is called by Receive on the messages it scanned: a Down from a
// failed child that the receive does not ask for ends this instance, unless
// it traps exits. The exit is recorded under the receive's ID so that replay
// ends the same way.
func (a *activation) checkLinks(recvID string, spec mailbox.Spec, msgs []persistence.Message) {
	if a.trapExits || len(a.children) == 0 {
		return
	}
	for _, m := range msgs {
		if m.Channel != mailbox.DownChannel || a.consumed[m.Seq] || spec.Matches(mailbox.FromStored(m)) {
			continue
		}
		var d mailbox.Down
		if json.Unmarshal(m.Payload, &d) != nil || persistence.Status(d.Status) != persistence.StatusFailed || !a.isChild(string(d.PID)) {
			continue
		}
		a.record(persistence.Event{Kind: evLinkedExit, Name: recvID, Ref: m.ID, Payload: m.Payload})
		a.pending.Consume = append(a.pending.Consume, m.Seq)
		a.consumed[m.Seq] = true
		panic(&linkedExit{child: string(d.PID), reason: d.Error})
	}
}

func (a *activation) isChild(id string) bool {
	for _, c := range a.children {
		if c == id {
			return true
		}
	}
	return false
}

// Monitor asks for a mailbox.Down (on mailbox.DownChannel) when the instance
// pid ends — at once if it has already ended or does not exist (status
// "noproc"). Exactly one Down arrives per Monitor call.
func (c *Context) Monitor(pid PID) error {
	a := c.a
	ch := mailbox.MonitorChannel(pid)
	if e, ok := a.next(evMonitor, string(pid)); ok {
		if e.Error != "" || string(e.Payload) == "down" {
			return recordedError(e.Error)
		}
		if _, ok := a.next(evMonitorDown, string(pid)); ok {
			return nil
		}
		if a.pos < len(a.history) {
			return nil // the first run checked and found the instance running
		}
	} else {
		// Already over? Then no end will be broadcast: make the Down now.
		if down, over := a.downIfEnded(pid, false); over {
			a.record(persistence.Event{Kind: evMonitor, Name: string(pid), Payload: []byte("down")})
			a.injectDown(pid, down)
			return nil
		}
		if err := a.effect(persistence.Event{Kind: evMonitor, Name: string(pid)}, func(p *persistence.Step) {
			p.Subscribe = append(p.Subscribe, persistence.Subscription{Channel: ch, Mode: mailbox.Broadcast})
		}); err != nil {
			return err
		}
	}
	// Subscribed. If the instance ended before the subscription committed,
	// its end was broadcast to nobody: make the Down ourselves.
	if down, over := a.downIfEnded(pid, true); over {
		a.record(persistence.Event{Kind: evMonitorDown, Name: string(pid)})
		a.injectDown(pid, down)
	}
	return nil
}

// downIfEnded reads pid; if it has ended (or never existed) and, when
// checkMail is set, its broadcast Down is not already in our mailbox, it
// returns the Down to deliver.
func (a *activation) downIfEnded(pid PID, checkMail bool) ([]byte, bool) {
	inst, err := a.sys.store.Instance(a.sys.ctx, string(pid))
	d := mailbox.Down{PID: pid, Status: "noproc"}
	switch {
	case errors.Is(err, persistence.ErrNotFound):
	case err != nil:
		a.fail(err)
	case !inst.Status.Terminal():
		return nil, false
	default:
		d = mailbox.Down{PID: pid, Status: string(inst.Status), Error: inst.Error, Output: inst.Output}
	}
	if checkMail {
		msgs, err := a.sys.store.Mailbox(a.sys.ctx, a.id, mailboxScanMax)
		if err != nil {
			a.fail(err)
		}
		for _, m := range msgs {
			if m.Channel == mailbox.MonitorChannel(pid) {
				return nil, false
			}
		}
	}
	b, _ := json.Marshal(d)
	return b, true
}

// injectDown delivers a Down to ourselves, sent in the name of pid as a
// broadcast one would be, so that mailbox.From(pid) matches it.
func (a *activation) injectDown(pid PID, down []byte) {
	a.pending.Send = append(a.pending.Send, persistence.NewMessage{ID: newMessageID(), Channel: mailbox.DownChannel,
		Target: a.id, Sender: string(pid), Payload: down})
	a.flush()
}

// Cancel asks another instance to end as cancelled (as System.Cancel does).
func (c *Context) Cancel(pid PID, reason string) error {
	a := c.a
	if e, ok := a.next(evCancelSent, string(pid)); ok {
		return recordedError(e.Error)
	}
	ev := persistence.Event{Kind: evCancelSent, Name: string(pid)}
	if err := a.sys.Cancel(a.sys.ctx, pid, reason); err != nil {
		if !isUserError(err) {
			a.fail(err)
		}
		ev.Error = errorCode(err) + err.Error()
	}
	a.record(ev)
	return recordedError(ev.Error)
}
