package events

import (
	"context"
	"sync"
	"time"

	"github.com/nornlabs/norn/actor"
)

// maxCoalesce bounds how many messages the requests merged into one store
// step carry; the rest wait for the next step.
const maxCoalesce = 512

// coalescer merges the deliveries of concurrent requests into shared store
// steps: while one step commits, the requests that arrive queue up, and
// the next step carries all of them. A step costs the store's writer the
// same bookkeeping whatever it carries, so under load this spends the
// writer's time on messages rather than on steps; a lone request goes
// through at once. Each request still gets its own outcome: if a merged
// step fails, its requests are committed again one by one, each all or
// nothing as before, so that one bad request fails only itself.
//
// There is no goroutine of its own: the first request to find nobody
// committing becomes the leader, commits the queue, and hands the lead to
// a request that arrived meanwhile.
type coalescer struct {
	sys *actor.System

	mu      sync.Mutex
	queue   []*delivery
	leading bool // a leader is committing
	arrived chan struct{}
	target  int           // requests a leader waits for (see gather)
	commitD time.Duration // how long the last merged step took
}

// delivery is one request's messages waiting in the coalescer.
type delivery struct {
	ctx  context.Context
	outs []actor.Outgoing
	err  error
	// wake is signalled once: with done set, the outcome is in err;
	// otherwise this request is the next leader.
	wake chan struct{}
	done bool
}

// publish commits outs in one store step, possibly shared with other
// requests' messages, and returns when they are durable (or why not).
func (c *coalescer) publish(ctx context.Context, outs []actor.Outgoing) error {
	d := &delivery{ctx: ctx, outs: outs, wake: make(chan struct{}, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, d)
	lead := !c.leading
	c.leading = true
	if c.arrived == nil {
		c.arrived = make(chan struct{}, 1)
	}
	select {
	case c.arrived <- struct{}{}:
	default:
	}
	c.mu.Unlock()
	if !lead {
		// Once queued the messages are committed whatever ctx does (as a
		// store step is): wait for the outcome, or for the lead.
		<-d.wake
		c.mu.Lock()
		done := d.done
		c.mu.Unlock()
		if done {
			return d.err
		}
	}
	for {
		reached := c.gather()
		c.mu.Lock()
		batch, n := c.take()
		c.mu.Unlock()
		t0 := time.Now()
		c.commit(batch, n)
		c.mu.Lock()
		c.commitD = time.Since(t0)
		c.target = len(batch)
		if reached {
			c.target++
		}
		c.mu.Unlock()
		c.mu.Lock()
		if d.done {
			// Hand the lead to the oldest waiting request, if any.
			if len(c.queue) > 0 {
				c.queue[0].wake <- struct{}{}
			} else {
				c.leading = false
			}
			c.mu.Unlock()
			return d.err
		}
		c.mu.Unlock()
	}
}

// gather waits, briefly, for the queue to reach the target: one request
// more than the last step carried, after a step whose target was
// reached, or as many as it carried. Without it, a closed loop of N
// clients settles into two halves that take turns, each waiting for the
// other's commit; with it they come to share one. It waits at most half
// the last commit's time (and 1ms), and not at all after a step of one
// request. It reports whether the target was reached.
func (c *coalescer) gather() bool {
	c.mu.Lock()
	target, d := c.target, min(c.commitD/2, time.Millisecond)
	c.mu.Unlock()
	if target <= 1 || d <= 0 {
		return false
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		c.mu.Lock()
		n := len(c.queue)
		c.mu.Unlock()
		if n >= target {
			return true
		}
		select {
		case <-c.arrived:
		case <-timer.C:
			return false
		}
	}
}

// take removes the requests for the next step from the queue (under mu):
// as many as fit in maxCoalesce messages, and at least one.
func (c *coalescer) take() ([]*delivery, int) {
	n, k := 0, 0
	for k < len(c.queue) && (k == 0 || n+len(c.queue[k].outs) <= maxCoalesce) {
		n += len(c.queue[k].outs)
		k++
	}
	batch := c.queue[:k:k]
	c.queue = c.queue[k:]
	if len(c.queue) == 0 {
		c.queue = nil
	}
	return batch, n
}

// commit commits batch (n messages in all) and sets every request's
// outcome.
func (c *coalescer) commit(batch []*delivery, n int) {
	var err error
	if len(batch) == 1 {
		_, err = c.sys.PublishBatch(batch[0].ctx, batch[0].outs)
		batch[0].err = err
	} else {
		all := make([]actor.Outgoing, 0, n)
		for _, d := range batch {
			all = append(all, d.outs...)
		}
		// Not one request's context: its client leaving must not fail
		// the others.
		if _, err = c.sys.PublishBatch(context.WithoutCancel(batch[0].ctx), all); err != nil {
			// Something in the step failed it: commit each request on its
			// own, so that only the one at fault fails, with its own error.
			for _, d := range batch {
				_, d.err = c.sys.PublishBatch(d.ctx, d.outs)
			}
		}
	}
	c.mu.Lock()
	for _, d := range batch {
		d.done = true
		select {
		case d.wake <- struct{}{}:
		default: // the leader's own, already signalled or never waited on
		}
	}
	c.mu.Unlock()
}
