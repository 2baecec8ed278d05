package actor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor/internal/journal"
	"github.com/nornlabs/norn/persistence"
)

// ErrUnknownQuery: the instance has registered no query handler of that
// name (not yet, or not in this code). It matches ErrInvalidInput too.
var ErrUnknownQuery = fmt.Errorf("%w: unknown query", ErrInvalidInput)

// queryHandlersKey keys a run's query handlers in its Context locals:
// registered by the workflow's code, so rebuilt by replay.
type queryHandlersKey struct{}

// queryHandler answers one query: arg and result are JSON (queries are
// not recorded, so the node's codec plays no part).
type queryHandler func(arg []byte) ([]byte, error)

// HandleQuery registers fn as the answer to query name for this instance
// (see System.Query). Register handlers from the workflow's code, before or
// between its durable calls: a replay registers them again. Registering a
// name again replaces its handler.
//
// A query is answered while the workflow waits (never while its code
// runs), by a live activation from its memory, otherwise by replaying the
// instance's history without side effects; either way nothing is written.
// fn must only read: what it changes is not recorded, and a replay would
// not see it. Its argument is decoded from JSON strictly (unknown fields
// refused), its result encoded as JSON. A panic in fn is the query's error;
// the instance is not affected.
func HandleQuery[A, R any](ctx *Context, name string, fn func(A) (R, error)) error {
	if err := validID("query name", name); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%w: nil handler for query %q", ErrInvalidInput, name)
	}
	a := ctx.a
	hs, _ := a.locals[queryHandlersKey{}].(map[string]queryHandler)
	if hs == nil {
		hs = map[string]queryHandler{}
		if a.locals == nil {
			a.locals = map[any]any{}
		}
		a.locals[queryHandlersKey{}] = hs
	}
	hs[name] = func(raw []byte) ([]byte, error) {
		var arg A
		if len(bytes.TrimSpace(raw)) > 0 {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&arg); err != nil {
				return nil, fmt.Errorf("%w: argument of query %q: %w", ErrInvalidInput, name, err)
			}
			if dec.More() {
				return nil, fmt.Errorf("%w: argument of query %q: more than one JSON value", ErrInvalidInput, name)
			}
		}
		r, err := fn(arg)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("norn: result of query %q: %w", name, err)
		}
		return b, nil
	}
	return nil
}

// queryAsk is a query handed to a live activation, answered on reply. An
// ask with no name runs no handler: it only has the activation commit
// what it holds back first (see System.Inspect).
type queryAsk struct {
	name  string
	arg   []byte
	reply chan queryAnswer
}

type queryAnswer struct {
	out []byte
	err error
}

// answerQuery runs a query on the workflow goroutine while it is parked.
func (a *activation) answerQuery(q *queryAsk) {
	if q.name == "" {
		q.reply <- queryAnswer{}
		return
	}
	out, err := a.runQuery(q.name, q.arg)
	q.reply <- queryAnswer{out: out, err: err}
}

// runQuery runs the handler of name over the run's current state; a
// handler's panic becomes the error.
func (a *activation) runQuery(name string, arg []byte) (out []byte, err error) {
	hs, _ := a.locals[queryHandlersKey{}].(map[string]queryHandler)
	h, ok := hs[name]
	if !ok {
		names := make([]string, 0, len(hs))
		for n := range hs {
			names = append(names, n)
		}
		sort.Strings(names)
		known := "none"
		if len(names) > 0 {
			known = strings.Join(names, ", ")
		}
		return nil, fmt.Errorf("%w %q on %s (it handles: %s)", ErrUnknownQuery, name, a.id, known)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("norn: query %q: %w", name, &PanicError{Value: fmt.Sprint(r), Stack: string(debug.Stack())})
		}
	}()
	return h(arg)
}

// Query answers query name of instance pid with arg (JSON; empty for none)
// and returns the handler's result as JSON. An instance live on this node
// answers from its memory, at its next wait; any other (passivated, ended,
// run by another node) is replayed from its history without side effects,
// with the workflow code this node registered. Nothing is written either
// way.
//
// It fails with ErrNotFound for no such instance, ErrUnknownWorkflow if this
// node lacks its workflow, ErrUnknownQuery if the instance registered no
// such handler, ErrInvalidInput if arg does not decode into the handler's
// argument, a *NonDeterminismError if today's code does not replay the
// history, and otherwise with the handler's error.
func (s *System) Query(ctx context.Context, pid PID, name string, arg []byte) (json.RawMessage, error) {
	if err := errors.Join(validID("instance ID", string(pid)), validID("query name", name)); err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(arg)) > 0 && !json.Valid(arg) {
		return nil, fmt.Errorf("%w: argument of query %q is not JSON", ErrInvalidInput, name)
	}
	if ans, live, err := s.askLive(ctx, string(pid), &queryAsk{name: name, arg: arg}, 0); err != nil || live {
		if err == nil {
			err = ans.err
		}
		return ans.out, err
	}
	inst, err := s.store.Instance(ctx, string(pid))
	if err != nil {
		return nil, err
	}
	def, ok := s.defs[inst.Workflow]
	if !ok {
		return nil, fmt.Errorf("%w: %q (instance %s): this node cannot replay it for a query", ErrUnknownWorkflow, inst.Workflow, pid)
	}
	hist, err := readHist(ctx, s.store, string(pid), inst.HistoryLen, s.cfg.HistoryPage)
	if err != nil {
		return nil, err
	}
	return queryReplay(s.replayEnv(ctx), def, string(pid), hist, name, arg)
}

// askLive hands q to instance id's activation if it is live here and
// returns its answer (live). An activation answers once parked, after
// committing the takes it holds back; one that passivates or ends first
// answers nothing (its history has it all), and so does one that does not
// park within patience, if positive.
func (s *System) askLive(ctx context.Context, id string, q *queryAsk, patience time.Duration) (ans queryAnswer, live bool, err error) {
	s.mu.Lock()
	a := s.acts[id]
	s.mu.Unlock()
	if a == nil {
		return ans, false, nil
	}
	var giveUp <-chan time.Time
	if patience > 0 {
		t := time.NewTimer(patience)
		defer t.Stop()
		giveUp = t.C
	}
	q.reply = make(chan queryAnswer, 1)
	select {
	case a.queries <- q:
		return <-q.reply, true, nil
	case <-a.exited:
	case <-giveUp:
	case <-ctx.Done():
		err = ctx.Err()
	}
	return ans, false, err
}

// Query is System.Query with a typed argument and result: arg is encoded
// as JSON (nil for none) and the result decoded from JSON into R.
func Query[R any](ctx context.Context, sys *System, pid PID, name string, arg any) (R, error) {
	var zero R
	var raw []byte
	if arg != nil {
		b, err := json.Marshal(arg)
		if err != nil {
			return zero, fmt.Errorf("%w: argument of query %q: %w", ErrInvalidInput, name, err)
		}
		raw = b
	}
	out, err := sys.Query(ctx, pid, name, raw)
	if err != nil {
		return zero, err
	}
	var r R
	if err := json.Unmarshal(out, &r); err != nil {
		return zero, &DecodeError{Type: typeName[R](), Message: out, Err: err}
	}
	return r, nil
}

// QueryHistory answers a query the way System.Query does for an instance
// that is not live, from a recorded history (from Inspect or
// System.History) of instance pid and the workflow's code, with no System: for tools that
// read a store but run nothing (the norn command's query). Options as for
// Replay.
func QueryHistory(ctx context.Context, wf Definition, pid PID, history []HistoryEvent, name string, arg []byte, opts ...ReplayOption) (json.RawMessage, error) {
	if err := errors.Join(validID("instance ID", string(pid)), validID("query name", name)); err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(arg)) > 0 && !json.Valid(arg) {
		return nil, fmt.Errorf("%w: argument of query %q is not JSON", ErrInvalidInput, name)
	}
	v, err := replayEnv(ctx, wf, opts)
	if err != nil {
		return nil, err
	}
	hist := storedEvents(history)
	if len(hist) == 0 || hist[0].Kind != EventStarted {
		return nil, fmt.Errorf("%w: a history starts with its started event", ErrInvalidInput)
	}
	if hist[0].Name != wf.Name() {
		return nil, fmt.Errorf("%w: history is of workflow %q, not %q", ErrInvalidInput, hist[0].Name, wf.Name())
	}
	return queryReplay(v, wf, string(pid), journal.Events(hist), name, arg)
}

// queryReplay replays hist in v without side effects, to the end of
// history, and runs the query there.
func queryReplay(v *env, def Definition, id string, hist journal.History, name string, arg []byte) (json.RawMessage, error) {
	a := newActivationIn(v, nil, def, persistence.Instance{ID: id, Workflow: def.Name()}, hist)
	a.j = journal.NewReplay(hist)
	defer a.stopRun()
	_, oc, crash, _, werr := a.execute()
	a.endAttempts()
	switch oc {
	case outNonDeterminism:
		return nil, werr
	case outCrash:
		return nil, fmt.Errorf("norn: query %q: the workflow crashed replaying its history: %w", name, crash)
	}
	return a.runQuery(name, arg)
}
