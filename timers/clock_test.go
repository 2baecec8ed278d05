package timers

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// stepClock is a clock that moves only by move.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
	fns []stepWait
}

type stepWait struct {
	at     time.Time
	f      func()
	active *bool
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	active := true
	if d <= 0 {
		go f()
		return func() bool { return false }
	}
	c.fns = append(c.fns, stepWait{at: c.now.Add(d), f: f, active: &active})
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := active
		active = false
		return was
	}
}

func (c *stepClock) move(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	keep := c.fns[:0]
	for _, w := range c.fns {
		switch {
		case !*w.active:
		case !w.at.After(c.now):
			*w.active = false
			due = append(due, w.f)
		default:
			keep = append(keep, w)
		}
	}
	c.fns = keep
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

// With a Clock, timers fire when the clock reaches them, not on real time,
// and Work counts the service busy from New to its first load and from a
// due time coming up until its timers are fired.
func TestClockAndWork(t *testing.T) {
	t.Parallel()
	clock := &stepClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	src := &fakeSource{ts: []persistence.Timer{
		{Instance: "a", ID: "1", Due: clock.now.Add(time.Hour)},
		{Instance: "b", ID: "1", Due: clock.now.Add(2 * time.Hour)},
	}}
	var work atomic.Int64
	var fired sync.Map
	svc, err := New(Config{Source: src, Horizon: 24 * time.Hour, Clock: clock, Work: func(d int) { work.Add(int64(d)) },
		Fire: func(tm persistence.Timer) {
			if work.Load() <= 0 {
				t.Errorf("%s fired while the service counted no work", tm.Instance)
			}
			fired.Store(tm.Instance, true)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if work.Load() != 1 {
		t.Fatalf("work after New = %d, want 1 (the first load)", work.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = svc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	eventually(t, func() bool { return work.Load() == 0 && svc.Pending() == 2 })
	if _, ok := fired.Load("a"); ok {
		t.Fatal("a fired before the clock reached it")
	}
	clock.move(time.Hour)
	eventually(t, func() bool { _, ok := fired.Load("a"); return ok })
	eventually(t, func() bool { return work.Load() == 0 })
	if _, ok := fired.Load("b"); ok {
		t.Fatal("b fired an hour early")
	}
	clock.move(time.Hour)
	eventually(t, func() bool { _, ok := fired.Load("b"); return ok })
	eventually(t, func() bool { return work.Load() == 0 })
}
