package actor

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// ErrReserved: a message would pose as the runtime. Channels whose names
// start with "$" (the Downs of links and monitors, exit signals) and
// messages of type mailbox.Down are written by the runtime only, so that an
// instance can trust them: Send, SendOn, Publish, Deliver, PublishBatch and
// the same calls inside a workflow refuse them, and Context.Subscribe
// refuses those channels. It matches ErrInvalidInput too.
var ErrReserved = errors.New("norn: reserved for the runtime")

// reservedError says what was refused and why.
type reservedError struct{ what string }

func (e *reservedError) Error() string {
	return "norn: " + e.what + " is reserved for the runtime (it would pose as a Down or an exit signal)"
}

// Is makes errors.Is(err, ErrReserved) and errors.Is(err, ErrInvalidInput)
// true.
func (e *reservedError) Is(target error) bool {
	return target == ErrReserved || target == ErrInvalidInput
}

// downType is the stored type name of mailbox.Down.
var downType = messageType(mailbox.Down{})

// checkNotReserved refuses a message from user code (outside the runtime)
// on a system channel or of the type the runtime's Downs have.
func checkNotReserved(channel, typ string) error {
	switch {
	case strings.HasPrefix(channel, persistence.SystemChannelPrefix):
		return &reservedError{what: fmt.Sprintf("channel %q", channel)}
	case typ != "" && typ == downType:
		return &reservedError{what: fmt.Sprintf("message type %q", typ)}
	}
	return nil
}
