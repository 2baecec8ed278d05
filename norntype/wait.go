package norntype

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// WaitKind is what a parked instance waits for.
type WaitKind string

// Wait kinds.
const (
	WaitReceive  WaitKind = "receive"  // a message (Receive)
	WaitTimer    WaitKind = "timer"    // a durable timer (Sleep, NewTimer)
	WaitChild    WaitKind = "child"    // a child instance's end
	WaitActivity WaitKind = "activity" // an activity's attempt or its retry back-off
)

// Wait is one thing a parked instance waits for, as its last park left it.
type Wait struct {
	Kind WaitKind
	// Name is the call's name in history ("receive:3", "sleep:1",
	// "charge:1"); for a child, the child's PID.
	Name string `json:",omitempty"`
	// Types are the message names a receive takes (its type's name, then
	// its aliases); empty takes any type.
	Types []string `json:",omitempty"`
	// Channel and OnChannel: a receive filtered to one channel ("" is
	// plain sends by PID).
	Channel   string `json:",omitempty"`
	OnChannel bool   `json:",omitempty"`
	// From: a receive filtered to one sender.
	From PID `json:",omitempty"`
	// Filtered: the receive has a Match predicate too, which only the
	// workflow's code can apply.
	Filtered bool `json:",omitempty"`
	// Strict: a message stored without a type is taken only if it decodes
	// strictly into the receive's type.
	Strict bool `json:",omitempty"`
	// Due is when the wait ends by itself: a receive's timeout, a timer, an
	// activity's next attempt. Zero: no such time.
	Due time.Time `json:",omitzero"`
	// Attempt is an activity's attempts so far.
	Attempt int `json:",omitempty"`
}

// MayTake reports whether a receive wait may take a message of type typ
// on channel from sender: false when its type or filters refuse it. True
// is not a promise: a Match predicate, or the strict decoding of a message
// without a type, may still refuse it.
func (w Wait) MayTake(typ, channel string, sender PID) bool {
	if w.Kind != WaitReceive && w.Kind != WaitChild {
		return false
	}
	if len(w.Types) > 0 && typ != "" && !slices.Contains(w.Types, typ) {
		return false
	}
	if w.OnChannel && w.Channel != channel || !w.OnChannel && len(channel) > 0 && channel[0] == '$' {
		return false
	}
	return w.From == "" || w.From == sender
}

// Describe says in words what w waits for: what (a message of which type,
// a timer, a child, an activity) and the detail (filters, names), without
// its due time.
func (w Wait) Describe() (what, detail string) {
	switch w.Kind {
	case WaitReceive:
		what = "a message"
		if len(w.Types) > 0 {
			what = "a message of type " + strings.Join(w.Types, " or ")
		}
		var d []string
		switch {
		case w.OnChannel && w.Channel == "":
			d = append(d, "sent by PID")
		case w.OnChannel:
			d = append(d, "on channel "+w.Channel)
		}
		if w.From != "" {
			d = append(d, "from "+string(w.From))
		}
		if w.Filtered {
			d = append(d, "and a Match filter")
		}
		if w.Strict {
			d = append(d, "untyped messages only if they decode into it")
		}
		return what, strings.Join(d, ", ")
	case WaitChild:
		return "child to end", w.Name
	case WaitTimer:
		return "timer", w.Name
	case WaitActivity:
		if !w.Due.IsZero() {
			return "activity " + w.Name, "retry after attempt " + strconv.Itoa(w.Attempt)
		}
		return "activity " + w.Name, "attempt " + strconv.Itoa(w.Attempt)
	}
	return string(w.Kind), w.Name
}
