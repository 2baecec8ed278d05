package actor

import (
	"errors"
	"fmt"

	"github.com/nornlabs/norn/persistence"
)

// Errors callers branch on.
var (
	// ErrUnknownWorkflow: the workflow is not registered on this System.
	ErrUnknownWorkflow = errors.New("norn: unknown workflow")
	// ErrNotFound: no instance has that ID.
	ErrNotFound = persistence.ErrNotFound
	// ErrInstanceDone: the instance has already ended.
	ErrInstanceDone = persistence.ErrInstanceDone
	// ErrChannelModeConflict: the channel already has subscribers in another mode.
	ErrChannelModeConflict = persistence.ErrChannelMode
	// ErrCancelled is returned inside a workflow from the wait it was parked
	// in when the instance was cancelled, and by Await for a cancelled instance.
	ErrCancelled = errors.New("norn: cancelled")
	// ErrTimeout is returned by Receive when its Timeout passes first.
	ErrTimeout = errors.New("norn: receive timed out")
	// ErrStopped: the System is stopping or stopped.
	ErrStopped = errors.New("norn: system stopped")
	// ErrInvalidInput: an argument that can never work (bad mode, empty ID…).
	ErrInvalidInput = errors.New("norn: invalid input")
)

// NonDeterminismError says that replay met a durable call that does not match
// the next history entry: the workflow code changed under a running instance
// or made a decision that is not deterministic. The instance stops with it.
type NonDeterminismError struct {
	Seq      int64
	Expected string // what history recorded, "kind name"
	Got      string // what the code asked for
}

func (e *NonDeterminismError) Error() string {
	return fmt.Sprintf("norn: non-deterministic workflow: history event %d is %s but the code called %s", e.Seq, e.Expected, e.Got)
}

// WorkflowError is how Await reports an instance that ended failed.
type WorkflowError struct {
	Instance string
	Message  string
}

func (e *WorkflowError) Error() string {
	return fmt.Sprintf("norn: workflow %s failed: %s", e.Instance, e.Message)
}

// ActivityError is how a recorded activity failure is handed back, on the
// first run and on replay alike.
type ActivityError struct {
	Activity string
	ID       string
	Message  string
	Terminal bool
}

func (e *ActivityError) Error() string {
	return fmt.Sprintf("activity %s (%s) failed: %s", e.Activity, e.ID, e.Message)
}

// DecodeError says a received message's payload does not decode as the type
// asked for. The message has been consumed and recorded in history (so
// nothing is lost and replay returns the same error); Message holds it.
type DecodeError struct {
	MessageID string
	Type      string
	Message   []byte
	Err       error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("norn: message %s does not decode as %s: %v", e.MessageID, e.Type, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }
