package actor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"

	"google.golang.org/protobuf/proto"
)

// Codec turns workflow inputs and outputs, activity results and message
// payloads into bytes and back. The default is JSON; values that are
// proto.Message are always encoded as protobuf, and []byte is kept as is.
// The codec's name is recorded with every instance, and an activation whose
// history was written with another codec stops instead of misreading it.
type Codec interface {
	Name() string
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSON is the default codec (encoding/json).
type JSON struct{}

// Name is "json".
func (JSON) Name() string { return "json" }

// Marshal is json.Marshal.
func (JSON) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal is json.Unmarshal.
func (JSON) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// MessageTyper lets a message type choose the type name it is stored and
// matched under, so that producers in other programs or languages can name
// it too. Without it the name is the Go type's (e.g. "orders.Approval").
type MessageTyper interface {
	MessageType() string
}

// encodeWith turns v into its stored form.
func encodeWith(c Codec, v any) ([]byte, error) {
	switch x := v.(type) {
	case []byte:
		return append([]byte(nil), x...), nil
	case proto.Message:
		b, err := proto.Marshal(x)
		if err != nil {
			return nil, fmt.Errorf("%w: encode %T as protobuf: %v", ErrInvalidInput, v, err)
		}
		return b, nil
	}
	b, err := c.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: encode %T: %v", ErrInvalidInput, v, err)
	}
	return b, nil
}

// decodeWith is encodeWith's inverse for a T.
func decodeWith[T any](c Codec, data []byte) (T, error) {
	var v T
	if p, ok := any(&v).(*[]byte); ok {
		*p = append([]byte(nil), data...)
		return v, nil
	}
	t := reflect.TypeFor[T]()
	if t.Kind() == reflect.Pointer && t.Implements(protoMessageType) {
		m := reflect.New(t.Elem()).Interface()
		if err := proto.Unmarshal(data, m.(proto.Message)); err != nil {
			return v, err
		}
		return m.(T), nil
	}
	if len(data) == 0 {
		return v, nil
	}
	if err := c.Unmarshal(data, &v); err != nil {
		return v, err
	}
	return v, nil
}

var protoMessageType = reflect.TypeFor[proto.Message]()

// messageType is the type name a value is stored under: "" for raw bytes.
func messageType(v any) string {
	switch x := v.(type) {
	case nil, []byte:
		return ""
	case MessageTyper:
		return x.MessageType()
	case proto.Message:
		return string(proto.MessageName(x))
	}
	t := reflect.TypeOf(v)
	if t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(messageTyperType) {
		// MessageType on the pointer: a value sent as such is named by it
		// too, as Receive[T] names T.
		p := reflect.New(t)
		p.Elem().Set(reflect.ValueOf(v))
		return p.Interface().(MessageTyper).MessageType()
	}
	return goTypeName(t)
}

var messageTyperType = reflect.TypeFor[MessageTyper]()

// typeNameFor is the type name a Receive[T] matches; "" matches anything
// (T is []byte or an interface).
func typeNameFor[T any]() string {
	t := reflect.TypeFor[T]()
	if t.Kind() == reflect.Interface || t == reflect.TypeFor[[]byte]() {
		return ""
	}
	if t.Implements(reflect.TypeFor[MessageTyper]()) {
		var v T
		if t.Kind() == reflect.Pointer {
			v = reflect.New(t.Elem()).Interface().(T)
		}
		return any(v).(MessageTyper).MessageType()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[MessageTyper]()) {
		return reflect.New(t).Interface().(MessageTyper).MessageType()
	}
	if t.Implements(protoMessageType) && t.Kind() == reflect.Pointer {
		return string(proto.MessageName(reflect.New(t.Elem()).Interface().(proto.Message)))
	}
	return goTypeName(t)
}

func goTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.String()
}

func typeName[T any]() string { return reflect.TypeFor[T]().String() }

// digest identifies a call's input in history.
func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}
