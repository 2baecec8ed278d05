package actor

import (
	"slices"

	"github.com/nornlabs/norn/actor/internal/compete"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// Competing consumers are woken one per published message, not all at
// once (see package compete for the rules). The Router is driven under
// System.mu, which also guards the table of live activations it consults.

// consumerWaiting registers a as about to read its mailbox for recv; the
// wakes it was given are served by that read. It reports whether the
// router missed no message since a's previous wait, so that a need not
// look at the queue for it (see compete.Router.Wait).
func (s *System) consumerWaiting(a *activation, recv []*command) (quiet bool) {
	rs := make([]mailbox.Receive, 0, len(recv))
	for _, c := range recv {
		if !c.Done() {
			rs = append(rs, c.recv.accept())
		}
	}
	on, hand := a.consumesOn(recv), a.handOn(recv)
	s.mu.Lock()
	quiet = s.competing.Wait(a, rs, on, hand)
	s.mu.Unlock()
	a.registered = true
	return quiet
}

// queueUnsure makes the busy consumers look before they park: a commit
// that may have queued messages failed unanswered, so nobody was woken
// for what it queued.
func (s *System) queueUnsure() {
	s.mu.Lock()
	s.competing.Missed()
	s.mu.Unlock()
}

// consumerBusy ends a's registration; wakes it was given since its last
// read go to another consumer.
func (s *System) consumerBusy(a *activation) {
	if !a.registered {
		return
	}
	a.registered = false
	s.mu.Lock()
	held := s.competing.Busy(a)
	s.mu.Unlock()
	for _, q := range held {
		s.wakeQueued(q, a)
	}
}

// passOnWakes hands the wakes an activation that ends or restarts was
// given and did not serve to other consumers.
func (s *System) passOnWakes(a *activation) {
	s.mu.Lock()
	held := s.competing.Leave(a)
	s.mu.Unlock()
	for _, q := range held {
		s.wakeQueued(q, a)
	}
}

// chainQueued wakes one more registered consumer of ch after a claimed one
// there while a's read saw more messages waiting.
func (s *System) chainQueued(a *activation, ch string) {
	s.mu.Lock()
	subs := s.competing.Subscribers(ch)
	if len(subs) == 0 {
		// No commit here has named them yet: the busy ones look.
		s.competing.Missed()
	}
	s.mu.Unlock()
	if len(subs) > 0 {
		s.wakeQueued(persistence.QueuedMessage{Channel: ch, Subscribers: subs}, a)
	}
}

// wakeQueued wakes one consumer for a message in ch's queue; except is
// left out (it is passing the wake on).
func (s *System) wakeQueued(q persistence.QueuedMessage, except *activation) {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		s.wakeMany(q.Subscribers)
		return
	}
	d := s.competing.Route(q, except, s.liveConsumer, s.registeredLive)
	for _, a := range d.Wake {
		s.signalLocked(a, sigWake)
	}
	s.mu.Unlock()
	if len(d.Cold) > 0 {
		s.wakeMany(d.Cold)
	}
}

// liveConsumer is the activation of id live on this node, if any and not
// passivating; s.mu is held.
func (s *System) liveConsumer(id string) (*activation, compete.Liveness) {
	a, live := s.acts[id]
	if !live || a.passivating {
		return nil, compete.Cold
	}
	return a, compete.Live
}

// registeredLive reports whether a, registered with the router, is still
// the live activation of its instance here; s.mu is held.
func (s *System) registeredLive(a *activation) bool {
	return s.acts[a.id] == a && !a.passivating
}

// consumesOn are the channels a consumes competitively that its pending
// receives recv wait on: those a message queued there may wake it for.
func (a *activation) consumesOn(recv []*command) []string {
	if len(a.competing) == 0 {
		return nil
	}
	var chans []string
	for _, c := range recv {
		if c.Done() {
			continue
		}
		sp := c.recv.spec
		if !sp.HasChannel {
			// Any channel: every one it consumes.
			chans = chans[:0]
			for ch := range a.competing {
				chans = append(chans, ch)
			}
			return chans
		}
		if a.competing[sp.Channel] && !slices.Contains(chans, sp.Channel) {
			chans = append(chans, sp.Channel)
		}
	}
	return chans
}

// wakeCommitted wakes the addressees of a commit: every instance it gave
// mail for another reason than a competing queue, and one consumer per
// queued message.
func (s *System) wakeCommitted(self string, res persistence.StepResult) {
	s.wakeMany(compete.Addressees(self, res))
	for _, q := range res.Queued {
		s.wakeQueued(q, nil)
	}
}
