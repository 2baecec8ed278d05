package mailbox

import (
	"strings"
	"time"

	"github.com/nornlabs/norn/norntype"
	"github.com/nornlabs/norn/persistence"
)

// PID is the durable address of a workflow instance (norntype.PID).
type PID = norntype.PID

// Mode is how a channel hands out its messages (norntype.Mode).
type Mode = norntype.Mode

// Channel modes.
const (
	// Broadcast: every subscriber gets every message published after it subscribed.
	Broadcast = norntype.Broadcast
	// Competing: each message is consumed by exactly one subscriber.
	Competing = norntype.Competing
	// Direct: messages on the channel are addressed to one PID.
	Direct = norntype.Direct
)

// Message is a message as a receiver sees it.
type Message struct {
	ID          string
	Channel     string // empty for a plain send by PID
	Sender      PID    // empty when sent from outside any workflow
	Type        string // the payload's type name; empty for raw bytes
	Payload     []byte // encoded by the System's codec, or raw bytes
	Metadata    map[string]string
	PublishedAt time.Time
}

// Down is what a monitor receives when the monitored instance ends.
type Down struct {
	PID    PID
	Status string
	Error  string
	// Output is the encoded result when Status is completed, and the
	// recorded failure (JSON) when it is failed.
	Output []byte
}

// DownChannel is the channel Down messages arrive on, from linked children
// and from monitored instances alike.
const DownChannel = "$down"

// MonitorChannel is the system channel on which an instance's end is
// broadcast to its monitors; receivers see such messages on DownChannel.
func MonitorChannel(pid PID) string { return DownChannel + ":" + string(pid) }

// Filter narrows a selective receive.
type Filter interface{ apply(*Spec) }

type filterFunc func(*Spec)

func (f filterFunc) apply(s *Spec) { f(s) }

// Spec is a set of receive filters.
type Spec struct {
	Channel    string
	HasChannel bool
	From       PID
	HasFrom    bool
	Preds      []func(Message) bool
	Timeout    time.Duration
}

// NewSpec combines filters.
func NewSpec(filters ...Filter) Spec {
	var s Spec
	for _, f := range filters {
		if f != nil {
			f.apply(&s)
		}
	}
	return s
}

// OnChannel takes only messages on the named channel ("" means plain sends by PID).
func OnChannel(name string) Filter {
	return filterFunc(func(s *Spec) { s.Channel, s.HasChannel = name, true })
}

// From takes only messages sent by pid.
func From(pid PID) Filter { return filterFunc(func(s *Spec) { s.From, s.HasFrom = pid, true }) }

// Match takes only messages for which fn is true. fn must be deterministic:
// replay checks that the message recorded in history still matches.
func Match(fn func(Message) bool) Filter {
	return filterFunc(func(s *Spec) { s.Preds = append(s.Preds, fn) })
}

// Timeout gives up after d with ErrTimeout (a durable timer: it survives restarts).
func Timeout(d time.Duration) Filter { return filterFunc(func(s *Spec) { s.Timeout = d }) }

// MaxPrefetch bounds Prefetch.
const MaxPrefetch = 64

// SubscribeOption tunes a subscription (actor.Context.Subscribe).
type SubscribeOption interface{ applySub(*SubscribeSpec) }

type subOptionFunc func(*SubscribeSpec)

func (f subOptionFunc) applySub(s *SubscribeSpec) { f(s) }

// SubscribeSpec is a set of subscription options.
type SubscribeSpec struct {
	Prefetch int // 0 or 1: one message at a time
}

// NewSubscribeSpec combines options.
func NewSubscribeSpec(opts ...SubscribeOption) SubscribeSpec {
	var s SubscribeSpec
	for _, o := range opts {
		if o != nil {
			o.applySub(&s)
		}
	}
	return s
}

// Prefetch lets a competing consumer take up to n waiting messages of the
// channel at once (at most MaxPrefetch): the receive that claims the first
// also moves up to n-1 more into the consumer's own mailbox in the same
// commit, and the receives that follow take them without another claim
// and without reading the store. Messages are still received one by one
// and recorded as usual; those not yet received go back to the queue when
// the consumer unsubscribes or ends. It suits short handlers: behind a slow
// one, the prefetched messages wait while other consumers may be idle.
// Only for the Competing mode.
func Prefetch(n int) SubscribeOption { return subOptionFunc(func(s *SubscribeSpec) { s.Prefetch = n }) }

// Matches reports whether m passes every filter. Messages on the runtime's
// own channels (DownChannel) match only a receive that names the channel, so
// that a catch-all receive never swallows a Down.
func (s Spec) Matches(m Message) bool {
	if s.HasChannel && m.Channel != s.Channel {
		return false
	}
	if !s.HasChannel && strings.HasPrefix(m.Channel, persistence.SystemChannelPrefix) {
		return false
	}
	if s.HasFrom && m.Sender != s.From {
		return false
	}
	for _, p := range s.Preds {
		if !p(m) {
			return false
		}
	}
	return true
}

// FromStored converts a stored message.
func FromStored(m persistence.Message) Message {
	ch := m.Channel
	if strings.HasPrefix(ch, DownChannel+":") {
		ch = DownChannel
	}
	return Message{ID: m.ID, Channel: ch, Sender: PID(m.Sender), Type: m.Type, Payload: m.Payload, Metadata: m.Metadata, PublishedAt: m.PublishedAt}
}
