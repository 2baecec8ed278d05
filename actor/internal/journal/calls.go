package journal

// Call is a durable call that does not answer at once: an activity, a
// timer or a receive. It is resolved by its completion event, which the
// live run records in the order the workflow observes outcomes and replay
// reads back in that same order, so that Select picks the same call.
type Call struct {
	// Key names the call among the run's calls: ActivityKey, TimerKey or
	// ReceiveKey of its ID.
	Key string
	// Name and Digest, for an activity, are checked against its recorded
	// events (a call of another activity or input under the same ID is a
	// divergence).
	Name, Digest string
	// Resolve decodes the completion event into the call's outcome.
	Resolve func(e Event) (any, error)
	// Advance applies an event that moves the call on without resolving
	// it (a failed attempt before a retry, a receive starting its timeout).
	Advance func(e Event) error
	// Data is the driver's own state of the call.
	Data any

	done  bool
	rseq  int64
	value any
	err   error
}

// Done reports whether the call has its outcome.
func (c *Call) Done() bool { return c.done }

// Outcome is the call's value and error, once Done.
func (c *Call) Outcome() (any, error) { return c.value, c.err }

// Order is the call's place in resolution order (1 for the first call
// resolved in the run); 0 while unresolved.
func (c *Call) Order() int64 { return c.rseq }

// Keys of calls.
func ActivityKey(id string) string { return "a:" + id }

// TimerKey is the key of a timer call.
func TimerKey(id string) string { return "t:" + id }

// ReceiveKey is the key of a receive call.
func ReceiveKey(id string) string { return "r:" + id }

// completionKey maps a history event to the call it resolves or advances.
func completionKey(e Event) (string, bool) {
	switch e.Kind {
	case kindActivity, kindActivityRetry:
		return ActivityKey(e.Ref), true
	case kindTimerFired:
		return TimerKey(e.Name), true
	case kindReceived, kindReceiveTimeout, kindReceiveWait:
		return ReceiveKey(e.Name), true
	}
	return "", false
}

// progress reports events that advance a call without resolving it.
func progress(kind string) bool { return kind == kindActivityRetry || kind == kindReceiveWait }

// Add registers an unresolved call.
func (j *Journal) Add(c *Call) {
	j.calls[c.Key] = c
	j.order = append(j.order, c)
}

// Failed returns a call resolved at once with err (a call refused before
// it started), in its place in resolution order.
func (j *Journal) Failed(err error) *Call {
	j.rseq++
	return &Call{done: true, rseq: j.rseq, err: err}
}

// Calls lists the unresolved calls in the order they were issued. The
// slice is the journal's: a caller that resolves calls while walking it
// walks a copy.
func (j *Journal) Calls() []*Call { return j.order }

// Apply feeds c its completion or progress event e (recorded live, or read
// back by ReplayCompletions).
func (j *Journal) Apply(c *Call, e Event) error {
	if progress(e.Kind) {
		if c.Advance == nil {
			return Diverged(e, "a call that has no "+e.Kind)
		}
		return c.Advance(e)
	}
	c.done = true
	j.rseq++
	c.rseq = j.rseq
	c.value, c.err = c.Resolve(e)
	delete(j.calls, c.Key)
	for i, o := range j.order {
		if o == c {
			j.order = append(j.order[:i:i], j.order[i+1:]...)
			break
		}
	}
	return nil
}

// ReplayCompletions reads, while replaying, every completion or progress
// event of an unresolved call that comes next in history.
func (j *Journal) ReplayCompletions() error {
	for j.pos < j.hist.Len() {
		e, err := j.at(j.pos)
		if err != nil {
			return err
		}
		key, ok := completionKey(e)
		if !ok {
			return nil
		}
		c := j.calls[key]
		if c == nil {
			return nil
		}
		if c.Name != "" && (e.Name != c.Name || (e.Digest != "" && e.Digest != c.Digest)) {
			return Diverged(e, "activity "+c.Name+" ("+e.Ref+") with another input")
		}
		j.pos++
		if err := j.Apply(c, e); err != nil {
			return err
		}
	}
	return nil
}

// Wait is what a wait decided while replaying.
type Wait int

// What a wait does next.
const (
	// WaitLive: history is used up; the wait goes on live.
	WaitLive Wait = iota
	// WaitDone: what the workflow waits for is there.
	WaitDone
	// WaitCancelled: the workflow saw its cancel request here.
	WaitCancelled
	// WaitLinkedExit: a linked child's failure ended the instance here;
	// the event returned is the recorded exit.
	WaitLinkedExit
)

// ReplayWait takes the steps of a wait while replaying, in the order the
// live run takes them: completions that come next, then done, then a
// cancel already seen, then a linked child's failure or a cancel request
// recorded at this wait. Anything else next in history is a divergence.
func (j *Journal) ReplayWait(done func() bool) (Wait, Event, error) {
	for j.Replaying() {
		if err := j.ReplayCompletions(); err != nil {
			return 0, Event{}, err
		}
		if done() {
			return WaitDone, Event{}, nil
		}
		if j.cancel {
			return WaitCancelled, Event{}, nil
		}
		// A marker no call asked for (the Version call was dropped) may
		// hide a completion behind it: look again past it.
		before := j.pos
		if err := j.SkipMarkers(); err != nil {
			return 0, Event{}, err
		}
		if j.pos != before || !j.Replaying() {
			continue
		}
		e, err := j.at(j.pos)
		if err != nil {
			return 0, Event{}, err
		}
		switch e.Kind {
		case kindLinkedExit:
			j.pos++
			return WaitLinkedExit, e, nil
		case kindCancelObserved:
			j.pos++
			j.cancel = true
			return WaitCancelled, Event{}, nil
		}
		return 0, e, Diverged(e, "a wait for "+j.waitingFor())
	}
	return WaitLive, Event{}, nil
}

func (j *Journal) waitingFor() string {
	if len(j.order) == 0 {
		return "nothing"
	}
	return j.order[0].Key
}
