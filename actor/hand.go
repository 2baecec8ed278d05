package actor

import (
	"slices"
	"strings"
	"sync"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// Hand-off of published messages to idle consumers of this node.
//
// A message published from outside the workflows (Publish, Deliver) on a
// competing channel would be queued, and the consumer woken for it would
// then claim it from the queue: a second write. When one of this node's
// consumers waits idle on that channel and takes the message's type for
// sure, the publish names it (NewMessage.HandTo): the store puts the
// message straight into that consumer's mailbox, claimed for it, in the
// publish's own transaction (or queues it as usual if the consumer may no
// longer take one), and the runtime gives the committed message to the
// activation in memory, which takes it with its next step.
//
// Exactly once: a handed message is in the consumer's mailbox, bound to
// the instance, as a claimed one is; if the activation stops or crashes
// before taking it, the instance's next activation finds it there, and if
// the instance unsubscribes or ends first, it goes back to the queue. From
// the moment a publish picks the activation until the activation looks at
// its slot, the activation's mailbox reads leave the message alone (see
// handSlot.handing), so it is taken once, from the slot, with a step that
// commits like any take of the instance's own mail.

// handSlot holds what publishes handed to an activation and it has not
// looked at yet. Written by publishing goroutines, read by the workflow
// goroutine.
type handSlot struct {
	mu   sync.Mutex
	msgs []persistence.Message
	// lost: a publish that named this activation failed with its outcome
	// unknown, so its mailbox may hold a message it was not given.
	lost bool
	// coming are the IDs of the messages that publishes under way name
	// this activation for.
	coming map[string]bool
}

// expect notes that a publish of message id names the activation.
func (h *handSlot) expect(id string) {
	h.mu.Lock()
	if h.coming == nil {
		h.coming = map[string]bool{}
	}
	h.coming[id] = true
	h.mu.Unlock()
}

// put ends the publish of message id: msgs are what it handed, lost that
// its outcome is unknown.
func (h *handSlot) put(id string, msgs []persistence.Message, lost bool) {
	h.mu.Lock()
	h.msgs = append(h.msgs, msgs...)
	h.lost = h.lost || lost
	delete(h.coming, id)
	h.mu.Unlock()
}

// handing reports whether m is in the slot or may come to it: a mailbox
// read leaves it for the activation to take from the slot, so that the
// two never take it both.
func (h *handSlot) handing(m persistence.Message) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.coming[m.ID] {
		return true
	}
	for _, x := range h.msgs {
		if x.Seq == m.Seq {
			return true
		}
	}
	return false
}

// empty reports whether no message is in the slot or coming to it.
func (h *handSlot) empty() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.msgs) == 0 && len(h.coming) == 0
}

// keep puts back, ahead of what came since, messages taken from the slot
// and not looked at yet.
func (h *handSlot) keep(msgs []persistence.Message) {
	h.mu.Lock()
	h.msgs = slices.Concat(msgs, h.msgs)
	h.mu.Unlock()
}

// drop forgets the messages of channel: an unsubscribe puts them back in
// its queue.
func (h *handSlot) drop(channel string) {
	h.mu.Lock()
	h.msgs = slices.DeleteFunc(h.msgs, func(m persistence.Message) bool { return m.Channel == channel })
	h.mu.Unlock()
}

func (h *handSlot) take() ([]persistence.Message, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	msgs, lost := h.msgs, h.lost
	h.msgs, h.lost = nil, false
	return msgs, lost
}

// handOn lists the channels on which the activation may be handed a
// message while it waits on recv: competing channels it receives from,
// while it holds its lease and watches no linked child (whose Down it
// must see before it takes anything).
func (a *activation) handOn(recv []*command) []string {
	if !a.leased.Load() || a.watchLinks() {
		return nil
	}
	var chans []string
	for _, c := range recv {
		// A receive with a sender or payload filter may refuse what is
		// handed to it: it is never picked (see compete.Router.Pick).
		if sp := c.recv.spec; !c.Done() && sp.HasChannel && a.competing[sp.Channel] && !sp.HasFrom && len(sp.Preds) == 0 {
			chans = append(chans, sp.Channel)
		}
	}
	return chans
}

// pickHandTo chooses, for m about to be published from outside the
// workflows, a consumer of this node to hand it to, and names it in m; nil
// if there is none. Every such publish may hand off: the consumer's take
// commits together with its other takes (see deferTakes), so a hand-off
// costs the store nothing but the publish, where a queued message costs a
// claim as well.
func (s *System) pickHandTo(m *persistence.NewMessage) *activation {
	if m.Target != "" || m.Channel == "" || strings.HasPrefix(m.Channel, persistence.SystemChannelPrefix) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil
	}
	a, ok := s.competing.Pick(m.Channel, m.Type, func(a *activation) bool {
		return s.acts[a.id] == a && !a.passivating
	})
	if !ok {
		return nil
	}
	m.HandTo, m.HandOwner = a.id, s.cfg.NodeID
	a.hand.expect(m.ID)
	return a
}

// handed gives a the messages res says were handed to it (none if the
// store queued the message, err if the publish failed) and wakes it: it
// was unregistered when picked, and waits again only once woken. If a is
// no longer the instance's live activation (it stopped meanwhile), the
// one that is, if any, is told to read its mailbox, where they wait, and
// an instance with none is started, as any mail starts it.
func (s *System) handed(a *activation, id string, res persistence.StepResult, err error) {
	var mine []persistence.Message
	for _, m := range res.Handed {
		if m.Target == a.id {
			mine = append(mine, m)
		}
	}
	s.mu.Lock()
	cur := s.acts[a.id]
	a.hand.put(id, mine, err != nil && cur == a)
	if cur == a {
		s.signalLocked(a, sigHand)
		s.mu.Unlock()
		return
	}
	if cur != nil && (len(mine) > 0 || err != nil) {
		cur.hand.put("", nil, true)
	}
	s.mu.Unlock()
	s.wake(a.id)
}

// takeHanded takes, for one of recv, a message a publish handed to this
// activation; it reports whether it took one. Handed messages after the
// one it took wait for the next receive; those no receive waiting takes
// stay in its mailbox, where its next reads find them.
func (a *activation) takeHanded(recv []*command) bool {
	msgs, lost := a.hand.take()
	if lost {
		a.fetch.leftover = true
	}
	for i, m := range msgs {
		if a.consumed[m.Seq] {
			continue // taken by a mailbox read, in the step pending
		}
		c := a.handedReceive(recv, m)
		if c == nil {
			a.fetch.leftover = true
			continue
		}
		// The instance's own, as a message sent to it: the take commits
		// with its next step (see deferTakes).
		a.consume(c, m, nil)
		a.hand.keep(msgs[i+1:])
		return true
	}
	return false
}

// handedReceive is the first of recv, still waited for, that takes m.
func (a *activation) handedReceive(recv []*command, m persistence.Message) *command {
	msg := mailbox.FromStored(m)
	for _, c := range recv {
		if !c.Done() && c.recv.spec.HasChannel && c.recv.spec.Channel == m.Channel && c.recv.matches(msg) {
			return c
		}
	}
	return nil
}
