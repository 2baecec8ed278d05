package actor

import (
	"errors"
	"fmt"
)

// Errors of the calls from outside the workflows, for errors.Is.
var (
	// ErrIDConflict: Spawn was given an ID that an instance of another
	// workflow holds (see IDConflictError).
	ErrIDConflict = errors.New("norn: instance ID held by another workflow")
	// ErrPayloadTooLarge: an encoded input or message exceeds
	// Config.MaxPayload (see PayloadTooLargeError).
	ErrPayloadTooLarge = errors.New("norn: payload too large")
)

// IDConflictError says Spawn's ID belongs to an instance of another
// workflow; nothing was created.
type IDConflictError struct {
	ID        string
	Workflow  string // the existing instance's workflow
	Requested string // the workflow Spawn was asked for
}

func (e *IDConflictError) Error() string {
	return fmt.Sprintf("norn: spawn %s as %q: the ID belongs to an instance of workflow %q", e.ID, e.Requested, e.Workflow)
}

// Is makes errors.Is(err, ErrIDConflict) true.
func (e *IDConflictError) Is(target error) bool { return target == ErrIDConflict }

// PayloadTooLargeError says an encoded input or message exceeds
// Config.MaxPayload; nothing was written.
type PayloadTooLargeError struct {
	Field string // what was too large: "input", "message", …
	Size  int    // its encoded size in bytes
	Max   int    // Config.MaxPayload
}

func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("norn: %s is %d bytes encoded; the limit (Config.MaxPayload) is %d", e.Field, e.Size, e.Max)
}

// Is makes errors.Is(err, ErrPayloadTooLarge) true.
func (e *PayloadTooLargeError) Is(target error) bool { return target == ErrPayloadTooLarge }
