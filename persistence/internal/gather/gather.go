// Package gather forms the batches of a group-commit writer: every request
// queued when the writer is ready, and, when fewer are queued than the
// previous commit carried, a short wait for the callers that commit just
// answered, who are usually back with their next request within tens of
// microseconds (PostgreSQL's commit_delay, for the same reason).
//
//	g := gather.New(reqs, maxBatch, 50*time.Microsecond)
//	for {
//		batch, ok := g.Next()
//		if !ok {
//			return // reqs closed and drained
//		}
//		commit(batch)
//	}
package gather

import "time"

// Gatherer forms batches from one request channel. It is owned by one
// writer goroutine.
type Gatherer[T any] struct {
	reqs  <-chan T
	max   int
	delay time.Duration
	batch []T
	prev  int // requests in the previous batch
	timer *time.Timer
}

// New returns a gatherer of batches of at most max requests from reqs;
// delay <= 0 never waits for more than is queued.
func New[T any](reqs <-chan T, max int, delay time.Duration) *Gatherer[T] {
	return &Gatherer[T]{reqs: reqs, max: max, delay: delay, batch: make([]T, 0, max)}
}

// Next blocks for a request and returns it with every other one queued,
// up to max; when that makes fewer than the previous batch, it waits up to
// the delay for that many. A caller alone (previous batch of one) never
// waits. The slice is reused by the next call. It reports false once reqs
// is closed and nothing is left.
func (g *Gatherer[T]) Next() ([]T, bool) {
	r, ok := <-g.reqs
	if !ok {
		return nil, false
	}
	g.batch = append(g.batch[:0], r)
	open := g.fill()
	if open && len(g.batch) < g.prev && g.delay > 0 {
		if g.timer == nil {
			g.timer = time.NewTimer(g.delay)
		} else {
			g.timer.Reset(g.delay)
		}
	wait:
		for len(g.batch) < g.prev && len(g.batch) < g.max {
			select {
			case r, ok := <-g.reqs:
				if !ok {
					break wait
				}
				g.batch = append(g.batch, r)
				if !g.fill() {
					break wait
				}
			case <-g.timer.C:
				break wait
			}
		}
		g.timer.Stop()
	}
	g.prev = len(g.batch)
	return g.batch, true
}

// fill adds the requests queued now, up to max. It reports false once reqs
// is closed.
func (g *Gatherer[T]) fill() bool {
	for len(g.batch) < g.max {
		select {
		case r, ok := <-g.reqs:
			if !ok {
				return false
			}
			g.batch = append(g.batch, r)
		default:
			return true
		}
	}
	return true
}
