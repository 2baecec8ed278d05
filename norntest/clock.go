package norntest

import (
	"sort"
	"sync"
	"time"
)

// Clock is a virtual clock (an actor.Clock): it stands still until it is
// moved, by Env.Advance or by the waits of the kit, which move it to the
// next due time whenever the node is idle.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	seq     int
	waiters []*waiter
	// firing counts calls of AfterFunc with nothing left to wait: their
	// function runs on a goroutine of its own, and the node is not idle
	// until it has run.
	firing int
}

type waiter struct {
	at  time.Time
	seq int // registration order, to fire waiters due at the same time in order
	f   func()
}

// NewClock returns a clock that reads start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc calls f once the clock has been moved d ahead (at once, on a
// goroutine of its own, if d is not positive). The returned stop cancels
// the call and reports whether it did.
func (c *Clock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d <= 0 {
		c.firing++
		go func() {
			f()
			c.mu.Lock()
			c.firing--
			c.mu.Unlock()
		}()
		return func() bool { return false }
	}
	c.seq++
	w := &waiter{at: c.now.Add(d), seq: c.seq, f: f}
	c.waiters = append(c.waiters, w)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.waiters {
			if x == w {
				c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
				return true
			}
		}
		return false
	}
}

// next is the earliest due time waited for, and whether there is one.
func (c *Clock) next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiters) == 0 {
		return time.Time{}, false
	}
	t := c.waiters[0].at
	for _, w := range c.waiters[1:] {
		if w.at.Before(t) {
			t = w.at
		}
	}
	return t, true
}

// settled reports whether no immediate call is running.
func (c *Clock) settled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.firing == 0
}

// Pending is how many waits are registered on the clock.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// moveTo sets the clock to t (if later) and calls, in due order, the
// functions due by then. They run on the caller's goroutine, outside the
// clock's lock (they may stop other waits).
func (c *Clock) moveTo(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.now = t
	}
	var due []*waiter
	keep := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			due = append(due, w)
		} else {
			keep = append(keep, w)
		}
	}
	c.waiters = keep
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool {
		if !due[i].at.Equal(due[j].at) {
			return due[i].at.Before(due[j].at)
		}
		return due[i].seq < due[j].seq
	})
	for _, w := range due {
		w.f()
	}
}
