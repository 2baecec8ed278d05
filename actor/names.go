package actor

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/nornlabs/norn/mailbox"
)

// MessageName gives a message type the name it is stored and matched
// under, and the older names it still answers to. Make one with Message and
// list it in Config.Messages.
//
// Without one, a message is stored under its Go type's name
// ("main.Approval"), which changes when the type is renamed or moved to
// another package: instances parked in a receive for the old name would
// never get the renamed type's messages. A registered name stays put
// however the Go type moves, and its aliases keep the messages and
// receives written under earlier names matching.
type MessageName struct {
	typ     reflect.Type
	name    string
	aliases []string
}

// Message names message type T name in the store, and lets receives of T
// take messages stored under any of aliases too: the names earlier builds
// stored it under, such as its Go type name before a move
// ("main.Approval"). T's current Go type name is always an alias, so that
// naming a type that already has messages in flight loses none of them.
//
//	actor.Config{Messages: []actor.MessageName{
//		actor.Message[orders.Approval]("orders.approval", "main.Approval"),
//	}}
//
// A type that names itself (MessageTyper, protobuf messages) may be listed
// only under that same name, to give it aliases.
func Message[T any](name string, aliases ...string) MessageName {
	return MessageName{typ: reflect.TypeFor[T](), name: name, aliases: aliases}
}

// Name is the stored name.
func (m MessageName) Name() string { return m.name }

// Aliases are the other names the type answers to, its Go type name last.
func (m MessageName) Aliases() []string {
	out := append([]string(nil), m.aliases...)
	if g := goTypeName(m.typ); g != m.name && !slices.Contains(out, g) {
		out = append(out, g)
	}
	return out
}

// messageNames is a System's registry of message names (Config.Messages).
type messageNames struct {
	byType map[reflect.Type]MessageName // by the type with pointers removed
	types  map[string]reflect.Type      // every name and alias: its type
}

// newMessageNames checks the registrations and indexes them.
func newMessageNames(list []MessageName) (*messageNames, error) {
	n := &messageNames{byType: map[reflect.Type]MessageName{}, types: map[string]reflect.Type{}}
	for _, m := range list {
		if m.typ == nil {
			return nil, fmt.Errorf("%w: Config.Messages holds a zero MessageName (use actor.Message)", ErrInvalidInput)
		}
		t := derefType(m.typ)
		if err := checkNameable(t, m.name); err != nil {
			return nil, err
		}
		if _, dup := n.byType[t]; dup {
			return nil, fmt.Errorf("%w: Config.Messages names %s twice", ErrInvalidInput, t)
		}
		m.typ = t
		n.byType[t] = m
		for _, name := range append([]string{m.name}, m.Aliases()...) {
			if err := checkMessageName(name); err != nil {
				return nil, fmt.Errorf("%w: Config.Messages, %s: %v", ErrInvalidInput, t, err)
			}
			if other, taken := n.types[name]; taken && other != t {
				return nil, fmt.Errorf("%w: Config.Messages gives the name %q to both %s and %s", ErrInvalidInput, name, other, t)
			}
			n.types[name] = t
		}
	}
	return n, nil
}

// checkNameable refuses types that cannot carry a registered name.
func checkNameable(t reflect.Type, name string) error {
	switch {
	case t.Kind() == reflect.Interface || t == reflect.TypeFor[[]byte]():
		return fmt.Errorf("%w: Config.Messages: %s takes messages of any type and has no name of its own", ErrInvalidInput, t)
	case t == reflect.TypeFor[mailbox.Down]():
		return fmt.Errorf("%w: Config.Messages: %s is the runtime's own message", ErrInvalidInput, t)
	}
	p := reflect.PointerTo(t)
	if t.Implements(messageTyperType) || p.Implements(messageTyperType) {
		if own := reflect.New(t).Interface().(MessageTyper).MessageType(); own != name {
			return fmt.Errorf("%w: Config.Messages names %s %q, but its MessageType method says %q", ErrInvalidInput, t, name, own)
		}
	} else if p.Implements(protoMessageType) {
		if own := string(proto.MessageName(reflect.New(t).Interface().(proto.Message))); own != name {
			return fmt.Errorf("%w: Config.Messages names protobuf message %s %q, but it is named %q", ErrInvalidInput, t, name, own)
		}
	}
	return nil
}

// checkMessageName refuses names a message cannot be stored under.
func checkMessageName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("an empty name")
	case len(name) > 255:
		return fmt.Errorf("name %.20q… is longer than 255 bytes", name)
	case !utf8.ValidString(name):
		return fmt.Errorf("name %q is not valid UTF-8", name)
	case name == downType:
		return fmt.Errorf("name %q is the runtime's own message", name)
	case strings.HasPrefix(name, "$"):
		return fmt.Errorf("name %q: names starting with $ belong to the runtime", name)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) >= 0:
		return fmt.Errorf("name %q holds a space or control character", name)
	}
	return nil
}

func derefType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// messageType is the name a value is stored under: its registered name, or
// what it says (MessageTyper, protobuf), or its Go type name; "" for raw
// bytes.
func (e *env) messageType(v any) string {
	if v != nil && e.names != nil && len(e.names.byType) > 0 {
		if m, ok := e.names.byType[derefType(reflect.TypeOf(v))]; ok {
			return m.name
		}
	}
	return messageType(v)
}

// messageTypes lists the names v may have been stored under by earlier
// builds (its aliases), after its name: what a replayed send of v may have
// recorded.
func (e *env) messageTypes(v any) []string {
	name := e.messageType(v)
	if v == nil || e.names == nil {
		return []string{name}
	}
	if m, ok := e.names.byType[derefType(reflect.TypeOf(v))]; ok {
		return append([]string{name}, m.Aliases()...)
	}
	return []string{name}
}

// receiveTypes is the name a Receive[T] matches and its aliases; "" matches
// anything.
func receiveTypes[T any](e *env) (string, []string) {
	t := reflect.TypeFor[T]()
	if e.names != nil {
		if m, ok := e.names.byType[derefType(t)]; ok {
			return m.name, m.Aliases()
		}
	}
	return typeNameFor[T](), nil
}
