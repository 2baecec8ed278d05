package actor

import "errors"

// Future is the outcome of a durable call that runs while the workflow goes
// on: an activity started with Go, a timer from ctx.Timer, a receive from
// ReceiveAsync. Its outcome is recorded in the order the workflow observes
// it, so replay resolves futures in the same order and Select picks the same
// one.
type Future[T any] struct {
	a *activation
	c *command
}

// Awaitable is any Future, for Select and WaitAll.
type Awaitable interface{ command() *command }

func (f *Future[T]) command() *command { return f.c }

// failedFuture is a future resolved at once with err (a call refused before
// it started).
func failedFuture[T any](a *activation, err error) *Future[T] {
	c := &command{Call: *a.j.Failed(err)}
	c.Data = c
	return &Future[T]{a: a, c: c}
}

// Ready reports whether the outcome is known (without waiting).
func (f *Future[T]) Ready() bool { return f.c.Done() }

// Get waits for the outcome. It returns ErrCancelled if the instance is
// cancelled while waiting.
func (f *Future[T]) Get(ctx *Context) (T, error) {
	var zero T
	err := ctx.a.await(f.c.Done, receives(f))
	if err != nil {
		return zero, err
	}
	out, err := f.c.Outcome()
	if err != nil {
		return zero, err
	}
	v, _ := out.(T)
	return v, nil
}

// Select waits until one of fs is ready and returns its index. If several
// are, it returns the one whose outcome was observed first (recorded
// first), so replay picks the same one.
func Select(ctx *Context, fs ...Awaitable) (int, error) {
	if len(fs) == 0 {
		return -1, errors.New("norn: Select of no futures")
	}
	pick := func() int {
		best := -1
		for i, f := range fs {
			c := f.command()
			if c.Done() && (best < 0 || c.Order() < fs[best].command().Order()) {
				best = i
			}
		}
		return best
	}
	if err := ctx.a.await(func() bool { return pick() >= 0 }, receives(fs...)); err != nil {
		return -1, err
	}
	return pick(), nil
}

// WaitAll waits until every one of fs is ready; their outcomes are then read
// with Get (which no longer waits).
func WaitAll(ctx *Context, fs ...Awaitable) error {
	return ctx.a.await(func() bool {
		for _, f := range fs {
			if !f.command().Done() {
				return false
			}
		}
		return true
	}, receives(fs...))
}

// receives lists the receive commands among fs: they take mail only while
// waited for.
func receives(fs ...Awaitable) []*command {
	var out []*command
	for _, f := range fs {
		if c := f.command(); c.recv != nil && !c.Done() {
			out = append(out, c)
		}
	}
	return out
}
