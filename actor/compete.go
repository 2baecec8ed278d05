package actor

import (
	"strings"
	"sync"
	"time"

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

// recvAccept is what one waited-for receive accepts, as a waker sees it.
type recvAccept struct {
	channel  string // "" with anyChan
	anyChan  bool   // no channel filter: any channel but the runtime's own
	typ      string // message type taken ("" any)
	filtered bool   // From or Match filters: it may reject what it accepts by channel and type
}

// accepts reports whether some receive may take a message of type typ on
// channel ch, and whether that is sure (no filter left to reject it).
func acceptsQueued(rs []recvAccept, ch, typ string) (ok, sure bool) {
	for _, r := range rs {
		if r.anyChan && strings.HasPrefix(ch, persistence.SystemChannelPrefix) || !r.anyChan && r.channel != ch {
			continue
		}
		if r.typ != "" && typ != "" && r.typ != typ {
			continue
		}
		ok = true
		if !r.filtered {
			return true, true
		}
	}
	return ok, false
}

// consumerWaiting registers a as about to read its mailbox for recv; the
// wakes it was given are served by that read.
func (s *System) consumerWaiting(a *activation, recv []*command) {
	rs := make([]recvAccept, 0, len(recv))
	for _, c := range recv {
		if c.Done() {
			continue
		}
		sp := c.recv.spec
		rs = append(rs, recvAccept{channel: sp.Channel, anyChan: !sp.HasChannel, typ: c.recv.typ,
			filtered: sp.HasFrom || len(sp.Preds) > 0})
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

// claimSet holds the competing messages (by seq) that this node's consumers
// are claiming or have just claimed. A consumer skips those another holds:
// the store still decides every claim, so this only keeps local consumers
// from racing for one row (each lost race costs a failed step and a read).
// An entry stays for claimGrace after its commit, for the reads that began
// before it and still list the message as queued.
type claimSet struct {
	mu     sync.Mutex
	by     map[int64]claimEntry
	pruned time.Time
}

type claimEntry struct {
	a    *activation
	done time.Time // zero while the claim is in flight
}

const claimGrace = time.Second

// heldFrom reports whether the entry keeps a from the message: another
// activation claims it, or claimed it less than claimGrace ago. (A message
// still queued after that was given back, by an unsubscribe or an end.)
func (e claimEntry) heldFrom(a *activation, now time.Time) bool {
	return e.a != a && (e.done.IsZero() || now.Sub(e.done) < claimGrace)
}

// unclaimed drops from msgs the queued messages another activation holds.
func (cs *claimSet) unclaimed(a *activation, msgs []persistence.Message) []persistence.Message {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(cs.by) == 0 {
		return msgs
	}
	out := msgs[:0:0]
	now := time.Now()
	for _, m := range msgs {
		if e, ok := cs.by[m.Seq]; ok && m.Target == "" && e.heldFrom(a, now) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// hold takes m and what it can of claim for a; it fails if another took m
// meanwhile, and leaves out of claim what others took.
func (cs *claimSet) hold(a *activation, m persistence.Message, claim []persistence.Message) (bool, []persistence.Message) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.by == nil {
		cs.by = map[int64]claimEntry{}
	}
	now := time.Now()
	if len(cs.by) > 1024 && now.Sub(cs.pruned) > claimGrace/10 {
		cs.pruned = now
		for seq, e := range cs.by {
			if !e.done.IsZero() && now.Sub(e.done) > claimGrace {
				delete(cs.by, seq)
			}
		}
	}
	if e, ok := cs.by[m.Seq]; ok && e.heldFrom(a, now) {
		return false, nil
	}
	cs.by[m.Seq] = claimEntry{a: a}
	kept := claim[:0:0]
	for _, c := range claim {
		if e, ok := cs.by[c.Seq]; ok && e.heldFrom(a, now) {
			continue
		}
		cs.by[c.Seq] = claimEntry{a: a}
		kept = append(kept, c)
	}
	return true, kept
}

// release ends a's claim of m and claim: kept for claimGrace if it
// committed, dropped at once if not (the messages are still queued).
func (cs *claimSet) release(a *activation, m persistence.Message, claim []persistence.Message, committed bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	now := time.Now()
	for _, c := range append(claim, m) {
		if e, ok := cs.by[c.Seq]; ok && e.a == a {
			if committed {
				cs.by[c.Seq] = claimEntry{a: a, done: now}
			} else {
				delete(cs.by, c.Seq)
			}
		}
	}
}

// forget drops a's entries: its claimed messages went back to the queue
// (it unsubscribed or ended), where other consumers must see them at once.
func (cs *claimSet) forget(a *activation) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for seq, e := range cs.by {
		if e.a == a {
			delete(cs.by, seq)
		}
	}
}
