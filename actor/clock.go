package actor

import (
	"sync"
	"time"
)

// Clock is the time a node reads and waits on for what workflows see:
// Context.Now, the due times of Sleep, Timer and receive timeouts, the
// waits between activity retries, and the firing of durable timers. The
// default (Config.Clock nil) is real time. Package norntest passes a
// virtual clock, so that a test of a 48-hour timeout skips the 48 hours.
//
// What stays on real time whatever the Clock: leases and their renewal
// (they guard against two live processes, which only real time can
// tell), passivation, recovery scans, retention and pruning, restart
// back-offs of supervised instances, activity timeouts (an activity runs
// real code, and its timeout bounds that code's real run time) and the
// timestamps events are recorded with.
type Clock interface {
	// Now is the current time on this clock.
	Now() time.Time
	// AfterFunc calls f, once, when d has passed on this clock; stop
	// cancels the call and reports whether it did (false: f was called or
	// is being called).
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// realClock is Config.Clock's default.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// now is the current time on the node's clock (a Replay without Clock:
// real time).
func (v *env) now() time.Time {
	if v.cfg.Clock == nil {
		return time.Now()
	}
	return v.cfg.Clock.Now()
}

// busy adds delta to the node's work in hand (see System.Idle); a Replay
// has no System and counts nothing.
func (a *activation) busy(delta int64) {
	if a.sys != nil {
		a.sys.work.Add(delta)
	}
}

// Idle reports whether the node has no work in hand at this moment: every
// activation is parked, no activity attempt is running and no outcome is
// waiting to be recorded, no wake-up or fired timer is waiting to be acted
// on, no start, timer load or recovery scan is in progress, and no call
// from outside (Spawn, Send, Cancel...) is running. Only a wait on the
// Clock (a timer, a receive timeout, a retry back-off) or something from
// outside can then make anything happen. Package norntest uses it to move
// a virtual clock only when nothing can happen before the next due time.
func (s *System) Idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.work.Load() == 0 && s.starts.Len() == 0
}

// clockTimer fires once on the node's clock. Its firing counts as work
// (see Idle) from the moment it fires until it is received from C (the
// receiver then carries that count) or dropped by Stop, so that a node
// that was just sent a due time never looks idle.
type clockTimer struct {
	C    chan struct{}
	s    *System
	mu   sync.Mutex
	done bool
	stop func() bool
}

func (s *System) newClockTimer(d time.Duration) *clockTimer {
	t := &clockTimer{C: make(chan struct{}, 1), s: s}
	t.stop = s.cfg.Clock.AfterFunc(d, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !t.done {
			t.done = true
			s.work.Add(1)
			t.C <- struct{}{}
		}
	})
	return t
}

// Stop cancels t; a firing not received is dropped with its count.
func (t *clockTimer) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done = true
	t.stop()
	select {
	case <-t.C:
		t.s.work.Add(-1)
	default:
	}
}
