package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
)

// Names shared by producers, the ingress and workflows.
const (
	// MessageType is the mailbox.Message.Type of an event delivered to a
	// workflow; its payload is the event in structured JSON.
	MessageType = "cloudevents"
	// ExtInstance is the extension attribute that addresses an event to one
	// instance (its ID) instead of publishing it on the type's channel.
	ExtInstance = "norninstance"
	// ExtTraceParent is the W3C trace context extension (Distributed
	// Tracing extension); Wait keeps it for TraceParent.
	ExtTraceParent = "traceparent"

	// Metadata keys of a delivered event's message, for mailbox filters.
	MetaID      = "ce-id"
	MetaSource  = "ce-source"
	MetaType    = "ce-type"
	MetaSubject = "ce-subject" // only when the event has a subject
)

// specVersion is the CloudEvents version events are stored and delivered
// in. The ingress also takes CloudEvents 0.3 (specVersion03), as sdk-go
// reads it, and maps its attributes to 1.0 (see structured03, binary03).
const (
	specVersion   = event.CloudEventsVersionV1
	specVersion03 = event.CloudEventsVersionV03
)

// Attributes of CloudEvents 0.3 that 1.0 renamed or dropped.
const (
	attrSchemaURL           = "schemaurl"           // 1.0: dataschema
	attrDataContentEncoding = "datacontentencoding" // 1.0: data_base64 in JSON
)

// Event is a CloudEvent with its data decoded as T. The embedded sdk-go
// event holds every attribute and extension (ID(), Source(), Type(),
// Time(), Subject(), Extensions() …) and the data as received
// (Event.Event.Data(), DataEncoded); the field Data is that data decoded.
//
// It encodes (MarshalJSON) as the CloudEvent in structured JSON and
// decodes from it, so it can be a workflow's input: see Handle.
type Event[T any] struct {
	event.Event
	Data T
}

// MarshalJSON writes the event in structured JSON (the Data field is not
// written separately: it is decoded from the event's data).
func (e Event[T]) MarshalJSON() ([]byte, error) { return encodeEvent(e.Event) }

// UnmarshalJSON reads a structured JSON event and decodes its data as T.
func (e *Event[T]) UnmarshalJSON(b []byte) error {
	ev, err := parseEvent(b)
	if err != nil {
		return err
	}
	return e.setEvent(ev)
}

// TraceParent is the event's traceparent extension ("" if none).
func (e Event[T]) TraceParent() string { return extString(e.Event, ExtTraceParent) }

// setEvent makes e hold ev, with its data decoded as T. On a decode error
// the attributes are set all the same.
func (e *Event[T]) setEvent(ev event.Event) error {
	e.Event = ev
	d, err := decodeData[T](ev)
	e.Data = d
	return err
}

// eventInput is implemented by every *Event[T]: Handle uses it to tell a
// workflow that takes the whole event from one that takes its data.
type eventInput interface{ setEvent(event.Event) error }

// DataError says an event's data does not decode as the type asked for.
// The event itself was received (and, in Wait, consumed).
type DataError struct {
	ID, Source, Type string // the event's
	Want             string // the Go type asked for
	Err              error
}

func (e *DataError) Error() string {
	return fmt.Sprintf("events: data of event %s from %s (%s) does not decode as %s: %v", e.ID, e.Source, e.Type, e.Want, e.Err)
}

// Unwrap returns the decoding error.
func (e *DataError) Unwrap() error { return e.Err }

// decodeData decodes an event's data as T: []byte (and named byte slices
// such as json.RawMessage) get the bytes as they are, string gets text
// data as is (and JSON string data decoded), anything else is decoded from
// JSON data. No data decodes as the zero value.
func decodeData[T any](ev event.Event) (T, error) {
	var v T
	data := ev.DataEncoded
	wrap := func(err error) (T, error) {
		return v, &DataError{ID: ev.ID(), Source: ev.Source(), Type: ev.Type(), Want: fmt.Sprintf("%T", v), Err: err}
	}
	switch p := any(&v).(type) {
	case *[]byte:
		*p = bytes.Clone(data)
		return v, nil
	case *json.RawMessage:
		if len(data) > 0 && !jsonData(ev) {
			return wrap(errors.New("the data is not JSON"))
		}
		*p = bytes.Clone(data)
		return v, nil
	case *string:
		if !jsonData(ev) {
			*p = string(data)
			return v, nil
		}
	}
	if len(data) == 0 {
		return v, nil
	}
	if !jsonData(ev) {
		return wrap(fmt.Errorf("the data (%s) is not JSON; take it as []byte or string", mediaTypeOf(ev)))
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return wrap(err)
	}
	return v, nil
}

// jsonData reports whether the event's data is a JSON value.
func jsonData(ev event.Event) bool { return !ev.DataBase64 && isJSONType(ev.DataContentType()) }

func mediaTypeOf(ev event.Event) string {
	if ev.DataBase64 && ev.DataContentType() == "" {
		return "binary"
	}
	return ev.DataContentType()
}

// isJSONType reports whether data of this content type is JSON: no type
// at all (the JSON format's default), application/json, text/json, or any
// structured +json suffix (RFC 6839).
func isJSONType(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt := contentType
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

func extString(ev event.Event, name string) string {
	s, _ := ev.Extensions()[name].(string)
	return s
}

// MessageID is the message ID an event is delivered under: derived from
// its source and ID, so that a redelivered event is recognised (within
// actor.Config.DedupeWindow) and delivered once.
func MessageID(source, id string) string { return "ce-" + eventKey(source, id) }

// InstanceID is the ID of the instance of workflow that Handle starts for
// the event with this source and ID.
func InstanceID(workflow, source, id string) string {
	return workflow + "-" + eventKey(source, id)[:16]
}

// eventKey is a hash of (source, id), the identity of a CloudEvent.
func eventKey(source, id string) string {
	sum := sha256.Sum256([]byte(source + "\x00" + id))
	return hex.EncodeToString(sum[:16])
}

// attrError says which attribute of an event is wrong.
type attrError struct {
	attr string
	msg  string
}

func (e *attrError) Error() string { return e.attr + ": " + e.msg }

func attrErr(attr, format string, args ...any) *attrError {
	return &attrError{attr: attr, msg: fmt.Sprintf(format, args...)}
}

// fields are an event's attributes as read from JSON or headers, before
// they are checked and made into an event.Event.
type fields struct {
	core map[string]string // context attributes present (not null)
	ext  map[string]any    // extensions: string, bool or int32
	data []byte
	// hasData: data or data_base64 was present (and not null);
	// b64: the data is binary (data_base64, or bytes that are neither
	// JSON nor text).
	hasData, b64 bool
	// v03: the event came as CloudEvents 0.3 and its attributes have been
	// mapped to 1.0 (errors then name the attribute as it was sent).
	v03 bool
}

// coreAttr reports whether name is a context attribute of CloudEvents 1.0.
func coreAttr(name string) bool {
	switch name {
	case "specversion", "id", "source", "type", "datacontenttype", "dataschema", "subject", "time":
		return true
	}
	return false
}

// validName checks an attribute name: lower-case letters and digits only.
func validName(name string) *attrError {
	if name == "" {
		return attrErr(`""`, "an attribute name must not be empty")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return attrErr(strconv.Quote(name), "attribute names consist of lower-case letters and digits only")
		}
	}
	return nil
}

// parseEvent reads one event in structured JSON, strictly: a single JSON
// object, no duplicate members, every attribute of its type and format.
func parseEvent(b []byte) (event.Event, error) {
	ev, _, err := parseEventVersion(b)
	return ev, err
}

// parseEventVersion is parseEvent that also returns the specversion the
// event was sent in (the event itself is always 1.0).
func parseEventVersion(b []byte) (event.Event, string, error) {
	f, aerr := readJSON(b)
	if aerr != nil {
		return event.Event{}, "", aerr
	}
	ev, aerr := f.build()
	if aerr != nil {
		return event.Event{}, "", aerr
	}
	return ev, f.core["specversion"], nil
}

// readJSON reads the members of a structured JSON event.
func readJSON(b []byte) (*fields, *attrError) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, attrErr("event", "not a JSON object")
	}
	f := &fields{core: map[string]string{}, ext: map[string]any{}}
	seen := map[string]bool{}
	var data, data64 json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, attrErr("event", "malformed JSON: %v", err)
		}
		name := t.(string) // a member name is always a string token
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, attrErr(strconv.Quote(name), "malformed JSON value: %v", err)
		}
		if seen[name] {
			return nil, attrErr(name, "given twice")
		}
		seen[name] = true
		null := string(raw) == "null"
		switch {
		case name == "data":
			if !null {
				data = raw
			}
		case name == "data_base64":
			if !null {
				data64 = raw
			}
		case coreAttr(name):
			if null {
				continue // null is absent
			}
			var s string
			if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
				return nil, attrErr(name, "must be a string, not %s", excerpt(string(raw)))
			}
			f.core[name] = s
		default:
			if aerr := validName(name); aerr != nil {
				return nil, aerr
			}
			if null {
				continue
			}
			v, aerr := extValue(name, raw)
			if aerr != nil {
				return nil, aerr
			}
			f.ext[name] = v
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, attrErr("event", "malformed JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, attrErr("event", "more than one JSON value")
	}
	b64Attr := "data_base64"
	if f.core["specversion"] == specVersion03 {
		base64Data, aerr := f.structured03(data64)
		if aerr != nil {
			return nil, aerr
		}
		if base64Data && data != nil {
			// datacontentencoding base64: data is the base64 text, as
			// data_base64 is in 1.0.
			data, data64, b64Attr = nil, data, "data"
		}
	}
	switch {
	case data != nil && data64 != nil:
		return nil, attrErr("data_base64", "an event has data or data_base64, not both")
	case data64 != nil:
		var s string
		if data64[0] != '"' || json.Unmarshal(data64, &s) != nil {
			return nil, attrErr(b64Attr, "must be a base64 string")
		}
		d, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			return nil, attrErr(b64Attr, "not valid base64: %v", err)
		}
		f.data, f.hasData, f.b64 = d, true, true
	case data != nil:
		f.hasData = true
		if isJSONType(f.core["datacontenttype"]) {
			f.data = bytes.Clone(data)
			break
		}
		var s string
		if data[0] != '"' || json.Unmarshal(data, &s) != nil {
			return nil, attrErr("data", "datacontenttype %q is not JSON, so data must be a JSON string (or use data_base64)",
				f.core["datacontenttype"])
		}
		f.data = []byte(s)
	}
	return f, nil
}

// structured03 maps the attributes of a CloudEvents 0.3 event in
// structured JSON to 1.0, as sdk-go reads them: schemaurl becomes
// dataschema, and datacontentencoding (base64 only) says that data is the
// base64 text of the data, which is then stored as 1.0 does binary data
// (data_base64). It reports whether the data is base64. The 1.0 names
// dataschema and data_base64 are not 0.3 and are refused, so that nothing
// is silently dropped or read two ways.
func (f *fields) structured03(data64 json.RawMessage) (bool, *attrError) {
	if data64 != nil {
		return false, attrErr("data_base64", "is CloudEvents 1.0; a 0.3 event carries binary data in data with datacontentencoding base64")
	}
	if aerr := f.common03(); aerr != nil {
		return false, aerr
	}
	enc, ok := f.ext[attrDataContentEncoding]
	if !ok {
		return false, nil
	}
	delete(f.ext, attrDataContentEncoding)
	s, isString := enc.(string)
	switch {
	case !isString:
		return false, attrErr(attrDataContentEncoding, "must be a string")
	case !strings.EqualFold(s, event.Base64):
		// RFC 2045 tokens are case-insensitive; base64 is the only
		// encoding CloudEvents 0.3 defines for JSON.
		return false, attrErr(attrDataContentEncoding, "%q is not supported; only %s", s, event.Base64)
	}
	return true, nil
}

// common03 maps what CloudEvents 0.3 names alike in both content modes:
// schemaurl (a string in ext until the version is known) becomes
// dataschema.
func (f *fields) common03() *attrError {
	f.v03 = true
	if _, ok := f.core["dataschema"]; ok {
		return attrErr("dataschema", "is CloudEvents 1.0; a 0.3 event names the schema %s", attrSchemaURL)
	}
	if v, ok := f.ext[attrSchemaURL]; ok {
		s, isString := v.(string)
		if !isString {
			return attrErr(attrSchemaURL, "must be a string")
		}
		delete(f.ext, attrSchemaURL)
		f.core["dataschema"] = s
	}
	return nil
}

// extValue reads an extension's JSON value: a string, a boolean or an
// integer in the 32-bit range (the JSON format's types).
func extValue(name string, raw json.RawMessage) (any, *attrError) {
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, attrErr(name, "malformed string: %v", err)
		}
		return s, nil
	case 't', 'f':
		return raw[0] == 't', nil
	case '{', '[':
		return nil, attrErr(name, "an extension value is a string, a boolean or an integer, not %s", excerpt(string(raw)))
	}
	n, err := strconv.ParseInt(string(raw), 10, 32)
	if err != nil {
		return nil, attrErr(name, "an extension number must be an integer in the 32-bit range, not %s", excerpt(string(raw)))
	}
	return int32(n), nil
}

// build checks the attributes' values and makes the event.
func (f *fields) build() (event.Event, *attrError) {
	sv, ok := f.core["specversion"]
	switch {
	case !ok:
		return event.Event{}, attrErr("specversion", "missing")
	case sv != specVersion && sv != specVersion03:
		return event.Event{}, attrErr("specversion", "%q is not supported; only %s (and %s, taken as %s)", sv, specVersion, specVersion03, specVersion)
	case sv == specVersion03 && !f.v03:
		// A caller read a 0.3 event without mapping it (a bug here, not
		// the client's): refuse it rather than store it half-read.
		return event.Event{}, attrErr("specversion", "%s event not mapped to %s", specVersion03, specVersion)
	}
	schemaAttr := "dataschema"
	if f.v03 {
		schemaAttr = attrSchemaURL
	}
	for _, name := range []string{"id", "source", "type"} {
		if f.core[name] == "" {
			if _, ok := f.core[name]; ok {
				return event.Event{}, attrErr(name, "must not be empty")
			}
			return event.Event{}, attrErr(name, "missing")
		}
	}
	for _, name := range []string{"datacontenttype", "dataschema", "subject", "time"} {
		if v, ok := f.core[name]; ok && v == "" {
			if name == "dataschema" {
				name = schemaAttr
			}
			return event.Event{}, attrErr(name, "must not be empty when present")
		}
	}
	ec := &event.EventContextV1{ID: f.core["id"], Type: f.core["type"]}
	src, aerr := uriRef("source", f.core["source"], false)
	if aerr != nil {
		return event.Event{}, aerr
	}
	ec.Source = src
	if s, ok := f.core["subject"]; ok {
		ec.Subject = &s
	}
	if s, ok := f.core["datacontenttype"]; ok {
		mt, _, err := mime.ParseMediaType(s)
		if i := strings.IndexByte(mt, '/'); err != nil || i <= 0 || i == len(mt)-1 {
			return event.Event{}, attrErr("datacontenttype", "%q is not a media type (type/subtype, RFC 2046)", s)
		}
		ec.DataContentType = &s
	}
	if s, ok := f.core["dataschema"]; ok {
		// 0.3 allowed a relative schemaurl; the event is stored as 1.0,
		// whose dataschema is an absolute URI, and must read back as one.
		ref, aerr := uriRef(schemaAttr, s, true)
		if aerr != nil {
			return event.Event{}, aerr
		}
		ec.DataSchema = &types.URI{URL: ref.URL}
	}
	if s, ok := f.core["time"]; ok {
		// RFC 3339 allows a lower-case t and z; Go's parser does not.
		t, err := time.Parse(time.RFC3339Nano, strings.ToUpper(s))
		if err != nil {
			return event.Event{}, attrErr("time", "%q is not an RFC 3339 timestamp", s)
		}
		ec.Time = &types.Timestamp{Time: t}
	}
	names := make([]string, 0, len(f.ext))
	for name := range f.ext {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := ec.SetExtension(name, f.ext[name]); err != nil {
			return event.Event{}, attrErr(name, "%v", err)
		}
	}
	ev := event.Event{Context: ec}
	if f.hasData {
		ev.DataEncoded, ev.DataBase64 = f.data, f.b64
		if ev.DataEncoded == nil {
			ev.DataEncoded = []byte{}
		}
	}
	if verr := ev.Validate(); verr != nil {
		var ve event.ValidationError
		if errors.As(verr, &ve) {
			keys := make([]string, 0, len(ve))
			for k := range ve {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if len(keys) > 0 {
				return event.Event{}, attrErr(keys[0], "%v", ve[keys[0]])
			}
		}
		return event.Event{}, attrErr("event", "%v", verr)
	}
	return ev, nil
}

// uriRef parses a URI-reference (an absolute URI if abs). The value keeps
// its exact text: where Go's URL parser would print it differently (an
// upper-case scheme, a non-ASCII path), the text is kept as an opaque URL,
// which prints back unchanged, so that nothing the producer sent changes.
func uriRef(attr, s string, abs bool) (types.URIRef, *attrError) {
	u, err := url.Parse(s)
	if err != nil {
		return types.URIRef{}, attrErr(attr, "%q is not a URI-reference: %v", s, err)
	}
	if abs && !u.IsAbs() {
		return types.URIRef{}, attrErr(attr, "%q is not an absolute URI", s)
	}
	if u.String() != s {
		if u.Scheme != "" {
			// The scheme as written (the parser lower-cases it), so that
			// the URL stays absolute.
			i := strings.IndexByte(s, ':')
			return types.URIRef{URL: url.URL{Scheme: s[:i], Opaque: s[i+1:]}}, nil
		}
		return types.URIRef{URL: url.URL{Opaque: s}}, nil
	}
	return types.URIRef{URL: *u}, nil
}

// encodeEvent writes ev in structured JSON. sdk-go writes the attributes
// and extensions; time and data are written here: the time with the
// offset it came with, and data of any JSON type (including +json types,
// which sdk-go would turn into a string) as the JSON value it is.
func encodeEvent(ev event.Event) ([]byte, error) {
	if ev.Context == nil {
		return nil, errors.New("events: an event without context")
	}
	ec := *ev.Context.AsV1()
	tm := ec.Time
	ec.Time = nil
	b, err := json.Marshal(event.Event{Context: &ec})
	if err != nil {
		return nil, fmt.Errorf("events: encode event %s: %w", ec.ID, err)
	}
	if len(b) < 2 || b[len(b)-1] != '}' {
		return nil, fmt.Errorf("events: encode event %s: unexpected JSON from sdk-go", ec.ID)
	}
	buf := bytes.NewBuffer(b[:len(b)-1])
	str := func(s string) {
		q, _ := json.Marshal(s)
		buf.Write(q)
	}
	if tm != nil {
		buf.WriteString(`,"time":`)
		str(tm.Format(time.RFC3339Nano))
	}
	if d := ev.DataEncoded; d != nil {
		dct := ""
		if ec.DataContentType != nil {
			dct = *ec.DataContentType
		}
		switch {
		case !ev.DataBase64 && isJSONType(dct) && json.Valid(d):
			buf.WriteString(`,"data":`)
			buf.Write(d)
		case !ev.DataBase64 && !isJSONType(dct) && utf8.Valid(d):
			buf.WriteString(`,"data":`)
			str(string(d))
		default:
			// Binary data, or bytes that its content type cannot carry
			// as a JSON value: base64 keeps every byte.
			buf.WriteString(`,"data_base64":`)
			str(base64.StdEncoding.EncodeToString(d))
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// excerpt quotes the start of a long value for an error message.
func excerpt(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
