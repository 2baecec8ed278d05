package actor

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"unicode/utf8"

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

// Marshal is json.Marshal, except that a string holding invalid UTF-8 is an
// error naming where it is: encoding/json would write it with U+FFFD in
// place of the bad bytes, and the value recorded would not be the value
// given.
func (JSON) Marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil || !replacedRune(b) {
		return b, err
	}
	if path, bad := invalidUTF8(reflect.ValueOf(v), "", 0); bad {
		if path == "" {
			path = "the value"
		}
		return nil, fmt.Errorf("%s holds invalid UTF-8 (JSON would replace it with U+FFFD)", path)
	}
	return b, nil
}

// replacedRune reports whether JSON output b holds the escape \ufffd that
// encoding/json writes for invalid UTF-8 (and not an escaped backslash
// followed by "ufffd").
func replacedRune(b []byte) bool {
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte(`\ufffd`))
		if j < 0 {
			return false
		}
		j += i
		n := 0 // backslashes before this one
		for k := j - 1; k >= 0 && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return true
		}
		i = j + 1
	}
}

// invalidUTF8 finds a string in v that is not valid UTF-8 and returns its
// path ("Items[2].Name", "Tags[\"k\"]").
func invalidUTF8(v reflect.Value, path string, depth int) (string, bool) {
	if !v.IsValid() || depth > 32 {
		return "", false
	}
	switch v.Kind() {
	case reflect.String:
		return path, !utf8.ValidString(v.String())
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "", false
		}
		return invalidUTF8(v.Elem(), path, depth+1)
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			name := f.Name
			if path != "" {
				name = path + "." + name
			}
			if p, bad := invalidUTF8(v.Field(i), name, depth+1); bad {
				return p, true
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "", false // bytes: encoded as base64
		}
		for i := range v.Len() {
			if p, bad := invalidUTF8(v.Index(i), fmt.Sprintf("%s[%d]", path, i), depth+1); bad {
				return p, true
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			k := it.Key()
			if k.Kind() == reflect.String && !utf8.ValidString(k.String()) {
				return fmt.Sprintf("%s (a key)", path), true
			}
			if p, bad := invalidUTF8(it.Value(), fmt.Sprintf("%s[%q]", path, fmt.Sprint(k.Interface())), depth+1); bad {
				return p, true
			}
		}
	}
	return "", false
}

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

// strictDecoder says whether a payload decodes into T strictly: with the
// JSON codec, into a T that has every field the payload has (unknown
// fields refused); with others, as the codec decodes it. It is what a
// typed receive asks of a message stored without a type.
func strictDecoder[T any](c Codec) func([]byte) bool {
	if _, ok := c.(JSON); !ok {
		return func(b []byte) bool { _, err := decodeWith[T](c, b); return err == nil }
	}
	t := reflect.TypeFor[T]()
	if t.Kind() == reflect.Pointer && t.Implements(protoMessageType) {
		return func(b []byte) bool { _, err := decodeWith[T](c, b); return err == nil }
	}
	return func(b []byte) bool {
		var v T
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		if err := d.Decode(&v); err != nil {
			return false
		}
		_, err := d.Token() // nothing after the value
		return errors.Is(err, io.EOF)
	}
}

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
