package actor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nornlabs/norn/persistence"
)

// Outgoing is one message of PublishBatch or Deliver.
//
// Channel alone publishes on the channel (as Publish); Target alone sends
// to the instance's mailbox (as Send); both send to the instance on a
// direct channel (as SendOn). The payload is Message encoded by the
// System's codec, or, when Payload is non-nil, Payload stored as is under
// the type name Type (for producers that encode themselves).
type Outgoing struct {
	Channel  string
	Target   PID
	Message  any
	Payload  []byte // raw payload; set Message or Payload, not both
	Type     string // the type name of a raw Payload; "" for untyped bytes
	Metadata map[string]string
	// ID makes the message safe to retry, as WithMessageID does: a message
	// whose ID was used already (within Config.DedupeWindow) is not
	// delivered again. Empty: a fresh random ID and no such check.
	ID string
}

// BatchError says which message of a PublishBatch, or which item of a
// SpawnBatch or SpawnBatchID, made it fail; nothing of the batch was
// delivered or created. Unwrap gives the cause, so errors.Is and errors.As
// work as for a single Publish or Spawn (ErrInvalidInput, ErrNotFound,
// ErrPayloadTooLarge, *IDConflictError …).
type BatchError struct {
	Index int // position in the msgs, inputs or items given
	Err   error
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("norn: batch item %d: %v", e.Index, e.Err)
}

// Unwrap returns the cause.
func (e *BatchError) Unwrap() error { return e.Err }

// PublishBatch adds every message of msgs in one store step: all of them
// are durable when it returns, or (on error) none is. It returns their
// message IDs in order (the given ID where there is one). A message whose
// ID was used before, also earlier in the same batch, is skipped as a
// duplicate while the others are delivered. A failure that one message
// causes (an invalid field, a payload over Config.MaxPayload, a Target
// that does not exist or has ended, a channel used in another mode) comes
// as a *BatchError naming it.
func (s *System) PublishBatch(ctx context.Context, msgs []Outgoing) ([]string, error) {
	step := persistence.Step{Send: make([]persistence.NewMessage, 0, len(msgs))}
	ids := make([]string, len(msgs))
	for i, o := range msgs {
		m, err := s.outgoing(o)
		if err != nil {
			return nil, &BatchError{Index: i, Err: err}
		}
		ids[i] = m.ID
		step.Send = append(step.Send, m)
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if len(msgs) == 0 {
		return ids, nil
	}
	res, err := s.store.Apply(ctx, step)
	if err != nil {
		return nil, batchCause(step.Send, err)
	}
	s.afterCommit("", &step, res)
	return ids, nil
}

// outgoing validates and encodes one message of a batch.
func (s *System) outgoing(o Outgoing) (persistence.NewMessage, error) {
	m := persistence.NewMessage{Channel: o.Channel, Target: string(o.Target), Metadata: o.Metadata}
	switch {
	case o.Channel == "" && o.Target == "":
		return m, fmt.Errorf("%w: a message needs a Channel, a Target or both", ErrInvalidInput)
	case o.Payload != nil && o.Message != nil:
		return m, fmt.Errorf("%w: set Message or Payload, not both", ErrInvalidInput)
	case o.Payload == nil && o.Type != "":
		return m, fmt.Errorf("%w: Type names a raw Payload; a Message is named by its Go type", ErrInvalidInput)
	}
	if err := errors.Join(validChannel(o.Channel), validID("target", string(o.Target)), validID("message ID", o.ID)); err != nil {
		return m, err
	}
	if o.Payload != nil {
		m.Payload, m.Type = append([]byte(nil), o.Payload...), o.Type
	} else {
		b, err := s.encode(o.Message)
		if err != nil {
			return m, err
		}
		m.Payload, m.Type = b, s.messageType(o.Message)
	}
	if err := s.checkPayload("message", m.Payload); err != nil {
		return m, err
	}
	if err := checkNotReserved(m.Channel, m.Type); err != nil {
		return m, err
	}
	// A Target must exist, as with Send and SendOn: the whole batch fails
	// rather than dropping one message silently.
	m.MustDeliver = m.Target != ""
	if o.ID != "" {
		m.ID, m.Dedupe = o.ID, true
	} else {
		m.ID = newMessageID()
	}
	return m, nil
}

// batchCause names, where it can tell, the message a failed step failed
// on. The store reports a missing or ended target and a mode conflict by
// value, not by position: the first message that matches is named.
func batchCause(sent []persistence.NewMessage, err error) error {
	index := -1
	var inv *persistence.InvalidError
	var mode *persistence.ModeConflictError
	switch {
	case errors.As(err, &inv):
		// Field is "Send[i]…".
		if rest, ok := strings.CutPrefix(inv.Field, "Send["); ok {
			if j := strings.IndexByte(rest, ']'); j > 0 {
				if n, e := strconv.Atoi(rest[:j]); e == nil && n >= 0 && n < len(sent) {
					index = n
				}
			}
		}
	case errors.As(err, &mode):
		for i, m := range sent {
			if m.Channel == mode.Channel {
				index = i
				break
			}
		}
	case errors.Is(err, persistence.ErrNotFound), errors.Is(err, persistence.ErrInstanceDone):
		text := err.Error()
		for i, m := range sent {
			if m.Target != "" && (strings.HasSuffix(text, " "+m.Target) || strings.Contains(text, " "+m.Target+" ")) {
				index = i
				break
			}
		}
	}
	if index < 0 {
		return err
	}
	return &BatchError{Index: index, Err: err}
}
