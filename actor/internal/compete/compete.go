package compete

import (
	"slices"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// Router holds the consumers of one node that wait on competing channels
// and picks the one each queued message wakes. C names a consumer (the
// runtime's activation). The zero value is not ready: use NewRouter. It is
// not safe for concurrent use (see the package doc).
type Router[C comparable] struct {
	// subs are the competing subscribers of each channel as the last
	// commit that queued a message there named them.
	subs map[string][]string
	// rr rotates the subscriber a message wakes first.
	rr int
	// waiting are the registered consumers and what their receives accept.
	waiting map[C][]mailbox.Receive
	// held are the queued messages whose wake a consumer was given and has
	// not served by a read yet.
	held map[C][]persistence.QueuedMessage
	// handable are the registered consumers that may be handed a message
	// published on each channel (see Pick), with the channels of each.
	handable map[string]map[C]struct{}
	handOn   map[C][]string
	// consumers are the registered consumers that consume each channel
	// competitively, with the channels of each: whom Route picks from when
	// the subscribers a message names are busy or not on this node (the
	// store names a bounded sample of a channel's subscribers).
	consumers map[string]map[C]struct{}
	consumeOn map[C][]string
	// misses counts the messages that may wait in a queue with no
	// registered consumer woken for them (see Missed), which the other
	// consumers are to look for before they park; since is its value at
	// each consumer's latest Wait.
	misses uint64
	since  map[C]uint64
}

// NewRouter returns an empty Router.
func NewRouter[C comparable]() *Router[C] {
	return &Router[C]{
		subs:     map[string][]string{},
		waiting:  map[C][]mailbox.Receive{},
		held:     map[C][]persistence.QueuedMessage{},
		handable: map[string]map[C]struct{}{},
		handOn:   map[C][]string{},
		since:    map[C]uint64{},

		consumers: map[string]map[C]struct{}{},
		consumeOn: map[C][]string{},
	}
}

// Wait registers c as about to read its mailbox for receives rs. The wakes
// it held are served by that read.
//
// on are the channels c consumes competitively that its receives wait on;
// handOn are those of them on which it may be handed a message at once
// (see Pick): c takes such a message from its receives without reading the
// store.
//
// quiet reports that c need not look for queued messages before it parks,
// as far as the router knows: since c's previous Wait, nothing was missed
// (every message Route saw woke a registered consumer, or was handed to
// one), and c holds no wake Route gave it. While registered c was woken
// for what it takes; busy, it missed nothing. It says nothing of other
// reasons to look (a wake from elsewhere, a backlog its last claim saw,
// messages left in its mailbox), and a consumer that looks at no queue
// after a Wait that was not quiet must take that look before its next.
func (r *Router[C]) Wait(c C, rs []mailbox.Receive, on, handOn []string) (quiet bool) {
	if rs == nil {
		rs = []mailbox.Receive{}
	}
	if s, ok := r.since[c]; ok {
		quiet = s == r.misses && len(r.held[c]) == 0
	}
	r.since[c] = r.misses
	r.unregister(c)
	r.waiting[c] = rs
	delete(r.held, c)
	index(r.consumers, r.consumeOn, c, on)
	index(r.handable, r.handOn, c, handOn)
	return quiet
}

// index adds c to the set of each of chans in sets, and notes them in of.
func index[C comparable](sets map[string]map[C]struct{}, of map[C][]string, c C, chans []string) {
	if len(chans) == 0 {
		return
	}
	of[c] = chans
	for _, ch := range chans {
		set := sets[ch]
		if set == nil {
			set = map[C]struct{}{}
			sets[ch] = set
		}
		set[c] = struct{}{}
	}
}

// unindex undoes index for c.
func unindex[C comparable](sets map[string]map[C]struct{}, of map[C][]string, c C) {
	for _, ch := range of[c] {
		set := sets[ch]
		delete(set, c)
		if len(set) == 0 {
			delete(sets, ch)
		}
	}
	delete(of, c)
}

// unregister takes c out of waiting and of the channels it consumes or may
// be handed messages on.
func (r *Router[C]) unregister(c C) {
	delete(r.waiting, c)
	unindex(r.consumers, r.consumeOn, c)
	unindex(r.handable, r.handOn, c)
}

// Busy ends c's registration: it took something, or its wait ended. It
// returns the wakes c was given since its last read, for the caller to
// route to another consumer (Route with except c).
func (r *Router[C]) Busy(c C) []persistence.QueuedMessage {
	r.unregister(c)
	held := r.held[c]
	delete(r.held, c)
	return held
}

// Pick chooses a registered consumer to hand a message of type typ,
// about to be published on channel ch, to: one that may be handed
// messages on ch (see Wait) and whose receives take the message for
// sure, live by live. It is unregistered, as Route's pick is, so that
// the next message goes to another; the caller wakes it whatever becomes
// of the hand-off (its wait then starts again). ok is false if there is
// none: the message is to be published as usual.
func (r *Router[C]) Pick(ch, typ string, live func(C) bool) (c C, ok bool) {
	for c := range r.handable[ch] {
		if may, sure := acceptsQueued(r.waiting[c], ch, typ); !may || !sure || !live(c) {
			continue
		}
		r.unregister(c)
		return c, true
	}
	return c, false
}

// Missed tells the router that a message may wait in a queue with no
// registered consumer woken for it (Route found none, or could not be
// asked: a commit failed unanswered, the subscribers are not known yet):
// every consumer is to look before it parks again (see Wait).
func (r *Router[C]) Missed() { r.misses++ }

// Leave is Busy for a consumer that stops, restarts or ends.
func (r *Router[C]) Leave(c C) []persistence.QueuedMessage {
	held := r.Busy(c)
	delete(r.since, c)
	return held
}

// Waiting reports whether c is registered.
func (r *Router[C]) Waiting(c C) bool {
	_, ok := r.waiting[c]
	return ok
}

// Subscribers returns the competing subscribers of ch the last queued
// message there named (nil if none has been seen).
func (r *Router[C]) Subscribers(ch string) []string { return r.subs[ch] }

// Liveness is what the runtime knows of a subscriber on this node.
type Liveness int

const (
	// Cold: not live here (passivated, passivating, starting, or on another
	// node); it is woken the ordinary way and reads its mailbox.
	Cold Liveness = iota
	// Live: a live activation of this node.
	Live
)

// Decision is what a queued message wakes.
type Decision[C comparable] struct {
	// Wake are the live consumers to signal: the one picked, and any whose
	// receives may accept the message without being sure to.
	Wake []C
	// Cold are the subscribers to wake the ordinary way, when no live
	// consumer was picked.
	Cold []string
}

// Route decides what q wakes. live tells, for a subscriber ID, the
// consumer that is live for it on this node, and registered whether a
// registered consumer is still live. except is left out (it is passing
// the wake on). The consumer picked is unregistered and holds q's wake
// until its next Wait, Busy or Leave.
//
// The subscribers q names come first, in turn. If none of them can take
// it (busy, or not on this node), a registered consumer of the channel
// may: the store names at most persistence.MaxQueuedSubscribers of a
// channel's subscribers, and the consumers waiting here need not be among
// them. Only when none is found are the cold subscribers woken.
func (r *Router[C]) Route(q persistence.QueuedMessage, except C, live func(id string) (C, Liveness), registered func(C) bool) Decision[C] {
	if q.Channel != "" && len(q.Subscribers) > 0 {
		r.subs[q.Channel] = q.Subscribers
	}
	var d Decision[C]
	var pick C
	picked := false
	n := len(q.Subscribers)
	start := r.rr
	r.rr++
	for i := range n {
		id := q.Subscribers[(start+i)%n]
		c, l := live(id)
		if l == Cold {
			d.Cold = append(d.Cold, id)
			continue
		}
		rs, registered := r.waiting[c]
		if c == except || !registered {
			continue // busy: it reads its mailbox before it parks
		}
		ok, sure := acceptsQueued(rs, q.Channel, q.Type)
		switch {
		case !ok:
		case !sure:
			// A filter may reject it: wake this one as well.
			d.Wake = append(d.Wake, c)
		case !picked:
			pick, picked = c, true
		}
	}
	if !picked {
		pick, picked = r.pickConsumer(q, except, registered, &d)
	}
	if picked {
		r.unregister(pick)
		r.held[pick] = append(r.held[pick], q)
		d.Wake = append(d.Wake, pick)
		d.Cold = nil
	} else {
		r.Missed()
	}
	return d
}

// pickConsumer looks for a registered consumer of q's channel whose
// receives take q for sure; one that may take it (a filter left to
// decide) is woken as well, as Route wakes those it names.
func (r *Router[C]) pickConsumer(q persistence.QueuedMessage, except C, registered func(C) bool, d *Decision[C]) (pick C, ok bool) {
	for c := range r.consumers[q.Channel] {
		if c == except || slices.Contains(d.Wake, c) || !registered(c) {
			continue
		}
		may, sure := acceptsQueued(r.waiting[c], q.Channel, q.Type)
		switch {
		case sure:
			return c, true
		case may:
			d.Wake = append(d.Wake, c)
		}
	}
	return pick, false
}

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

// Addressees splits the instances a commit by self woke: woken are those
// to wake for their own mail (each once, self left out), and the queued
// messages are to be routed one consumer each. StepResult.Woken names a
// competing subscriber once per queued message; what is left after taking
// those out was woken for its own mail.
func Addressees(self string, res persistence.StepResult) (woken []string) {
	if len(res.Queued) == 0 {
		var last string
		woken = res.Woken[:0:0]
		for _, id := range res.Woken {
			if id == self || id == last {
				continue
			}
			last = id
			woken = append(woken, id)
		}
		return woken
	}
	count := make(map[string]int, len(res.Woken))
	order := make([]string, 0, len(res.Woken))
	for _, id := range res.Woken {
		if count[id] == 0 {
			order = append(order, id)
		}
		count[id]++
	}
	for _, q := range res.Queued {
		for _, id := range q.Subscribers {
			count[id]--
		}
	}
	for _, id := range order {
		if count[id] > 0 && id != self {
			woken = append(woken, id)
		}
	}
	return woken
}
