package actor

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

// Tx is the database transaction a transactional activity writes the
// user's own tables through (see TxActivity): the transaction of the step
// that records the activity's result. It is one interface over both
// stores, with PostgreSQL-style parameters ($1, $2 …) on both; Dialect
// says which database runs it. sqlite.SQLTx and postgres.PgxTx give the
// driver's native transaction for code that needs one.
type Tx = persistence.Tx

// ErrNotTransactional is what EmitTx returns outside a transactional
// activity.
var ErrNotTransactional = errors.New("norn: not inside a transactional activity")

// TxActivity defines a transactional activity: fn runs inside the database
// transaction that records its result, so that what it writes through tx
// commits if and only if the result is recorded. A crash before the
// commit leaves neither (the activity runs again); after it, both (it is
// never run again): fn's writes to the user's own tables happen exactly
// once. An attempt that returns an error, panics, times out or loses the
// instance's lease is rolled back entirely; a failed attempt is then
// recorded, in a step of its own, and retried as for any activity. The
// options (retry, timeout, compensation) are those of Activity; the
// compensation is an ordinary function, not transactional.
//
// The attempt runs on the workflow's goroutine: the workflow waits while
// it runs (Go returns once the attempt is over), so transactional
// activities of one instance run one at a time. The user's tables live in
// the store's database (the same SQLite file, the same PostgreSQL
// database). On SQLite the transaction holds the database's only writer:
// keep fn short, and bounded, since past the store's TxTimeout (default
// 5s) it is rolled back and the attempt fails as a timed-out one. fn must
// not call the Norn store (a System's client calls, say) inside: on SQLite
// that waits for the writer fn holds.
func TxActivity[In, Out any](name string, fn func(ctx context.Context, tx Tx, in In) (Out, error), opts ...ActivityOption) *ActivityDef[In, Out] {
	if fn == nil {
		panic("norn: activity " + name + ": nil function")
	}
	d := Activity[In, Out](name, nil, opts...)
	d.txfn = fn
	d.fn = func(context.Context, In) (Out, error) {
		var zero Out
		return zero, supervisor.Terminal(fmt.Errorf("norn: activity %s is transactional: it runs only inside its step's transaction", name))
	}
	return d
}

// txEmitsKey carries the transactional attempt's outgoing events.
type txEmitsKey struct{}

// txEmits collects what EmitTx records during one attempt; they join the
// step that records the result, and a failed attempt's are dropped.
type txEmits struct {
	a      *activation
	prefix string
	mu     sync.Mutex
	events []persistence.OutboxEvent
	closed bool
}

// EmitTx records an outgoing event from inside a transactional activity, in
// the transaction of the step that records the activity's result: it is
// relayed if and only if that step commits (the transactional outbox). It
// is the low-level call that events.EmitTx builds CloudEvents on. id must
// be unique store-wide; empty means "<instance>/<activity ID>/emit:N", N
// counting this attempt's events from 1, which stays the same across
// retries and crashes since only the committed attempt's events are kept.
// It returns the ID used, or ErrNotTransactional outside a transactional
// activity.
func EmitTx(ctx context.Context, id, typ string, data []byte) (string, error) {
	em, ok := ctx.Value(txEmitsKey{}).(*txEmits)
	if !ok {
		return "", ErrNotTransactional
	}
	em.mu.Lock()
	defer em.mu.Unlock()
	if em.closed {
		return "", fmt.Errorf("%w: the attempt is over", ErrNotTransactional)
	}
	if id == "" {
		id = em.prefix + "emit:" + strconv.Itoa(len(em.events)+1)
	}
	if err := validID("event ID", id); err != nil {
		return "", err
	}
	if typ == "" {
		return "", fmt.Errorf("%w: event type is empty", ErrInvalidInput)
	}
	if err := validID("event type", typ); err != nil {
		return "", err
	}
	if err := em.a.env.checkPayload("event", data); err != nil {
		return "", err
	}
	em.events = append(em.events, persistence.OutboxEvent{ID: id, Instance: em.a.id, Type: typ, Data: append([]byte(nil), data...)})
	return id, nil
}

// take ends the attempt's emitting and returns its events.
func (em *txEmits) take() []persistence.OutboxEvent {
	em.mu.Lock()
	defer em.mu.Unlock()
	em.closed = true
	return em.events
}

// startTxAttempt runs the next attempt of a transactional activity on the
// workflow's goroutine, inside ApplyTx: the function writes, then the step
// that records its result (with whatever else is pending) is built and
// applied in the same transaction. A failed attempt is then recorded as
// any activity's (outcome), after its transaction was rolled back.
func (a *activation) startTxAttempt(c *command) {
	call := c.act
	if a.inst.Status == persistence.StatusWaiting && a.pending.Status == "" {
		a.pending.Status = persistence.StatusRunning // see markParked
	}
	a.takeLease()
	if call.attempt == 0 {
		call.first = time.Now()
	}
	if call.durable {
		a.pending.CancelTimers = append(a.pending.CancelTimers, call.timerID)
		call.durable, call.timerID = false, ""
	}
	n := call.attempt + 1
	call.running = true
	a.inflight++
	out, err, done := a.attemptTx(c, n)
	if done {
		a.inflight--
		call.running, call.attempt = false, n
		return
	}
	a.outcome(attemptResult{c: c, n: n, out: out, err: err})
}

// attemptTx runs attempt n and, if it succeeds, commits its result with
// its writes (done). Otherwise it returns the attempt's error, everything
// rolled back. A step that fails after the function succeeded (a lost
// lease) fails the activation as a failed commit does.
func (a *activation) attemptTx(c *command, n int) (any, error, bool) {
	call := c.act
	a.mu.Lock()
	ctx := a.runCtx
	a.mu.Unlock()
	if call.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, call.timeout)
		defer cancel()
	}
	ctx = context.WithValue(ctx, activityInfoKey{}, ActivityInfo{InstanceID: a.id, ActivityID: call.id,
		IdempotencyKey: a.id + "/" + call.id, Attempt: n})
	em := &txEmits{a: a, prefix: a.id + "/" + call.id + "/"}
	ctx = context.WithValue(ctx, txEmitsKey{}, em)
	ctx = a.activityHooks(ctx, HookEvent{Kind: HookActivityStarted, Name: call.name, Ref: call.id, Attempt: n})
	start := time.Now()

	var (
		step     persistence.Step
		take     bool
		recorded persistence.Event
		m        mark
		built    bool
		encErr   error
		// got is run's result: read only once the store called mk, which
		// it does after run returned (an abandoned run may still write it).
		got any
	)
	run := func(ctx context.Context, tx Tx) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = &PanicError{Value: fmt.Sprint(p), Stack: string(debug.Stack())}
			}
		}()
		v, err := call.runTx(ctx, tx)
		got = v
		return err
	}
	// mk runs while this goroutine waits in ApplyTx (on the SQLite
	// driver's writer goroutine): nothing else touches the activation.
	mk := func() (persistence.Step, error) {
		b, err := call.encode(got)
		if err != nil {
			encErr = supervisor.Terminal(err)
			return persistence.Step{}, encErr
		}
		m, built = a.mark(), true
		recorded = a.record(persistence.Event{Kind: EventActivity, Name: call.name, Ref: call.id, Digest: call.digest, Payload: b})
		step, take = a.nextStep()
		if evs := em.take(); len(evs) > 0 {
			step.Emit = append(step.Emit[:len(step.Emit):len(step.Emit)], evs...)
		}
		return step, nil
	}
	res, err := a.sys.store.ApplyTx(ctx, a.id, run, mk)
	em.take() // an abandoned function's later emits go nowhere
	switch {
	case err == nil:
	case built && encErr == nil:
		// The function succeeded; its step did not commit.
		a.hookCtx(ctx, HookEvent{Kind: HookActivityFinished, Name: call.name, Ref: call.id, Attempt: n, Duration: time.Since(start)})
		a.restore(m)
		a.fail(err)
	case encErr != nil:
		err = encErr
	case errors.Is(err, persistence.ErrTxTimeout):
		err = fmt.Errorf("%w: %w", ErrActivityTimeout, err)
	case call.timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) && isCtxErr(err):
		err = fmt.Errorf("%w after %v: %w", ErrActivityTimeout, call.timeout, err)
	case errors.Is(err, persistence.ErrUnsupported):
		err = supervisor.Terminal(err)
	}
	a.hookCtx(ctx, HookEvent{Kind: HookActivityFinished, Name: call.name, Ref: call.id, Attempt: n, Err: err, Duration: time.Since(start)})
	if err != nil {
		return nil, err, false
	}
	a.apply(c, recorded)
	a.committed(step, res, take)
	return got, nil, true
}
