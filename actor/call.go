package actor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// Request and reply (Call) ride on the durable mailbox. A request is a
// message on the reserved channel CallChannel whose metadata carries the
// call's ID (the request message's ID) and the caller's PID; the reply is a
// message on ReplyChannel to that PID, carrying the same call ID. Both
// channels start with "$": only the runtime writes them, so a request's
// reply address and a reply's origin cannot be forged by user code.
const (
	// CallChannel is the channel requests arrive on (see ReceiveCall).
	CallChannel = "$call"
	// ReplyChannel is the channel replies arrive on (see Call).
	ReplyChannel = "$reply"

	// Metadata keys of requests and replies.
	callIDKey  = "norn.call"
	replyToKey = "norn.reply_to"
	// callErrKey holds the error record of a reply that is an error
	// (Request.Fail) instead of a value.
	callErrKey = "norn.error"

	// callWorkflowName runs the calls made from outside the workflows
	// (CallFrom): its instances hold the request's send and the reply
	// durably.
	callWorkflowName = "$call"
	// callIDPrefix starts the instance IDs of calls from outside.
	callIDPrefix = "$call:"
	// DefaultCallTimeout bounds a CallFrom whose CallOptions.Timeout is
	// zero, so that the instance that waits for its reply always ends.
	DefaultCallTimeout = time.Minute
)

// Errors of calls.
var (
	// ErrCallTimeout: no reply came within CallOptions.Timeout. A reply
	// that comes later is never handed to another call.
	ErrCallTimeout = errors.New("norn: call timed out")
	// ErrAlreadyReplied: a request was answered already (Reply or Fail);
	// a request gets exactly one reply.
	ErrAlreadyReplied = errors.New("norn: call already answered")
)

// CallOptions configures Call and CallFrom.
type CallOptions struct {
	// Timeout is how long the caller waits for the reply (a durable timer:
	// it survives restarts). Zero: inside a workflow, no limit; from
	// outside (CallFrom), DefaultCallTimeout.
	Timeout time.Duration
	// ID makes a call from outside (CallFrom) safe to repeat: a caller
	// that calls again with the same ID (after a restart, say) waits for
	// the same single request's reply instead of making a second request.
	// A repeat with another request is refused (ErrInvalidInput). Empty:
	// a fresh call. Calls from workflows are recorded and never repeated,
	// so they take no ID.
	ID string
}

// Request is a call's request as the callee received it (ReceiveCall).
// Answer it once, with Reply or Fail.
type Request[T any] struct {
	// Value is the decoded request.
	Value T
	// ID is the call's ID.
	ID string
	// From is the caller: a workflow instance, or the instance that holds
	// a call from outside.
	From PID
	// Message is the request as stored.
	Message mailbox.Message
}

// repliedKey keys the set of answered call IDs in Context locals: rebuilt
// by replay, since the Reply calls replay in order.
type repliedKey struct{}

// Call sends req to pid as a request and waits for its reply, durably on
// both sides: the request is recorded and sent once, the reply is received
// and recorded once, and a restart of the caller while it waits resumes
// the wait (replay returns the recorded reply). The callee takes the
// request with ReceiveCall and answers it with Request.Reply, or with
// Request.Fail, whose error Call returns (rebuilt as recorded: registered
// errors match errors.Is).
//
// With opts.Timeout it fails with ErrCallTimeout (which matches ErrTimeout
// too) when no reply came in time; a reply that comes later stays out of
// every other receive. It fails with ErrNotFound or ErrInstanceDone if pid
// is no live instance, and with a *DecodeError if the reply does not
// decode as Resp.
func Call[Resp any](ctx *Context, pid PID, req any, opts CallOptions) (Resp, error) {
	var zero Resp
	a := ctx.a
	if opts.Timeout < 0 {
		return zero, fmt.Errorf("%w: negative call timeout %s", ErrInvalidInput, opts.Timeout)
	}
	if opts.ID != "" {
		return zero, fmt.Errorf("%w: a call from a workflow takes no ID (it is recorded and never repeated)", ErrInvalidInput)
	}
	if err := validID("target", string(pid)); err != nil {
		return zero, err
	}
	payload, err := a.env.encode(req)
	if err != nil {
		return zero, err
	}
	if err := a.env.checkPayload("request", payload); err != nil {
		return zero, err
	}
	m, err := a.call(pid, a.env.messageType(req), payload, opts.Timeout)
	if err != nil {
		return zero, err
	}
	if rec := m.Metadata[callErrKey]; rec != "" {
		return zero, a.env.rebuildError(parseErrorRecord(rec))
	}
	v, err := decodeWith[Resp](a.env.codec, m.Payload)
	if err != nil {
		return zero, &DecodeError{MessageID: m.ID, Type: typeName[Resp](), Message: m.Payload, Err: err}
	}
	return v, nil
}

// call sends a request and waits for its reply message; the reply may be
// an error reply (callErrKey), which the caller decodes.
func (a *activation) call(pid PID, typ string, payload []byte, timeout time.Duration) (mailbox.Message, error) {
	dig := digest(append([]byte(CallChannel+"\x00"+typ+"\x00"), payload...))
	e := a.immediate(EventSent, string(pid), dig, func() persistence.Event {
		id := newCallID()
		return a.effect(persistence.Event{Kind: EventSent, Name: string(pid), Ref: id, Digest: dig}, func(p *persistence.Step) {
			p.Send = append(p.Send, persistence.NewMessage{ID: id, Channel: CallChannel, Target: string(pid), Sender: a.id,
				Type: typ, Payload: payload, Metadata: map[string]string{callIDKey: id, replyToKey: a.id},
				MustDeliver: true, Dedupe: true})
		})
	})
	if err := a.eventError(e); err != nil {
		return mailbox.Message{}, err
	}
	if !a.replaying() {
		a.hook(HookEvent{Kind: HookMessageSent, Name: string(pid), Ref: e.Ref})
	}
	callID := e.Ref
	filters := []mailbox.Filter{mailbox.OnChannel(ReplyChannel),
		mailbox.Match(func(m mailbox.Message) bool { return m.Metadata[callIDKey] == callID })}
	if timeout > 0 {
		filters = append(filters, mailbox.Timeout(timeout))
	}
	r, err := Receive[[]byte](a.ctx, filters...)
	if errors.Is(err, ErrTimeout) {
		return mailbox.Message{}, &callTimeoutError{target: pid, timeout: timeout}
	}
	return r.Message, err
}

// callTimeoutError is ErrCallTimeout, and ErrTimeout, with who did not answer.
type callTimeoutError struct {
	target  PID
	timeout time.Duration
}

func (e *callTimeoutError) Error() string {
	return fmt.Sprintf("norn: call timed out: no reply from %s within %s", e.target, e.timeout)
}

// Is makes errors.Is(err, ErrCallTimeout) and errors.Is(err, ErrTimeout) true.
func (e *callTimeoutError) Is(target error) bool {
	return target == ErrCallTimeout || target == ErrTimeout
}

func newCallID() string { return "c-" + randomHex(12) }

// ReceiveCall takes the next request of type T (arrival order), waiting
// for one as Receive does; filters narrow it as for Receive
// (mailbox.From, mailbox.Match, mailbox.Timeout). Requests arrive on
// CallChannel only, so a plain Receive never takes one. A request that
// does not decode as T is answered with the *DecodeError at once (the
// caller gets it) and returned.
//
// If the callee restarts between taking the request and replying, replay
// gives it the same request again, and its recorded reply is not sent
// twice: the caller gets exactly one reply.
func ReceiveCall[T any](ctx *Context, filters ...mailbox.Filter) (*Request[T], error) {
	filters = append(filters, mailbox.OnChannel(CallChannel))
	r, err := Receive[T](ctx, filters...)
	var de *DecodeError
	switch {
	case errors.As(err, &de):
		req := &Request[T]{ID: r.Metadata[callIDKey], From: PID(r.Metadata[replyToKey]), Message: r.Message}
		if rerr := req.Fail(ctx, err); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		return nil, err
	case err != nil:
		return nil, err
	}
	return &Request[T]{Value: r.Value, ID: r.Metadata[callIDKey], From: PID(r.Metadata[replyToKey]), Message: r.Message}, nil
}

// Reply answers the request with resp: a durable send to the caller,
// recorded once. A second answer fails with ErrAlreadyReplied. A caller
// that has ended (a call from outside that timed out) no longer takes
// replies: the reply is dropped and Reply returns nil.
func (r *Request[T]) Reply(ctx *Context, resp any) error {
	payload, err := ctx.a.env.encode(resp)
	if err != nil {
		return err
	}
	if err := ctx.a.env.checkPayload("reply", payload); err != nil {
		return err
	}
	return ctx.a.reply(r.ID, r.From, ctx.a.env.messageType(resp), payload, "")
}

// Fail answers the request with an error, which the caller's Call returns
// (rebuilt the way recorded failures are: register the error with
// Config.Errors on both sides to match it with errors.Is or errors.As).
func (r *Request[T]) Fail(ctx *Context, cause error) error {
	if cause == nil {
		return fmt.Errorf("%w: Fail needs an error", ErrInvalidInput)
	}
	return ctx.a.reply(r.ID, r.From, "", nil, ctx.a.env.recordError(cause).marshal())
}

// reply records and sends the one reply of call id to from.
func (a *activation) reply(id string, from PID, typ string, payload []byte, errRec string) error {
	if id == "" || from == "" {
		return fmt.Errorf("%w: a request without a call ID or caller", ErrInvalidInput)
	}
	replied, _ := a.locals[repliedKey{}].(map[string]bool)
	if replied[id] {
		return fmt.Errorf("%w: call %s", ErrAlreadyReplied, id)
	}
	md := map[string]string{callIDKey: id}
	if errRec != "" {
		md[callErrKey] = cleanText(errRec)
	}
	dig := digest(append([]byte(ReplyChannel+"\x00"+id+"\x00"+typ+"\x00"+errRec+"\x00"), payload...))
	e := a.immediate(EventSent, string(from), dig, func() persistence.Event {
		// A deterministic ID: whatever happens, one reply exists per call.
		mid := "r-" + id
		return a.effect(persistence.Event{Kind: EventSent, Name: string(from), Ref: mid, Digest: dig}, func(p *persistence.Step) {
			p.Send = append(p.Send, persistence.NewMessage{ID: mid, Channel: ReplyChannel, Target: string(from), Sender: a.id,
				Type: typ, Payload: payload, Metadata: md, Dedupe: true})
		})
	})
	if err := a.eventError(e); err != nil {
		return err
	}
	if replied == nil {
		replied = map[string]bool{}
		if a.locals == nil {
			a.locals = map[any]any{}
		}
		a.locals[repliedKey{}] = replied
	}
	replied[id] = true
	if !a.replaying() {
		a.hook(HookEvent{Kind: HookMessageSent, Name: string(from), Ref: e.Ref})
	}
	return nil
}

// callInput is the input of a call from outside, JSON in the instance's
// raw input (whatever the node's codec).
type callInput struct {
	Target  string        `json:"target"`
	Type    string        `json:"type,omitempty"`
	Payload []byte        `json:"payload,omitempty"`
	Timeout time.Duration `json:"timeout"`
}

// callOutput is its result: the reply, or the error reply's record, or a
// timeout, or the error the request's send met.
type callOutput struct {
	Payload  []byte `json:"payload,omitempty"`
	Type     string `json:"type,omitempty"`
	Error    string `json:"error,omitempty"` // an error record
	TimedOut bool   `json:"timed_out,omitempty"`
}

// newCallWorkflow is the workflow behind CallFrom; every node registers it
// (under a reserved name), so that whichever node runs a call's instance
// has it.
func newCallWorkflow() Definition {
	return Workflow(callWorkflowName, func(ctx *Context, raw []byte) ([]byte, error) {
		var in callInput
		if err := json.Unmarshal(raw, &in); err != nil {
			return nil, fmt.Errorf("%w: call input: %w", ErrInvalidInput, err)
		}
		var out callOutput
		m, err := ctx.a.call(PID(in.Target), in.Type, in.Payload, in.Timeout)
		replied := err == nil
		switch {
		case errors.Is(err, ErrCallTimeout):
			out.TimedOut = true
		case err != nil:
			if errors.Is(err, ErrCancelled) {
				return nil, err
			}
			out.Error = ctx.a.env.recordError(err).marshal()
		default:
			out.Payload, out.Type, out.Error = m.Payload, m.Type, m.Metadata[callErrKey]
		}
		b, err := json.Marshal(out)
		if err == nil && replied && ctx.a.sys != nil {
			// A reply (not a timeout) is what this instance records, however
			// its end's commit goes: a rerun after a crash takes the same
			// reply, which a wait looks for before its timeout. So the
			// caller here may have it now, a commit earlier.
			ctx.a.sys.answerCall(ctx.a.id, b)
		}
		return b, err
	})
}

// CallFrom is Call from outside the workflows: it sends req to pid as a
// request and waits for the reply, with the same guarantees. The call is
// an instance of its own (ID "$call:" and the call's ID), created with
// the request's send, which waits for the reply durably: a caller that
// dies may call again with the same CallOptions.ID and gets the same
// single reply; a node that dies meanwhile hands the wait to another.
//
// It fails with ErrCallTimeout when no reply came within opts.Timeout
// (DefaultCallTimeout if zero), with ctx's error if ctx ends first (the
// call goes on: call again with the same ID to get its reply), and with
// the error the callee replied with (Request.Fail).
func CallFrom[Resp any](ctx context.Context, sys *System, pid PID, req any, opts CallOptions) (Resp, error) {
	var zero Resp
	m, err := sys.call(ctx, pid, req, opts)
	if err != nil {
		return zero, err
	}
	v, err := decodeWith[Resp](sys.codec, m.Payload)
	if err != nil {
		return zero, &DecodeError{Type: typeName[Resp](), Message: m.Payload, Err: err}
	}
	return v, nil
}

// callPoll bounds the wait between looks at a call instance that another
// node runs: it starts at callPollMin and doubles, since most calls are
// answered within milliseconds.
const (
	callPollMin = 500 * time.Microsecond
	callPollMax = 100 * time.Millisecond
)

// call runs a call from outside and returns the reply.
func (s *System) call(ctx context.Context, pid PID, req any, opts CallOptions) (callOutput, error) {
	if opts.Timeout < 0 {
		return callOutput{}, fmt.Errorf("%w: negative call timeout %s", ErrInvalidInput, opts.Timeout)
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultCallTimeout
	}
	if err := validID("target", string(pid)); err != nil {
		return callOutput{}, err
	}
	payload, err := s.encode(req)
	if err != nil {
		return callOutput{}, err
	}
	if err := s.checkPayload("request", payload); err != nil {
		return callOutput{}, err
	}
	in := callInput{Target: string(pid), Type: s.messageType(req), Payload: payload, Timeout: timeout}
	input, err := json.Marshal(in)
	if err != nil {
		return callOutput{}, fmt.Errorf("norn: encode call: %w", err)
	}
	id := ""
	if opts.ID != "" {
		id = callIDPrefix + opts.ID
		if err := validID("call ID", id); err != nil {
			return callOutput{}, err
		}
	} else {
		id = s.localCallID()
	}
	def := s.defs[callWorkflowName]
	if err := s.enter(); err != nil {
		return callOutput{}, err
	}
	// The request's send commits with the call's creation (its first
	// recorded event), so that a call costs no commit of its own for it.
	callID := newCallID()
	sendRequest := func(step *persistence.Step) {
		// It parks at once, waiting for the reply: created waiting, its
		// park costs no write of its own.
		step.Create.Status = persistence.StatusWaiting
		step.History = append(step.History, persistence.Event{Seq: int64(len(step.History)), Kind: EventSent, Name: in.Target,
			Ref: callID, Digest: digest(append([]byte(CallChannel+"\x00"+in.Type+"\x00"), payload...)), At: time.Now()})
		step.Send = append(step.Send, persistence.NewMessage{ID: callID, Channel: CallChannel, Target: in.Target, Sender: id,
			Type: in.Type, Payload: payload, Metadata: map[string]string{callIDKey: callID, replyToKey: id},
			MustDeliver: true, Dedupe: true})
	}
	answer := s.expectAnswer(id)
	defer s.forgetAnswer(id, answer)
	_, existed, err := s.create(ctx, def, input, id, "", sendRequest)
	s.leave()
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrInstanceDone):
		// The request's target: the call's creation was refused with it.
		return callOutput{}, fmt.Errorf("norn: call to %s: %w", pid, errors.Unwrap(err))
	case err != nil:
		return callOutput{}, err
	}
	if !existed {
		output, err := s.awaitAnswer(ctx, id, answer)
		if err != nil {
			return callOutput{}, err
		}
		return s.callResult(id, pid, timeout, output)
	}
	s.forgetAnswer(id, answer)
	inst, err := s.awaitEnd(ctx, id, callPollMin, callPollMax)
	if err != nil {
		return callOutput{}, err
	}
	var was callInput
	if json.Unmarshal(inst.Input, &was) != nil || was.Target != in.Target || was.Type != in.Type || string(was.Payload) != string(payload) {
		return callOutput{}, fmt.Errorf("%w: call %q was made with another request", ErrInvalidInput, opts.ID)
	}
	if err := callEnded(inst); err != nil {
		return callOutput{}, err
	}
	return s.callResult(id, pid, timeout, inst.Output)
}

// callEnded fails for a call instance that ended other than completed:
// cancelled or terminated from outside, or failed.
func callEnded(inst persistence.Instance) error {
	if inst.Status != persistence.StatusCompleted {
		return fmt.Errorf("norn: call %s ended %s: %s", inst.ID, inst.Status, inst.Error)
	}
	return nil
}

// callResult reads a call instance's output.
func (s *System) callResult(id string, pid PID, timeout time.Duration, output []byte) (callOutput, error) {
	var out callOutput
	if err := json.Unmarshal(output, &out); err != nil {
		return callOutput{}, fmt.Errorf("norn: call %s: unreadable result: %w", id, err)
	}
	switch {
	case out.TimedOut:
		return out, &callTimeoutError{target: pid, timeout: timeout}
	case out.Error != "":
		return out, s.rebuildError(parseErrorRecord(out.Error))
	}
	return out, nil
}

// localCallID is a fresh call instance ID that this node owns, if it hosts
// instances, so that the call runs here and its end wakes the caller
// without a poll. Ownership is by a hash of the ID: a few tries find one.
func (s *System) localCallID() string {
	id := callIDPrefix + newSortableID()
	if !s.role.hosts() {
		return id
	}
	for range 64 {
		if s.owns(id) {
			return id
		}
		id = callIDPrefix + newSortableID()
	}
	return id
}

// expectAnswer registers for the answer of call instance id, which its
// workflow gives this node as it takes the reply (answerCall), before its
// end commits.
func (s *System) expectAnswer(id string) chan []byte {
	c := make(chan []byte, 1)
	s.mu.Lock()
	if s.answers == nil {
		s.answers = map[string]chan []byte{}
	}
	s.answers[id] = c
	s.mu.Unlock()
	return c
}

func (s *System) forgetAnswer(id string, c chan []byte) {
	s.mu.Lock()
	if s.answers[id] == c {
		delete(s.answers, id)
	}
	s.mu.Unlock()
}

// answerCall hands the output of call instance id to a CallFrom waiting
// for it here, if any.
func (s *System) answerCall(id string, output []byte) {
	s.mu.Lock()
	c := s.answers[id]
	s.mu.Unlock()
	if c != nil {
		select {
		case c <- output:
		default:
		}
	}
}

// awaitAnswer waits for the output of call instance id: its answer, from
// its workflow on this node as it takes the reply, or its end's.
func (s *System) awaitAnswer(ctx context.Context, id string, answer chan []byte) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type ended struct {
		inst persistence.Instance
		err  error
	}
	done := make(chan ended, 1)
	go func() {
		inst, err := s.awaitEnd(ctx, id, callPollMin, callPollMax)
		done <- ended{inst, err}
	}()
	select {
	case e := <-done:
		if e.err != nil {
			return nil, e.err
		}
		if err := callEnded(e.inst); err != nil {
			return nil, err
		}
		return e.inst.Output, nil
	case b := <-answer:
		cancel()
		<-done // the waiting goroutine ends before this returns
		return b, nil
	}
}
