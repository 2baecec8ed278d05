package actor

import (
	"strings"
	"sync"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// A node's fetcher for competing channels. A consumer waiting on one
// competing channel asks the fetcher of that channel for a message
// instead of reading its mailbox: the asks that meet there while a claim
// is under way are served together by the next one, a single
// Store.ClaimQueue that moves one message into each consumer's own
// mailbox. So a drain costs one statement per batch of consumers rather
// than a mailbox read and a contested claim per message, a consumer takes
// a message only when it waits for one (nothing queues up behind a slow
// handler), and a message is claimed only for a consumer that takes it at
// once. Under a backlog the next claim waits, briefly, for the consumers
// the last one served to ask again (see gather), so that each claim
// serves them all rather than alternately one and the rest.
//
// On a store with a single writer (SQLite) a claim that moves a message is
// a turn of that writer of its own, and the consume of the claimed
// message commits with the consumer's next step, often its park: with
// messages arriving one at a time, two turns per message where a mailbox
// read (which runs beside the writer) and a consume that claims the
// message in its own write take one. There the fetcher claims only on a
// backlog: when the last claim, or the last consumer's read, saw more
// queued than it took (the channel's fetcher is kept while it has one,
// so that the next ask knows). Otherwise it tells the consumers that ask
// to read their mailboxes as a receive without the fetcher does (see
// readReply); under a backlog a batch's claim is one write however many
// consumers it serves, and their consumes commit together with their
// next steps. A claim never runs beside this node's reads of the
// channel: an ask that finds a backlog while reads are under way waits
// for them to end. On other stores every ask is served by a claim.
//
// Exactly once: the claim moves the message into the consumer's mailbox
// (durably, bound to the instance, not to this node); the consumer records
// the take in its history in the step that consumes it. If the activation
// stops or crashes in between, the message waits in its mailbox for the
// instance's next activation, which reads its mailbox before it fetches;
// if the instance unsubscribes or ends first, the message goes back to
// the queue with that step. The claim goes only to consumers whose lease
// this node holds, so a stale activation claims nothing. A consumer that
// reads its mailbox instead takes a queued message only with a step that
// claims it, which commits only if the message is still queued: if a
// claim (on another node) moved it first, the step is undone and the
// consumer asks again.

// fetchers holds the fetcher of each competing channel; the zero value is
// ready. There is no goroutine: the first consumer to ask runs the claim
// for all who asked meanwhile (or tells them to read), then hands the
// lead to one who asked during its claim (see System.fetchQueued).
type fetchers struct {
	mu sync.Mutex
	by map[string]*channelFetch
	// reads: claim only on a backlog (the store has a single writer).
	reads bool
	// waitFor, if set, replaces a gather's bound (tests).
	waitFor time.Duration
}

// channelFetch is one channel's fetcher; guarded by fetchers.mu.
type channelFetch struct {
	pending []*fetchReq
	running bool // an ask holds the lead (a claim runs, or it decides)
	// reading is how many consumers read their mailboxes instead.
	reading int
	// backlog: the last claim or read saw more queued than it took.
	backlog bool
	// Gathering (see gather): after a claim under a backlog, expect is
	// how many asks the next claim waits for (those pending when it ended
	// and those it served, which come back for their next message), for
	// at most took, the claim's own duration. gathered is closed when
	// they are in; missed: the last gather ran out of time.
	expect   int
	took     time.Duration
	gathered chan struct{}
	missed   bool
}

// gatheredIn ends the gather under way once the asks it waits for are in;
// fetchers.mu is held.
func (cf *channelFetch) gatheredIn() {
	if cf.gathered != nil && len(cf.pending) >= cf.expect {
		close(cf.gathered)
		cf.gathered = nil
	}
}

type fetchReq struct {
	id    string
	types []string
	reply chan fetchReply
}

type fetchReply struct {
	m    persistence.Message
	ok   bool // m was claimed for this consumer
	more bool // the queue held more than the claim moved
	err  error
	lead bool // decide the next: a claim, or reads
	// read: no claim; read the mailbox and consume as a receive without
	// the fetcher does, then call done, saying whether the read saw more
	// queued than it took.
	read bool
	done func(backlog bool)
}

// fetchState is an activation's use of the fetchers (workflow goroutine).
type fetchState struct {
	// read: the activation read its mailbox since it started; until then
	// it has not seen what a previous activation left there.
	read bool
	// leftover: its mailbox may hold messages claimed for it that it has
	// not seen (left by a previous activation, or by a claim whose answer
	// was lost), so an empty fetch still reads the mailbox.
	leftover bool
	// owed: the activation is to look for queued messages (ask the
	// fetcher, or read its mailbox) before it parks. Set when it is woken,
	// or when the router saw a message left for busy consumers since it
	// last waited (see compete.Router.Wait); cleared by a look. A wait
	// that owes none parks without one: what was queued meanwhile woke
	// another consumer, or was handed to one. A message taken without a
	// look (handed, prefetched) leaves it owed.
	owed bool
}

// fetchQueued asks ch's fetcher for one message for consumer id, of types (nil:
// any type). It blocks until a claim has answered, or until the fetcher
// tells it to read its mailbox (reply.read: it must call reply.done).
//
// One ask at a time holds the lead (cf.running) and decides for all who
// wait: a claim for them, or reads. A claim never runs beside reads, so
// that it does not move a message a reader is about to consume: with a
// backlog, asks wait for the reads under way to end.
func (s *System) fetchQueued(ch, id string, types []string) fetchReply {
	req := &fetchReq{id: id, types: types, reply: make(chan fetchReply, 1)}
	f := &s.fetchers
	f.mu.Lock()
	if f.by == nil {
		f.by = map[string]*channelFetch{}
	}
	cf := f.by[ch]
	if cf == nil {
		cf = &channelFetch{}
		f.by[ch] = cf
	}
	cf.pending = append(cf.pending, req)
	cf.gatheredIn()
	lead := !cf.running && !s.waitReads(cf)
	for {
		if !lead {
			f.mu.Unlock()
			r := <-req.reply
			if !r.lead {
				return r
			}
			f.mu.Lock()
		}
		cf.running = true
		if !s.waitReads(cf) {
			break
		}
		// Reads began before the backlog was seen: the last to end
		// passes the lead back.
		cf.running, lead = false, false
	}
	if f.reads && !cf.backlog {
		// No claim: all who wait read their mailboxes.
		cf.running = false
		var mine fetchReply
		for _, r := range cf.pending {
			rep := s.readReply(ch, cf)
			if r == req {
				mine = rep
			} else {
				r.reply <- rep
			}
		}
		cf.pending = nil
		f.mu.Unlock()
		return mine
	}
	s.gather(cf)
	batch := cf.pending
	cf.pending = nil
	f.mu.Unlock()

	start := time.Now()
	mine, more, served := s.claimFor(ch, batch, req)

	f.mu.Lock()
	cf.backlog = more
	cf.expect, cf.took = len(cf.pending)+served, time.Since(start)
	cf.running = false
	s.passLead(ch, cf)
	f.mu.Unlock()
	return mine
}

// maxGather caps a gather's wait: a store slow to claim must not also
// hold a stop up for as long.
const maxGather = 10 * time.Millisecond

// gather holds the lead of cf, under a backlog, until the consumers the
// last claim served have asked again, so that one claim serves them all.
// Without it, the first of them to come back would claim for itself
// alone while the others queued behind it, and claims would alternate
// between one consumer and the rest. It waits at most as long as the last
// claim took (and at most maxGather), and not at all after a gather that
// ran out of time (a consumer that ends, parks elsewhere or runs a slow
// handler does not come back soon), so that a lull costs at most one
// claim's time every other claim. fetchers.mu is held, and held again on
// return.
func (s *System) gather(cf *channelFetch) {
	if !cf.backlog || len(cf.pending) >= cf.expect {
		return
	}
	if cf.missed {
		cf.missed = false
		return
	}
	g := make(chan struct{})
	cf.gathered = g
	s.fetchers.mu.Unlock()
	s.inGather()
	wait := min(cf.took, maxGather)
	if s.fetchers.waitFor > 0 {
		wait = s.fetchers.waitFor
	}
	t := time.NewTimer(wait)
	select {
	case <-g:
	case <-t.C:
	case <-s.ctx.Done():
	}
	t.Stop()
	s.fetchers.mu.Lock()
	if cf.gathered == g {
		cf.gathered = nil
		cf.missed = true
	}
}

// fetchAway tells ch's fetcher that a consumer its last claim served
// commits a step before it asks again: a gather is not to wait for it.
func (s *System) fetchAway(ch string) {
	f := &s.fetchers
	f.mu.Lock()
	defer f.mu.Unlock()
	cf := f.by[ch]
	if cf == nil || cf.expect == 0 {
		return
	}
	cf.expect--
	cf.gatheredIn()
}

// waitReads reports whether the asks on cf must wait for the reads under
// way: there is a backlog, to be served by a claim; fetchers.mu is held.
func (s *System) waitReads(cf *channelFetch) bool {
	return s.fetchers.reads && cf.backlog && cf.reading > 0
}

// passLead hands the lead of cf, free, to the first ask waiting, if it
// may decide now; else, if nobody uses cf, forgets it, unless it saw a
// backlog: the next ask is to claim (and to gather; see gather).
// fetchers.mu is held.
func (s *System) passLead(ch string, cf *channelFetch) {
	switch {
	case cf.running:
	case len(cf.pending) > 0:
		if !s.waitReads(cf) {
			cf.running = true
			cf.pending[0].reply <- fetchReply{lead: true}
		}
	case cf.reading == 0 && !cf.backlog:
		delete(s.fetchers.by, ch)
	}
}

// readReply tells a consumer to read its mailbox, counted in cf.reading
// until it is done; fetchers.mu is held.
func (s *System) readReply(ch string, cf *channelFetch) fetchReply {
	cf.reading++
	done := false
	return fetchReply{read: true, done: func(backlog bool) {
		if done {
			return
		}
		done = true
		f := &s.fetchers
		f.mu.Lock()
		cf.reading--
		cf.backlog = backlog
		s.passLead(ch, cf)
		f.mu.Unlock()
	}}
}

// claimFor runs the claims for batch, one per set of types asked for,
// answers every request but self's, and returns self's answer, whether a
// claim left more queued and how many messages the claims moved.
func (s *System) claimFor(ch string, batch []*fetchReq, self *fetchReq) (mine fetchReply, more bool, served int) {
	groups := map[string][]*fetchReq{}
	var order []string
	for _, r := range batch {
		k := "\x00"
		if r.types != nil {
			k = strings.Join(r.types, "\x00")
		}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	for _, k := range order {
		for reqs := groups[k]; len(reqs) > 0; {
			n := min(len(reqs), persistence.MaxQueueClaim)
			part := reqs[:n]
			reqs = reqs[n:]
			ids := make([]string, len(part))
			for i, r := range part {
				ids[i] = r.id
			}
			qc, err := s.store.ClaimQueue(s.ctx, s.cfg.NodeID, ch, part[0].types, ids)
			more = more || qc.More
			served += len(qc.Messages)
			got := make(map[string]persistence.Message, len(qc.Messages))
			for _, m := range qc.Messages {
				got[m.Target] = m
			}
			for _, r := range part {
				m, ok := got[r.id]
				rep := fetchReply{m: m, ok: ok, more: qc.More, err: err}
				if r == self {
					mine = rep
				} else {
					r.reply <- rep
				}
			}
		}
	}
	return mine, more, served
}

// fetchQueued serves the activation's one waited-for receive from its
// channel's fetcher when it can: the receive is on a competing channel of
// this instance, takes what it accepts by type alone (no sender or
// payload filter, no prefetch), and the activation holds its lease and
// has read its mailbox once. It reports whether the receive took a
// message, and whether the mailbox must still be read (the fetch took
// nothing and the queue, or the mailbox, may hold something for it). With
// done set the fetcher made no claim and the mailbox must be read: done
// is to be called once the read (and the consume of what it found) is
// over, however that ends, saying whether it saw more queued than it
// took.
func (a *activation) fetchQueued(recv []*command) (took, read bool, done func(backlog bool)) {
	c := a.fetchable(recv)
	if c == nil {
		return false, true, nil
	}
	if !a.fetch.owed {
		return false, a.fetch.leftover, nil
	}
	if len(a.consumed) >= flushFetchedAt {
		// A consumer fed by claims never reads its mailbox and, while the
		// queue lasts, never parks: commit its takes every so often, so
		// that a long drain does not pile them into one huge step (held
		// in memory, replayed after a crash, and reported only at its
		// end). The fetcher's next claim does not wait for it meanwhile.
		a.sys.fetchAway(c.recv.spec.Channel)
		a.flush()
	}
	ch := c.recv.spec.Channel
	r := a.sys.fetchQueued(ch, a.id, c.recv.accept().Types())
	a.fetch.owed = false // a claim looked, or the read it asks for will
	if r.read {
		return false, true, r.done
	}
	if r.err != nil {
		// The claim may have committed unanswered: read the mailbox,
		// where what it moved waits.
		a.sys.log.Debug("fetch from queue failed; reading the mailbox", "instance", a.id, "channel", ch, "err", r.err)
		a.fetch.leftover = true
		return false, true, nil
	}
	if !r.ok {
		return false, r.more || a.fetch.leftover, nil
	}
	a.consume(c, r.m, nil)
	if r.more {
		// More waiting than this consumer takes: wake the next.
		a.sys.chainQueued(a, ch)
	}
	return true, false, nil
}

// flushFetchedAt is how many messages a pending step may consume before
// a fetch commits it first.
const flushFetchedAt = 256

// fetchable is the receive fetchQueued may serve, or nil.
func (a *activation) fetchable(recv []*command) *command {
	if !a.fetch.read || !a.leased.Load() || a.watchLinks() {
		return nil
	}
	var c *command
	for _, r := range recv {
		if r.Done() {
			continue
		}
		if c != nil {
			return nil // several receives: the mailbox order decides
		}
		c = r
	}
	if c == nil {
		return nil
	}
	sp := c.recv.spec
	if !sp.HasChannel || sp.HasFrom || len(sp.Preds) > 0 || !a.competing[sp.Channel] || a.prefetch[sp.Channel] > 1 {
		return nil
	}
	return c
}

// noteCompeting records whether the instance consumes channel
// competitively.
func (a *activation) noteCompeting(channel string, competing bool) {
	if !competing {
		delete(a.competing, channel)
		return
	}
	if a.competing == nil {
		a.competing = map[string]bool{}
	}
	a.competing[channel] = true
}

// noteMailRead is what a mailbox read (msgs, a page of limit) tells the
// fetcher: the activation has read its mailbox, and whether messages
// claimed for it may still wait there unseen.
func (a *activation) noteMailRead(msgs []persistence.Message, limit int) {
	a.fetch.owed = false // the read saw the queue
	if !a.fetch.read {
		a.fetch.read, a.fetch.leftover = true, true
	}
	for _, m := range msgs {
		if m.Target == a.id && a.competing[m.Channel] {
			return // one is there: the next receive may take it
		}
	}
	if len(msgs) < limit {
		a.fetch.leftover = false
	}
}
