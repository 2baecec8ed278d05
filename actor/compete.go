package actor

import (
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// Competing consumers are woken one per published message, not all at
// once: waking every parked consumer for each message makes all but one of
// them read the queue and lose the race for the claim.
//
// The protocol, all under System.mu:
//
//   - An activation registers what its receives accept (waitRecv) before it
//     reads its mailbox, and stays registered until a receive takes
//     something or its wait ends. A message committed after the
//     registration wakes it (or another registered consumer); one committed
//     before is seen by the read. So no message is left between a
//     consumer's look and its park.
//   - A published message wakes one registered consumer whose receives
//     accept it, which is unregistered at once (the next message wakes
//     another) and holds the wake (compWoken) until its next mailbox read.
//     With no consumer registered, busy consumers look before they park,
//     and subscribers not live here (passivated, starting, on another node)
//     are woken as before.
//   - A consumer that claims a message while it saw more waiting wakes the
//     next one, so that a burst drains in parallel; one that stops, crashes
//     or leaves its wait while holding a wake passes the wake on.

// acceptsQueued reports whether one of the receives rs may take a message
// of type typ on channel ch, and whether that is sure (no filter left to
// reject it).
func acceptsQueued(rs []mailbox.Receive, ch, typ string) (ok, sure bool) {
	for _, r := range rs {
		if may, certain := r.MayAccept(ch, typ); may {
			ok = true
			if certain {
				return true, true
			}
		}
	}
	return ok, false
}

// consumerWaiting registers a as about to read its mailbox for recv; the
// wakes it was given are served by that read.
func (s *System) consumerWaiting(a *activation, recv []*command) {
	rs := make([]mailbox.Receive, 0, len(recv))
	for _, c := range recv {
		if !c.Done() {
			rs = append(rs, c.recv.accept())
		}
	}
	s.mu.Lock()
	a.waitRecv = rs
	a.compWoken = nil
	s.mu.Unlock()
	a.registered = true
}

// consumerBusy ends a's registration; wakes it was given since its last
// read go to another consumer.
func (s *System) consumerBusy(a *activation) {
	if !a.registered {
		return
	}
	a.registered = false
	s.mu.Lock()
	a.waitRecv = nil
	held := a.compWoken
	a.compWoken = nil
	s.mu.Unlock()
	for _, q := range held {
		s.wakeQueued(q, a)
	}
}

// passOnWakes hands the wakes an activation that ends or restarts was
// given and did not serve to other consumers.
func (s *System) passOnWakes(a *activation) {
	s.mu.Lock()
	a.waitRecv = nil
	held := a.compWoken
	a.compWoken = nil
	s.mu.Unlock()
	for _, q := range held {
		s.wakeQueued(q, a)
	}
}

// chainQueued wakes one more registered consumer of ch after a claimed one
// there while a's read saw more messages waiting.
func (s *System) chainQueued(a *activation, ch string) {
	s.mu.Lock()
	subs := s.queueSubs[ch]
	s.mu.Unlock()
	if len(subs) > 0 {
		s.wakeQueued(persistence.QueuedMessage{Channel: ch, Subscribers: subs}, a)
	}
}

// wakeQueued wakes one consumer for a message in ch's queue (see the top
// of this file); except is left out (it is passing the wake on).
func (s *System) wakeQueued(q persistence.QueuedMessage, except *activation) {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		s.wakeMany(q.Subscribers)
		return
	}
	if q.Channel != "" && len(q.Subscribers) > 0 {
		s.queueSubs[q.Channel] = q.Subscribers
	}
	var pick *activation
	var cold []string
	n := len(q.Subscribers)
	start := s.queueRR
	s.queueRR++
	for i := range n {
		id := q.Subscribers[(start+i)%n]
		a, live := s.acts[id]
		if !live || a.passivating {
			cold = append(cold, id)
			continue
		}
		if a == except || a.waitRecv == nil {
			continue // busy: it reads its mailbox before it parks
		}
		ok, sure := acceptsQueued(a.waitRecv, q.Channel, q.Type)
		switch {
		case !ok:
		case !sure:
			// A filter may reject it: wake this one as well, as before.
			s.signalLocked(a, sigWake)
		case pick == nil:
			pick = a
		}
	}
	if pick != nil {
		pick.waitRecv = nil
		pick.compWoken = append(pick.compWoken, q)
		s.signalLocked(pick, sigWake)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if len(cold) > 0 {
		s.wakeMany(cold)
	}
}

// wakeCommitted wakes the addressees of a commit: every instance Woken
// lists for another reason than a competing queue, and one consumer per
// queued message.
func (s *System) wakeCommitted(self string, res persistence.StepResult) {
	if len(res.Queued) == 0 {
		var last string
		woken := res.Woken[:0:0]
		for _, id := range res.Woken {
			if id == self || id == last {
				continue
			}
			last = id
			woken = append(woken, id)
		}
		s.wakeMany(woken)
		return
	}
	// Woken names a competing subscriber once per queued message: what is
	// left after taking those out was woken for its own mail.
	count := make(map[string]int, len(res.Woken))
	for _, id := range res.Woken {
		count[id]++
	}
	for _, q := range res.Queued {
		for _, id := range q.Subscribers {
			count[id]--
		}
	}
	var woken []string
	for id, n := range count {
		if n > 0 && id != self {
			woken = append(woken, id)
		}
	}
	s.wakeMany(woken)
	for _, q := range res.Queued {
		s.wakeQueued(q, nil)
	}
}
