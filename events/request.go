package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
)

// requestError is a request the ingress refuses: an HTTP status, a
// message, and the index of the event it concerns (-1: none).
type requestError struct {
	status int
	index  int
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badEvent(index int, err error) *requestError {
	return &requestError{status: http.StatusBadRequest, index: index, msg: err.Error()}
}

func badRequest(format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, index: -1, msg: fmt.Sprintf(format, args...)}
}

// content modes of a request.
const (
	modeBinary = iota
	modeStructured
	modeBatch
)

// requestMode tells the content mode from the headers: the structured
// and batch JSON media types, or binary when the ce-specversion header
// (or any ce- header) is there.
func requestMode(h http.Header) (int, *requestError) {
	ct := h.Get("Content-Type")
	if ct != "" {
		mt, params, err := mime.ParseMediaType(ct)
		if err == nil {
			structured := mt == event.ApplicationCloudEventsJSON || mt == event.ApplicationCloudEventsBatchJSON
			if cs, ok := params["charset"]; structured && ok && !strings.EqualFold(cs, "utf-8") {
				return 0, &requestError{status: http.StatusUnsupportedMediaType, index: -1,
					msg: fmt.Sprintf("charset %q is not supported: the JSON event format is UTF-8", cs)}
			}
			switch {
			case mt == event.ApplicationCloudEventsJSON:
				return modeStructured, nil
			case mt == event.ApplicationCloudEventsBatchJSON:
				return modeBatch, nil
			case strings.HasPrefix(mt, "application/cloudevents"):
				return 0, &requestError{status: http.StatusUnsupportedMediaType, index: -1,
					msg: fmt.Sprintf("event format %q is not supported; send %s, %s or a binary-mode event",
						mt, event.ApplicationCloudEventsJSON, event.ApplicationCloudEventsBatchJSON)}
			}
		}
	}
	for k := range h {
		if len(k) > 3 && strings.EqualFold(k[:3], "ce-") {
			return modeBinary, nil
		}
	}
	return 0, &requestError{status: http.StatusUnsupportedMediaType, index: -1,
		msg: fmt.Sprintf("not a CloudEvent: send %s, %s, or a binary-mode event with ce- headers (Content-Type was %q)",
			event.ApplicationCloudEventsJSON, event.ApplicationCloudEventsBatchJSON, ct)}
}

// readEvents reads the events of a request body in the given mode.
func readEvents(mode int, h http.Header, body []byte) ([]event.Event, *requestError) {
	if mode == modeBinary {
		ev, err := readBinary(h, body)
		if err != nil {
			return nil, badEvent(0, err)
		}
		return []event.Event{ev}, nil
	}
	if !utf8.Valid(body) {
		return nil, badRequest("the body is not valid UTF-8")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest("empty body")
	}
	if mode == modeStructured {
		if b := bytes.TrimSpace(body); b[0] == '[' {
			return nil, badRequest("a structured-mode body is one JSON object; send a JSON array as %s", event.ApplicationCloudEventsBatchJSON)
		}
		ev, err := parseEvent(body)
		if err != nil {
			return nil, badEvent(0, err)
		}
		return []event.Event{ev}, nil
	}
	return readBatch(body)
}

// readBatch reads a JSON array of structured events.
func readBatch(body []byte) ([]event.Event, *requestError) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return nil, badRequest("a batch is a JSON array of events")
	}
	var out []event.Event
	var version string
	for i := 0; dec.More(); i++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, badEvent(i, fmt.Errorf("event: malformed JSON: %w", err))
		}
		if raw[0] != '{' {
			return nil, badEvent(i, fmt.Errorf("event: not a JSON object but %s", excerpt(string(raw))))
		}
		ev, sv, err := parseEventVersion(raw)
		if err != nil {
			return nil, badEvent(i, err)
		}
		if i == 0 {
			version = sv
		} else if sv != version {
			return nil, badEvent(i, attrErr("specversion", "%q in a batch of %s events: the events of a batch share one specversion", sv, version))
		}
		out = append(out, ev)
	}
	if _, err := dec.Token(); err != nil {
		return nil, badRequest("malformed batch: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badRequest("malformed batch: more than one JSON value")
	}
	return out, nil
}

// readBinary reads a binary-mode event: attributes in ce- headers
// (percent-encoded where needed), datacontenttype in Content-Type, the
// body as data.
func readBinary(h http.Header, body []byte) (event.Event, *attrError) {
	f := &fields{core: map[string]string{}, ext: map[string]any{}}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same error for the same request, whatever the map order
	for _, k := range keys {
		if len(k) <= 3 || !strings.EqualFold(k[:3], "ce-") {
			continue
		}
		name := strings.ToLower(k[3:])
		vs := h[k]
		switch {
		case name == "datacontenttype":
			return event.Event{}, attrErr(name, "in binary mode the content type is the Content-Type header, not ce-datacontenttype")
		case name == "data" || name == "data_base64":
			return event.Event{}, attrErr(name, "in binary mode the data is the body")
		case len(vs) != 1:
			return event.Event{}, attrErr(name, "given %d times", len(vs))
		}
		if aerr := validName(name); aerr != nil {
			return event.Event{}, aerr
		}
		v, err := url.PathUnescape(vs[0])
		if err != nil {
			return event.Event{}, attrErr(name, "malformed percent-encoding in header %s: %v", k, err)
		}
		if !utf8.ValidString(v) {
			return event.Event{}, attrErr(name, "not valid UTF-8 once percent-decoded")
		}
		if coreAttr(name) {
			f.core[name] = v
		} else {
			f.ext[name] = v
		}
	}
	if f.core["specversion"] == specVersion03 {
		if aerr := f.binary03(); aerr != nil {
			return event.Event{}, aerr
		}
	}
	if cts := h.Values("Content-Type"); len(cts) > 1 {
		return event.Event{}, attrErr("datacontenttype", "Content-Type given %d times", len(cts))
	} else if len(cts) == 1 {
		f.core["datacontenttype"] = cts[0]
	}
	if len(body) > 0 {
		f.hasData, f.data = true, body
		ct := f.core["datacontenttype"]
		switch {
		case ct == "":
			// No content type: JSON if it is JSON, else opaque bytes.
			f.b64 = !json.Valid(body)
		case isJSONType(ct):
			if !json.Valid(body) {
				return event.Event{}, attrErr("data", "the body is not valid JSON, but the content type %q says it is", ct)
			}
		default:
			f.b64 = !utf8.Valid(body)
		}
	}
	return f.build()
}

// binary03 maps the ce- headers of a CloudEvents 0.3 binary-mode event to
// 1.0, as sdk-go reads them: ce-schemaurl becomes dataschema. The body is
// the data as is, so ce-datacontentencoding has no meaning here (sdk-go
// refuses it too).
func (f *fields) binary03() *attrError {
	if _, ok := f.ext[attrDataContentEncoding]; ok {
		return attrErr(attrDataContentEncoding, "in binary mode the body is the data as is; datacontentencoding applies to structured mode only")
	}
	return f.common03()
}
