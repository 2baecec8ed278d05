package mailbox

import (
	"sync"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// ClaimGrace is how long a committed claim stays in a Claims set: reads
// that began before the commit still list the message as queued.
const ClaimGrace = time.Second

// Claims holds the queued competing messages (by Seq) that the consumers
// of one node, named by C, are claiming or have just claimed. A consumer
// skips the messages another holds: the store still decides every claim,
// so this only keeps local consumers from racing for one row (each lost
// race costs a failed step and another read). The zero value is ready;
// it is safe for concurrent use.
type Claims[C comparable] struct {
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu     sync.Mutex
	by     map[int64]claimEntry[C]
	pruned time.Time
}

type claimEntry[C comparable] struct {
	by   C
	done time.Time // zero while the claim is in flight
}

// heldFrom reports whether the entry keeps c from the message: another
// consumer claims it, or claimed it less than ClaimGrace ago. (A message
// still queued after that was given back, by an unsubscribe or an end.)
func (e claimEntry[C]) heldFrom(c C, now time.Time) bool {
	return e.by != c && (e.done.IsZero() || now.Sub(e.done) < ClaimGrace)
}

func (cs *Claims[C]) now() time.Time {
	if cs.Now != nil {
		return cs.Now()
	}
	return time.Now()
}

// Unclaimed drops from msgs the queued messages another consumer holds.
func (cs *Claims[C]) Unclaimed(c C, msgs []persistence.Message) []persistence.Message {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(cs.by) == 0 {
		return msgs
	}
	out := msgs[:0:0]
	now := cs.now()
	for _, m := range msgs {
		if e, ok := cs.by[m.Seq]; ok && m.Target == "" && e.heldFrom(c, now) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// Hold takes m, and what it can of ahead, for c. It fails if another
// consumer holds m, and leaves out of ahead what others hold.
func (cs *Claims[C]) Hold(c C, m persistence.Message, ahead []persistence.Message) (bool, []persistence.Message) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.by == nil {
		cs.by = map[int64]claimEntry[C]{}
	}
	now := cs.now()
	if len(cs.by) > 1024 && now.Sub(cs.pruned) > ClaimGrace/10 {
		cs.pruned = now
		for seq, e := range cs.by {
			if !e.done.IsZero() && now.Sub(e.done) > ClaimGrace {
				delete(cs.by, seq)
			}
		}
	}
	if e, ok := cs.by[m.Seq]; ok && e.heldFrom(c, now) {
		return false, nil
	}
	cs.by[m.Seq] = claimEntry[C]{by: c}
	kept := ahead[:0:0]
	for _, a := range ahead {
		if e, ok := cs.by[a.Seq]; ok && e.heldFrom(c, now) {
			continue
		}
		cs.by[a.Seq] = claimEntry[C]{by: c}
		kept = append(kept, a)
	}
	return true, kept
}

// Release ends c's hold of m and ahead: kept for ClaimGrace if the claim
// committed, dropped at once if not (the messages are still queued).
func (cs *Claims[C]) Release(c C, m persistence.Message, ahead []persistence.Message, committed bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	now := cs.now()
	release := func(seq int64) {
		if e, ok := cs.by[seq]; ok && e.by == c {
			if committed {
				cs.by[seq] = claimEntry[C]{by: c, done: now}
			} else {
				delete(cs.by, seq)
			}
		}
	}
	release(m.Seq)
	for _, x := range ahead {
		release(x.Seq)
	}
}

// Forget drops c's entries: its claimed messages went back to the queue
// (it unsubscribed or ended), where other consumers must see them at once.
func (cs *Claims[C]) Forget(c C) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for seq, e := range cs.by {
		if e.by == c {
			delete(cs.by, seq)
		}
	}
}
