package events

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
)

// fuzzHandled is the type FuzzIngress hands to a workflow (Handle), so
// that input decoding and spawning are fuzzed too.
const fuzzHandled = "io.cloudevents.test.handled"

// FuzzIngress feeds bodies, content types and ce- headers to the handler
// on a working store. Whatever the input: no panic, no 5xx, a JSON error
// body on every refusal; and every event the handler accepts reads back
// from its stored form unchanged.
//
//	go test ./events -run '^$' -fuzz FuzzIngress -fuzztime 2m
func FuzzIngress(f *testing.F) {
	for _, file := range []string{"valid-events.json", "invalid-events.json"} {
		for _, v := range loadVectors(f, file) {
			f.Add([]byte(v.Event), "application/cloudevents+json", "")
			body, headers := binaryOfFuzz(v.Event)
			f.Add(body, headerValue(headers, "Content-Type"), headerLines(headers))
		}
	}
	for _, file := range []string{"valid-batches.json", "invalid-batches.json"} {
		for _, v := range loadVectors(f, file) {
			b, _ := json.Marshal(v.Batch)
			f.Add(b, "application/cloudevents-batch+json", "")
		}
	}
	f.Add([]byte(`{"ID":"o-1","Total":3}`), "application/json",
		"ce-specversion: 1.0\nce-id: h1\nce-source: /f\nce-type: "+fuzzHandled+"\nce-traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	f.Add([]byte(`[{"specversion":"1.0","id":"h2","source":"/f","type":"`+fuzzHandled+`","data":{"ID":"x"}}]`),
		"application/cloudevents-batch+json", "")
	f.Add([]byte(`{"specversion":"1.0","id":"n1","source":"/f","type":"t","norninstance":"nobody"}`), "application/cloudevents+json", "")
	// CloudEvents 0.3, mapped to 1.0.
	f.Add([]byte(`{"specversion":"0.3","id":"v3","source":"/f","type":"t","schemaurl":"urn:s","datacontentencoding":"base64","data":"AAE="}`),
		"application/cloudevents+json", "")
	f.Add([]byte("\x00\x01"), "application/octet-stream", "ce-specversion: 0.3\nce-id: v3b\nce-source: /f\nce-type: t\nce-schemaurl: urn:s")

	handled := actor.Workflow("handled", func(ctx *actor.Context, in Event[order]) (int, error) { return in.Data.Total, nil })
	st := testutil.OpenSQLite(f, testutil.SQLitePath(f))
	sys := testutil.StartNode(f, actor.Config{Store: st, Workflows: actor.Register(handled), PassivateAfter: time.Second})
	h, err := NewHandler(sys, WithLogger(testutil.Logger()), WithMaxBodyBytes(64<<10), Handle(fuzzHandled, handled))
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, body []byte, contentType, ceHeaders string) {
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		for _, line := range strings.Split(ceHeaders, "\n") {
			name, value, ok := strings.Cut(line, ":")
			if ok && name != "" {
				req.Header.Add(textproto.CanonicalMIMEHeaderKey(name), strings.TrimSpace(value))
			}
		}
		header := req.Header.Clone()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch code := rec.Code; {
		case code >= 500:
			t.Fatalf("%d %s for body %q, Content-Type %q, headers %q", code, rec.Body, body, contentType, ceHeaders)
		case code == http.StatusAccepted:
			checkStoredForm(t, header, body)
		default:
			var e errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("%d with body %q: not a JSON error", code, rec.Body)
			}
		}
	})
}

// checkStoredForm reads the events of an accepted request again and checks
// that each reads back from its stored form (structured JSON) unchanged.
func checkStoredForm(t *testing.T, header http.Header, body []byte) {
	mode, rerr := requestMode(header)
	if rerr != nil {
		t.Fatalf("accepted, but its mode is refused now: %v", rerr)
	}
	evs, rerr := readEvents(mode, header, body)
	if rerr != nil {
		t.Fatalf("accepted, but refused when read again: %v", rerr)
	}
	for i, ev := range evs {
		stored, err := encodeEvent(ev)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		back, err := parseEvent(stored)
		if err != nil {
			t.Fatalf("event %d: stored form %s does not read back: %v", i, stored, err)
		}
		again, err := encodeEvent(back)
		if err != nil || !bytes.Equal(again, stored) {
			t.Fatalf("event %d changed on the way through the store:\n%s\n%s", i, stored, again)
		}
		if !bytes.Equal(back.DataEncoded, ev.DataEncoded) {
			t.Fatalf("event %d: data %q came back as %q", i, ev.DataEncoded, back.DataEncoded)
		}
	}
}

// binaryOfFuzz is binaryOf for seeds: vectors are well-formed JSON.
func binaryOfFuzz(raw json.RawMessage) ([]byte, []string) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return raw, nil
	}
	var headers []string
	var body []byte
	for _, k := range sortedKeys(m) {
		v := m[k]
		var s string
		if json.Unmarshal(v, &s) != nil {
			s = string(v)
		}
		switch k {
		case "datacontenttype":
			headers = append(headers, "Content-Type", s)
		case "data", "data_base64":
			body = []byte(s)
		default:
			headers = append(headers, "ce-"+k, percentEncode(s))
		}
	}
	return body, headers
}

func headerValue(headers []string, name string) string {
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == name {
			return headers[i+1]
		}
	}
	return ""
}

// headerLines writes the ce- headers as "name: value" lines.
func headerLines(headers []string) string {
	var b strings.Builder
	for i := 0; i+1 < len(headers); i += 2 {
		if strings.HasPrefix(headers[i], "ce-") {
			b.WriteString(headers[i] + ": " + headers[i+1] + "\n")
		}
	}
	return b.String()
}
