package mailbox

import (
	"slices"
	"strings"

	"github.com/nornlabs/norn/persistence"
)

// Receive is what one waiting receive accepts: messages of one type (any
// type when Type is empty) that pass its filters.
type Receive struct {
	Type string // the type name the receive decodes into; "" takes any
	// Aliases are other names of that type (names earlier builds stored
	// it under): messages stored under them are taken too.
	Aliases []string
	Spec    Spec
	// Untyped, when set, decides whether a message stored without a type
	// is one this receive takes (its payload decodes strictly into the
	// receive's type); nil takes every untyped message.
	Untyped func(payload []byte) bool
}

// Accepts reports whether the receive takes m. A message stored without a
// type is taken by a typed receive only if Untyped (when set) says so.
func (r Receive) Accepts(m Message) bool {
	if !r.typeOK(m.Type) {
		return false
	}
	if r.Type != "" && m.Type == "" && r.Untyped != nil && !r.Untyped(m.Payload) {
		return false
	}
	return r.Spec.Matches(m)
}

// typeOK reports whether a message stored under typ may be of the
// receive's type: its name or an alias, or no type at all (the payload then
// decides).
func (r Receive) typeOK(typ string) bool {
	return r.Type == "" || typ == "" || typ == r.Type || slices.Contains(r.Aliases, typ)
}

// Types lists the names the receive takes: Type and its aliases (none for
// a receive that takes any type).
func (r Receive) Types() []string {
	if r.Type == "" {
		return nil
	}
	return append([]string{r.Type}, r.Aliases...)
}

// MayAccept reports whether the receive may take a message of type typ on
// channel ch, as a waker sees it (without the sender or the payload), and
// whether that is sure: a receive with From or Match filters may still
// reject it.
func (r Receive) MayAccept(ch, typ string) (ok, sure bool) {
	if r.Spec.HasChannel && r.Spec.Channel != ch || !r.Spec.HasChannel && strings.HasPrefix(ch, persistence.SystemChannelPrefix) {
		return false, false
	}
	if !r.typeOK(typ) {
		return false, false
	}
	untypedCheck := r.Type != "" && typ == "" && r.Untyped != nil // the payload decides
	return true, !r.Spec.HasFrom && len(r.Spec.Preds) == 0 && !untypedCheck
}

// CompetingSpread is how many waiting competing messages a consumer
// chooses among, so that parallel consumers do not all race for the first.
const CompetingSpread = 8

// Selection is how a receive picks its message from a mailbox read.
type Selection struct {
	// Skip reports messages already taken by the consumer's uncommitted
	// step (nil: none).
	Skip func(seq int64) bool
	// Prefetch is the consumer's prefetch on a competing channel (0 or 1:
	// one message at a time).
	Prefetch func(channel string) int
	// Turn rotates the pick among competing candidates: consumers with
	// different turns pick different messages of the same queue.
	Turn uint32
}

// Pick chooses the message r takes from msgs (the mailbox in arrival
// order): the first it accepts, except that among waiting competing
// messages (those without a Target) it takes one of the first few, by
// Turn, so that parallel consumers spread out instead of racing for one
// row; with a prefetch above one it takes the first and claims the others
// ahead (see Claimable). cands are those competing messages, at most
// max(CompetingSpread, the channel's prefetch) of them.
func (sel Selection) Pick(r Receive, msgs []persistence.Message) (m persistence.Message, cands []persistence.Message, ok bool) {
	limit := CompetingSpread
	for _, m := range msgs {
		if sel.Skip != nil && sel.Skip(m.Seq) || !r.Accepts(FromStored(m)) {
			continue
		}
		if m.Target != "" && len(cands) == 0 {
			return m, nil, true
		}
		if m.Target != "" {
			break
		}
		if len(cands) == 0 {
			limit = max(limit, sel.prefetch(m.Channel))
		}
		cands = append(cands, m)
		if len(cands) == limit {
			break
		}
	}
	if len(cands) == 0 {
		return persistence.Message{}, nil, false
	}
	if sel.prefetch(cands[0].Channel) > 1 {
		// It takes them all: the first, and the others ahead.
		return cands[0], cands, true
	}
	return cands[int(sel.Turn%uint32(len(cands)))], cands, true
}

// Claimable lists the competing messages to claim ahead with m: the other
// candidates of m's channel, up to the channel's prefetch less one.
func (sel Selection) Claimable(m persistence.Message, cands []persistence.Message) []persistence.Message {
	n := sel.prefetch(m.Channel) - 1
	if m.Target != "" || n <= 0 {
		return nil
	}
	var out []persistence.Message
	for _, c := range cands {
		if c.Seq != m.Seq && c.Channel == m.Channel && len(out) < n {
			out = append(out, c)
		}
	}
	return out
}

func (sel Selection) prefetch(ch string) int {
	if sel.Prefetch == nil {
		return 0
	}
	return sel.Prefetch(ch)
}
