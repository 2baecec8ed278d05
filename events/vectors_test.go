package events

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// vector is one test of the CloudEvents JSON format conformance files in
// testdata/: a single event or a batch.
type vector struct {
	ID    string            `json:"id"`
	Event json.RawMessage   `json:"event"`
	Batch []json.RawMessage `json:"batch"`
}

func loadVectors(t testing.TB, file string) []vector {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Tests []vector `json:"tests"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if len(f.Tests) == 0 {
		t.Fatalf("%s has no tests", file)
	}
	return f.Tests
}

// members reads a vector event's members (numbers kept as written).
func members(t *testing.T, raw json.RawMessage) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkIntact compares what a workflow saw with the event as sent: every
// attribute, extension and the data, nothing more. In binary mode every
// extension travels as a header, so its value arrives as a string.
func checkIntact(t *testing.T, sent json.RawMessage, got view, binary bool) {
	t.Helper()
	m := members(t, sent)
	str := func(k string) string {
		var s string
		if err := json.Unmarshal(m[k], &s); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		return s
	}
	present := func(k string) bool { return m[k] != nil && string(m[k]) != "null" }
	core := map[string]string{"specversion": got.SpecVersion, "id": got.ID, "source": got.Source, "type": got.Type,
		"subject": got.Subject, "datacontenttype": got.DataContentType, "dataschema": got.DataSchema}
	for k, v := range core {
		want := ""
		if present(k) {
			want = str(k)
		}
		if v != want {
			t.Errorf("%s = %q; sent %q", k, v, want)
		}
	}
	switch {
	case present("time"):
		want, err := time.Parse(time.RFC3339Nano, str("time"))
		if err != nil {
			t.Fatal(err)
		}
		if !got.Time.Equal(want) {
			t.Errorf("time = %v; sent %v", got.Time, want)
		}
	case !got.Time.IsZero():
		t.Errorf("time = %v; sent none", got.Time)
	}
	var wantData []byte
	switch {
	case present("data_base64"):
		d, err := base64.StdEncoding.DecodeString(str("data_base64"))
		if err != nil {
			t.Fatal(err)
		}
		wantData = d
	case present("data") && isJSONType(got.DataContentType):
		wantData = compact(t, m["data"])
		got.Data = compact(t, got.Data)
	case present("data"):
		wantData = []byte(str("data"))
	}
	if !bytes.Equal(got.Data, wantData) {
		t.Errorf("data = %q; sent %q", got.Data, wantData)
	}
	wantExt := map[string]string{}
	for k, raw := range m {
		if coreAttr(k) || k == "data" || k == "data_base64" || !present(k) {
			continue
		}
		switch {
		case binary && raw[0] == '"':
			wantExt[k] = "string:" + str(k)
		case binary:
			wantExt[k] = "string:" + string(raw)
		case raw[0] == '"':
			wantExt[k] = "string:" + str(k)
		case raw[0] == 't' || raw[0] == 'f':
			wantExt[k] = "bool:" + string(raw)
		default:
			wantExt[k] = "int32:" + string(raw)
		}
	}
	if len(got.Extensions) != len(wantExt) {
		t.Errorf("extensions = %v; sent %v", got.Extensions, wantExt)
	}
	for k, v := range wantExt {
		if got.Extensions[k] != v {
			t.Errorf("extension %s = %q; sent %q", k, got.Extensions[k], v)
		}
	}
}

func compact(t *testing.T, b []byte) []byte {
	t.Helper()
	if len(b) == 0 {
		return b
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("not JSON: %q", b)
	}
	return buf.Bytes()
}

// identity is an event's (source, id), for counting distinct events.
func identity(t *testing.T, raw json.RawMessage) string {
	m := members(t, raw)
	return string(m["source"]) + "\x00" + string(m["id"])
}

// Every valid event of the conformance files goes through the real HTTP
// handler, in structured and in binary mode, is acknowledged with 202, and
// reaches a workflow with every attribute, extension and the data intact.
func TestValidVectors(t *testing.T) {
	for _, v := range loadVectors(t, "valid-events.json") {
		t.Run(v.ID+"/structured", func(t *testing.T) {
			n := startNode(t, testConfig())
			if r := n.structured(t, string(v.Event)); r.status != http.StatusAccepted {
				t.Fatalf("status %d: %s", r.status, r.raw)
			}
			got := n.read(t, eventType(t, v.Event), 1)
			checkIntact(t, v.Event, got[0], false)
		})
		t.Run(v.ID+"/binary", func(t *testing.T) {
			n := startNode(t, testConfig())
			body, headers := binaryOf(t, v.Event)
			if r := n.post(t, body, headers...); r.status != http.StatusAccepted {
				t.Fatalf("status %d: %s", r.status, r.raw)
			}
			got := n.read(t, eventType(t, v.Event), 1)
			checkIntact(t, v.Event, got[0], true)
		})
	}
}

// Valid batches are acknowledged whole; each distinct event is delivered
// once (a batch may carry one event twice), intact.
func TestValidBatchVectors(t *testing.T) {
	for _, v := range loadVectors(t, "valid-batches.json") {
		t.Run(v.ID, func(t *testing.T) {
			n := startNode(t, testConfig())
			body, err := json.Marshal(v.Batch)
			if err != nil {
				t.Fatal(err)
			}
			r := n.post(t, body, "Content-Type", "application/cloudevents-batch+json")
			if r.status != http.StatusAccepted {
				t.Fatalf("status %d: %s", r.status, r.raw)
			}
			distinct := map[string]json.RawMessage{}
			var order []string
			for _, ev := range v.Batch {
				id := identity(t, ev)
				if distinct[id] == nil {
					distinct[id] = ev
					order = append(order, id)
				}
			}
			if len(order) == 0 {
				if w := waiting(t, n.sys); len(w) != 0 {
					t.Fatalf("an empty batch left messages: %v", w)
				}
				return
			}
			got := n.read(t, eventType(t, v.Batch[0]), len(order))
			byID := map[string]view{}
			for _, g := range got {
				byID[strconv.Quote(g.Source)+"\x00"+strconv.Quote(g.ID)] = g
			}
			for _, id := range order {
				g, ok := byID[id]
				if !ok {
					t.Fatalf("event %q not delivered; got %+v", id, got)
				}
				checkIntact(t, distinct[id], g, false)
			}
			if w := waiting(t, n.sys); len(w) != 0 {
				t.Fatalf("more was delivered than the distinct events: %v", w)
			}
		})
	}
}

// invalidAttr is the attribute each invalid vector must be refused for.
var invalidAttr = map[string]string{
	"invalidNoSpecVersion": "specversion", "invalidNoId": "id", "invalidNoType": "type", "invalidNoSource": "source",
	"invalidTimeGarbage": "time", "invalidTimeToMinute": "time", "invalidTimeOffsetX": "time",
	"invalidTimeOffsetOutOfRange": "time", "invalidTimeOffsetNonInteger": "time", "invalidTimeOffsetHourOnly": "time",
	"invalidEmptyId": "id", "invalidEmptyType": "type", "invalidEmptySource": "source",
	"invalidEmptySpecVersion": "specversion", "invalidUnknownSpecVersion": "specversion",
	"invalidNonRfc2046DataContentType": "datacontenttype", "invalidEmptyDataContentType": "datacontenttype",
	"invalidEmptyDataSchema": "dataschema", "invalidEmptySubject": "subject",
	"invalidNumericId": "id", "invalidObjectId": "id",
	"invalidCapitalizedExtension": `"MyExtension"`, "invalidPunctuatedExtension": `"my.extension"`,
	"invalidNonIntegerExtensionValue": `"my.extension"`, "invalidBothDataAndDataBase64": "data_base64",
}

// Every invalid event is refused with 400, a JSON body naming the
// attribute, and index 0; nothing is committed.
func TestInvalidVectors(t *testing.T) {
	n := startNode(t, testConfig())
	for _, v := range loadVectors(t, "invalid-events.json") {
		attr, ok := invalidAttr[v.ID]
		if !ok {
			t.Fatalf("no expected attribute for %s", v.ID)
		}
		r := n.structured(t, string(v.Event))
		if r.status != http.StatusBadRequest || r.body.Index == nil || *r.body.Index != 0 || !strings.HasPrefix(r.body.Error, attr+":") {
			t.Errorf("%s: %d %s; want 400 naming %s at index 0", v.ID, r.status, r.raw, attr)
		}
	}
	if w := waiting(t, n.sys); len(w) != 0 {
		t.Fatalf("invalid events were committed: %v", w)
	}
}

// invalidBatchIndex is the event each invalid batch must be refused for.
var invalidBatchIndex = map[string]int{
	"invalidBatchMixedSpecVersions": 1, "invalidBatchContainingInvalidCloudEvent": 0, "invalidBatchContainingNonObject": 0,
}

// Every invalid batch is refused whole with 400 naming the event.
func TestInvalidBatchVectors(t *testing.T) {
	n := startNode(t, testConfig())
	for _, v := range loadVectors(t, "invalid-batches.json") {
		want, ok := invalidBatchIndex[v.ID]
		if !ok {
			t.Fatalf("no expected index for %s", v.ID)
		}
		body, err := json.Marshal(v.Batch)
		if err != nil {
			t.Fatal(err)
		}
		r := n.post(t, body, "Content-Type", "application/cloudevents-batch+json")
		if r.status != http.StatusBadRequest || r.body.Index == nil || *r.body.Index != want || r.body.Error == "" {
			t.Errorf("%s: %d %s; want 400 at index %d", v.ID, r.status, r.raw, want)
		}
	}
	if w := waiting(t, n.sys); len(w) != 0 {
		t.Fatalf("events of refused batches were committed: %v", w)
	}
}

func eventType(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(members(t, raw)["type"], &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// binaryOf turns a structured vector into a binary-mode request: each
// attribute a ce- header (percent-encoded where the HTTP binding says),
// datacontenttype the Content-Type, the data the body.
func binaryOf(t *testing.T, raw json.RawMessage) (body []byte, headers []string) {
	t.Helper()
	m := members(t, raw)
	for _, k := range sortedKeys(m) {
		v := m[k]
		if string(v) == "null" {
			continue
		}
		var s string
		if v[0] == '"' {
			if err := json.Unmarshal(v, &s); err != nil {
				t.Fatal(err)
			}
		} else {
			s = string(v)
		}
		switch k {
		case "datacontenttype":
			headers = append(headers, "Content-Type", s)
		case "data":
			var dct string
			if c := m["datacontenttype"]; c != nil && string(c) != "null" {
				if err := json.Unmarshal(c, &dct); err != nil {
					t.Fatal(err)
				}
			}
			if isJSONType(dct) {
				body = v
			} else {
				body = []byte(s)
			}
		case "data_base64":
			d, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				t.Fatal(err)
			}
			body = d
		default:
			headers = append(headers, "ce-"+k, percentEncode(s))
		}
	}
	return body, headers
}

// percentEncode encodes what the HTTP binding says a header value must
// not carry as is: space, double quote, percent and anything outside
// printable ASCII.
func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c == '"' || c == '%' || c >= 0x7f {
			b.WriteString("%" + strings.ToUpper(strconv.FormatUint(uint64(c)>>4, 16)) + strings.ToUpper(strconv.FormatUint(uint64(c)&15, 16)))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
