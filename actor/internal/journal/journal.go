package journal

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/nornlabs/norn/norntype"
	"github.com/nornlabs/norn/persistence"
)

// The event kinds the core itself interprets (persistence.Event.Kind is a
// plain string).
const (
	kindStarted        = string(norntype.EventStarted)
	kindActivity       = string(norntype.EventActivity)
	kindActivityRetry  = string(norntype.EventActivityRetry)
	kindTimerFired     = string(norntype.EventTimerFired)
	kindReceived       = string(norntype.EventReceived)
	kindReceiveWait    = string(norntype.EventReceiveWait)
	kindReceiveTimeout = string(norntype.EventReceiveTimeout)
	kindLinkedExit     = string(norntype.EventLinkedExit)
	kindCancelObserved = string(norntype.EventCancelObserved)
	kindVersion        = string(norntype.EventVersion)
	kindCompleted      = string(norntype.EventCompleted)
	kindFailed         = string(norntype.EventFailed)
	kindCancelled      = string(norntype.EventCancelled)
)

// Event is one entry of an instance's history.
type Event = persistence.Event

// History is the recorded run a journal replays: events numbered from 0
// with no gaps. At may read from a store a page at a time; an error it
// returns is handed back by the Journal method that asked.
type History interface {
	Len() int
	At(i int) (persistence.Event, error)
}

// Events is a history held whole in memory.
type Events []persistence.Event

// Len is the number of events.
func (h Events) Len() int { return len(h) }

// At returns event i.
func (h Events) At(i int) (persistence.Event, error) {
	if i < 0 || i >= len(h) {
		return persistence.Event{}, fmt.Errorf("%w: history position %d read, the run has %d events", persistence.ErrHistoryGap, i, len(h))
	}
	return h[i], nil
}

// Divergence says that the code asked for something other than what
// history recorded at Seq.
type Divergence struct {
	Seq      int64
	Expected string // what history recorded, "kind name"
	Got      string // what the code asked for
}

func (d *Divergence) Error() string {
	return fmt.Sprintf("history event %d is %s but the code called %s", d.Seq, d.Expected, d.Got)
}

// Diverged is the *Divergence of event e against what the code asked for.
func Diverged(e persistence.Event, got string) *Divergence {
	return &Divergence{Seq: e.Seq, Expected: Describe(e), Got: got}
}

// Describe names an event as a divergence reports it: kind, name, and an
// activity's call ID.
func Describe(e persistence.Event) string {
	s := e.Kind
	if e.Name != "" {
		s += " " + e.Name
	}
	if e.Ref != "" && e.Kind == kindActivity {
		s += " (" + e.Ref + ")"
	}
	return s
}

// Journal is the replay and record state of one run of an instance.
type Journal struct {
	hist History
	pos  int   // next event to replay
	base int64 // seq of the first pending event
	live bool  // history was found used up (GoLive reported it)
	only bool  // replay only: history's end is the end of the run

	pending  []persistence.Event // recorded, not yet committed
	counters map[string]int      // deterministic call IDs per name
	calls    map[string]*Call    // unresolved calls by key
	order    []*Call             // unresolved calls in the order they were issued
	rseq     int64               // resolutions so far
	cancel   bool                // the workflow has seen its cancel request
}

// New starts a journal that replays h and then records the live run.
func New(h History) *Journal {
	j := &Journal{}
	j.Reset(h)
	return j
}

// NewReplay starts a journal that only replays h: where the code goes past
// history, GoLive returns ErrEnd, so that nothing runs live.
func NewReplay(h History) *Journal {
	j := New(h)
	j.only = true
	return j
}

// ErrEnd is GoLive's answer on a replay-only journal whose history is used up.
var ErrEnd = errors.New("journal: end of the recorded history")

// Reset makes a fresh start on h: nothing replayed, nothing pending, no
// calls, no cancel seen (a restart after a crash).
func (j *Journal) Reset(h History) {
	j.hist, j.pos, j.base, j.live = h, 0, int64(h.Len()), false
	j.pending = nil
	j.counters, j.calls, j.order = map[string]int{}, map[string]*Call{}, nil
	j.rseq, j.cancel = 0, false
}

// Start checks that history begins with a started event written with
// codec and returns it; replay goes on from the event after it. A run may
// start again (each execution of the workflow function does).
func (j *Journal) Start(codec string) (persistence.Event, error) {
	if j.hist.Len() == 0 {
		return persistence.Event{}, &Divergence{Expected: "started", Got: "history without a start event"}
	}
	e, err := j.hist.At(0)
	if err != nil {
		return e, err
	}
	if e.Kind != kindStarted {
		return e, &Divergence{Expected: "started", Got: "history without a start event"}
	}
	if e.Ref != "" && e.Ref != codec {
		return e, &Divergence{Expected: "history written with codec " + e.Ref, Got: "codec " + codec}
	}
	j.pos = 1
	return e, nil
}

// NewRun begins the next run of the instance (continue-as-new): history
// starts over with started as its only event, recorded and pending, and
// the calls and call IDs of the previous run are forgotten.
func (j *Journal) NewRun(started persistence.Event) persistence.Event {
	started.Seq = 0
	j.pending = []persistence.Event{started}
	j.base = 0
	j.hist = Events{started}
	j.pos, j.live = 1, false
	clear(j.counters)
	j.calls, j.order = map[string]*Call{}, nil
	return started
}

// Replaying reports whether calls are still answered from history.
func (j *Journal) Replaying() bool { return j.pos < j.hist.Len() }

// GoLive reports, once, that history is used up: true for the first call
// that finds Replaying false, when the driver starts the work replay
// deferred (activities in flight when the last activation ended). A
// replay-only journal returns ErrEnd instead, every time.
func (j *Journal) GoLive() (bool, error) {
	if j.Replaying() || j.live && !j.only {
		return false, nil
	}
	if j.only {
		return false, ErrEnd
	}
	j.live = true
	return true, nil
}

// Seq is the sequence number the next recorded event gets.
func (j *Journal) Seq() int64 { return j.base + int64(len(j.pending)) }

// Len is the number of events of the run's history, recorded ones included.
func (j *Journal) Len() int64 { return j.Seq() }

// Record appends e to the pending events with the next sequence number
// and returns it as recorded. The caller sets e.At.
func (j *Journal) Record(e persistence.Event) persistence.Event {
	e.Seq = j.Seq()
	j.pending = append(j.pending, e)
	return e
}

// Pending is the events recorded since the last commit: the history of the
// next step. The slice is the journal's until Committed.
func (j *Journal) Pending() []persistence.Event { return j.pending }

// Committed says the pending events are durable.
func (j *Journal) Committed() {
	j.base += int64(len(j.pending))
	j.pending = nil
}

// Discard drops the pending events (a step that will never commit).
func (j *Journal) Discard() { j.pending = nil }

// Mark is a point in the pending events to go back to.
type Mark int

// Mark returns the current point.
func (j *Journal) Mark() Mark { return Mark(len(j.pending)) }

// Restore drops what was recorded after m.
func (j *Journal) Restore(m Mark) {
	if int(m) < len(j.pending) {
		j.pending = j.pending[:m:m]
	}
}

// NextID is the next deterministic call ID for name: "name:1", "name:2"…
func (j *Journal) NextID(name string) string {
	j.counters[name]++
	return name + ":" + strconv.Itoa(j.counters[name])
}

// at is event i of history.
func (j *Journal) at(i int) (persistence.Event, error) { return j.hist.At(i) }

// SkipMarkers passes version markers no call asked for (code that dropped
// an old Version call still replays).
func (j *Journal) SkipMarkers() error {
	for j.pos < j.hist.Len() {
		e, err := j.at(j.pos)
		if err != nil {
			return err
		}
		if e.Kind != kindVersion {
			return nil
		}
		j.pos++
	}
	return nil
}

// Next answers a call that answers at once (now, send, publish, subscribe,
// a child's spawn…) while replaying: the next event must be of this kind
// and name, and, where both have one, of this input digest. It returns the
// event and moves past it. Call SkipMarkers first.
func (j *Journal) Next(kind, name, digest string) (persistence.Event, error) {
	e, err := j.at(j.pos)
	if err != nil {
		return e, err
	}
	if e.Kind != kind || e.Name != name {
		return e, Diverged(e, kind+" "+name)
	}
	if digest != "" && e.Digest != "" && e.Digest != digest {
		return e, Diverged(e, kind+" "+name+" with another input")
	}
	j.pos++
	return e, nil
}

// Unexpected is the divergence of the next event of history from what the
// code asked for (got), for a call the journal does not match itself.
func (j *Journal) Unexpected(got string) error {
	e, err := j.at(j.pos)
	if err != nil {
		return err
	}
	return Diverged(e, got)
}

// Version answers a Version call from the markers that come next in
// history: the version recorded for changeID, if one is there.
func (j *Journal) Version(changeID string) (v int, found bool, err error) {
	for i := j.pos; i < j.hist.Len(); i++ {
		e, err := j.at(i)
		if err != nil {
			return 0, false, err
		}
		if e.Kind != kindVersion {
			break
		}
		if e.Name == changeID {
			j.pos = i + 1
			v, err := strconv.Atoi(string(e.Payload))
			if err != nil {
				return 0, false, Diverged(e, "version "+changeID+" (unreadable)")
			}
			return v, true, nil
		}
	}
	return 0, false, nil
}

// Cancelled reports whether the workflow has seen its cancel request.
func (j *Journal) Cancelled() bool { return j.cancel }

// ObserveCancel records, live, that the workflow sees its cancel request
// here, and returns the event.
func (j *Journal) ObserveCancel(e persistence.Event) persistence.Event {
	e.Kind = kindCancelObserved
	j.cancel = true
	return j.Record(e)
}

// ReplayCancel answers, while replaying, whether the workflow saw its
// cancel request at this call. decided is false when only version markers
// are left: from there the run is live and the driver decides.
func (j *Journal) ReplayCancel() (seen, decided bool, err error) {
	if j.cancel {
		return true, true, nil
	}
	// Look past version markers without taking them: a Version call after
	// this one may still ask for them.
	i := j.pos
	for ; i < j.hist.Len(); i++ {
		e, err := j.at(i)
		if err != nil {
			return false, false, err
		}
		if e.Kind == kindCancelObserved {
			j.pos, j.cancel = i+1, true
			return true, true, nil
		}
		if e.Kind != kindVersion {
			return false, true, nil // history goes on: the first run saw no cancel here
		}
	}
	return false, false, nil
}

// End checks, when the workflow function returned while replaying only
// (no live run follows), that history ends the same way: with nothing
// more, or with an end event of kind (completed, failed, cancelled) and,
// for completed, the same output.
func (j *Journal) End(kind string, out []byte) error {
	if err := j.SkipMarkers(); err != nil {
		return err
	}
	if !j.Replaying() {
		return nil
	}
	e, err := j.at(j.pos)
	if err != nil {
		return err
	}
	if e.Kind != kind {
		return Diverged(e, "the workflow ending ("+kind+")")
	}
	if kind == kindCompleted && !bytes.Equal(e.Payload, out) {
		return &Divergence{Seq: e.Seq, Expected: "completed with the recorded result", Got: "another result"}
	}
	return nil
}

// IsEnd reports whether kind ends a run.
func IsEnd(kind string) bool {
	return kind == kindCompleted || kind == kindFailed || kind == kindCancelled
}
