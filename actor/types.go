package actor

import "github.com/nornlabs/norn/norntype"

// The read types live in package norntype, which imports only the standard
// library; they are re-exported here so that code using the runtime needs
// one import. EventKind (journal.go) is re-exported next to the kinds.

// PID is the durable address of an instance: its instance ID.
type PID = norntype.PID

// Status is the lifecycle state of an instance.
type Status = norntype.Status

// Instance statuses. Running: executing, or an activity is in flight.
// Waiting: parked in a receive, a timer or an await (with or without a
// live activation; mail, a timer or a cancel carries it on).
const (
	StatusRunning      = norntype.StatusRunning
	StatusWaiting      = norntype.StatusWaiting
	StatusCompensating = norntype.StatusCompensating
	StatusCompleted    = norntype.StatusCompleted
	StatusFailed       = norntype.StatusFailed
	StatusCancelled    = norntype.StatusCancelled
)

// Mode is how a channel hands its messages to subscribers.
type Mode = norntype.Mode

// Instance is one durable run of a workflow, as users see it.
type Instance = norntype.Instance

// HistoryEvent is one entry of an instance's history.
type HistoryEvent = norntype.HistoryEvent

// Subscription is one channel an instance listens to.
type Subscription = norntype.Subscription

// Timer is a pending durable timer of an instance.
type Timer = norntype.Timer

// Timer kinds (Timer.Kind).
const (
	TimerSleep   = norntype.TimerSleep
	TimerReceive = norntype.TimerReceive
	TimerRetry   = norntype.TimerRetry
)

// Wait is one thing a parked instance waits for (Instance.Waits).
type Wait = norntype.Wait

// WaitKind is what a parked instance waits for.
type WaitKind = norntype.WaitKind

// Wait kinds.
const (
	WaitReceive  = norntype.WaitReceive
	WaitTimer    = norntype.WaitTimer
	WaitChild    = norntype.WaitChild
	WaitActivity = norntype.WaitActivity
)
