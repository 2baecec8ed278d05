package norntype

import "time"

// PID is the durable address of a workflow instance: its instance ID. It
// stays valid across crashes, restarts and moves between nodes.
type PID string

// String returns the instance ID.
func (p PID) String() string { return string(p) }

// Status is the lifecycle state of an instance.
type Status string

// Instance statuses. Running: executing, or an activity is in flight.
// Waiting: parked in a receive, a timer or an await, with or without a live
// activation; mail, a timer or a cancel request carries it on.
const (
	StatusRunning      Status = "running"
	StatusWaiting      Status = "waiting"
	StatusCompensating Status = "compensating"
	StatusCompleted    Status = "completed"
	StatusFailed       Status = "failed"
	StatusCancelled    Status = "cancelled"
)

// Terminal reports whether an instance in this status has ended for good.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Valid reports whether s is one of the known statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusRunning, StatusWaiting, StatusCompensating, StatusCompleted, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

// Statuses lists every instance status, live ones first.
func Statuses() []Status {
	return []Status{StatusRunning, StatusWaiting, StatusCompensating, StatusCompleted, StatusFailed, StatusCancelled}
}

// Mode is how a channel hands its messages to subscribers.
type Mode string

// Channel modes.
const (
	// Broadcast: every subscriber gets its own copy of every message published
	// after it subscribed.
	Broadcast Mode = "broadcast"
	// Competing: each message is consumed by exactly one subscriber; messages
	// wait in the channel's queue until some subscriber takes them or they
	// are pruned (see Config.QueueRetention in package actor).
	Competing Mode = "competing"
	// Direct: messages are addressed to one instance on the channel.
	Direct Mode = "direct"
)

// Valid reports whether m is one of the known modes.
func (m Mode) Valid() bool { return m == Broadcast || m == Competing || m == Direct }

// Instance is one durable run of a workflow, as users see it.
type Instance struct {
	ID       string
	Workflow string
	Status   Status
	Input    []byte // encoded input of the current run
	Output   []byte // encoded result, once completed
	// Error is the one-line reason of a failed or cancelled instance.
	Error string
	// Failure is the recorded cause of a failed instance, rebuilt: an
	// actor.PanicError (with its stack), ActivityError, NonDeterminismError
	// or a registered error.
	Failure      error
	Parent       string // instance that spawned it, if any
	CancelReason string // set once a cancel was requested
	Restarts     int64  // restarts after crashes, over the instance's life
	Run          int64  // continue-as-new generation, 0 for the first run
	HistoryLen   int64  // events in the current run's history
	// Node is the node whose activation holds the instance's lease, if
	// any. Inspect also names this node while an activation here runs an
	// instance that it has not written yet (a woken instance takes the
	// lease with its first write).
	Node      string
	CreatedAt time.Time
	UpdatedAt time.Time
	// Waits is what a waiting instance is parked on: the receives it waits
	// in (message types, channel and sender filters, timeout), its timers,
	// the children it awaits, activities backing off. Empty unless Status is
	// waiting.
	Waits []Wait
}

// InstanceCount is how many instances of one workflow are in one status.
type InstanceCount struct {
	Workflow string
	Status   Status
	Count    int
}

// EventKind names an entry of an instance's history.
type EventKind string

// History event kinds.
const (
	EventStarted        EventKind = "started"         // the run's input; Ref names the codec
	EventActivity       EventKind = "activity"        // an activity's result or failure (Ref: call ID)
	EventActivityRetry  EventKind = "activity_retry"  // a failed attempt and the wait before the next
	EventNow            EventKind = "now"             // ctx.Now
	EventTimer          EventKind = "timer"           // a timer set (Name: timer ID, payload: due time)
	EventTimerFired     EventKind = "timer_fired"     // that timer fired
	EventReceived       EventKind = "received"        // a consumed message (Name: receive ID)
	EventReceiveWait    EventKind = "receive_wait"    // a receive with a timeout started waiting
	EventReceiveTimeout EventKind = "receive_timeout" // that receive timed out
	EventSent           EventKind = "sent"            // ctx.Send / SendOn (Name: target)
	EventPublished      EventKind = "published"       // ctx.Publish (Name: channel)
	EventSubscribed     EventKind = "subscribed"
	EventUnsubscribed   EventKind = "unsubscribed"
	EventCompensating   EventKind = "compensating" // the saga started undoing
	EventCompensation   EventKind = "compensation" // one compensation ran
	EventChildSpawned   EventKind = "child_spawned"
	EventLinkedExit     EventKind = "linked_exit" // a linked child's failure ended this instance
	EventMonitor        EventKind = "monitor"
	EventCancelSent     EventKind = "cancel_sent"
	EventCancelObserved EventKind = "cancel_observed" // the workflow saw its cancel request here
	EventVersion        EventKind = "version"         // ctx.Version's marker
	EventEmitted        EventKind = "emitted"         // an outgoing event recorded in the outbox (Name: type, Ref: ID)
	EventCompleted      EventKind = "completed"
	EventFailed         EventKind = "failed"
	EventCancelled      EventKind = "cancelled"
)

// HistoryEvent is one entry of an instance's history.
type HistoryEvent struct {
	Seq     int64
	Kind    EventKind
	Name    string // activity, channel, timer, receive or workflow name
	Ref     string // activity call ID, message ID, child ID …
	Payload []byte // the recorded value (encoded)
	// Error is the recorded failure's one-line text; Failure the failure
	// rebuilt as the workflow saw it.
	Error   string
	Failure error
	// ErrorRecord is the failure as the store holds it, from which Failure
	// is rebuilt. Replay reads it rather than Failure, so a history kept
	// for tests replays its failures as recorded.
	ErrorRecord string
	Digest      string // identifies the call's input
	At          time.Time
}

// Subscription is one channel an instance listens to.
type Subscription struct {
	Channel string
	Mode    Mode
}

// Timer kinds (Timer.Kind).
const (
	// TimerSleep: Context.Sleep, SleepUntil or Timer.
	TimerSleep = "sleep"
	// TimerReceive: the Timeout of a Receive.
	TimerReceive = "receive"
	// TimerRetry: an activity waiting out its retry back-off.
	TimerRetry = "retry"
)

// Timer is a pending durable timer of an instance.
type Timer struct {
	ID string
	// Kind is TimerSleep, TimerReceive or TimerRetry.
	Kind string
	// Name is the call the timer belongs to, as history names it: the
	// sleep or receive ("sleep:2"), or the activity call ("charge:1").
	Name string
	Due  time.Time
}
