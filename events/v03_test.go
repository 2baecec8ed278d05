package events

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/client"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/protocol"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
)

// sdkSend sends ev to the ingress with sdk-go's own HTTP client, in
// structured or binary mode, and returns the status it got.
func (n *node) sdkSend(t *testing.T, ev event.Event, structured bool) int {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	p, err := cehttp.New(cehttp.WithTarget(n.url), cehttp.WithClient(http.Client{Transport: tr, Timeout: wait}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx := binding.WithForceBinary(testutil.Ctx(t, wait))
	if structured {
		ctx = binding.WithForceStructured(testutil.Ctx(t, wait))
	}
	res := c.Send(ctx, ev)
	var hr *cehttp.Result
	if !protocol.ResultAs(res, &hr) {
		t.Fatalf("send: %v", res)
	}
	return hr.StatusCode
}

// event03 is a CloudEvents 0.3 event built with sdk-go.
func event03(t *testing.T, id string, set func(e *event.Event) error) event.Event {
	t.Helper()
	e := event.New(event.CloudEventsVersionV03)
	e.SetID(id)
	e.SetSource("https://example.com/shop")
	e.SetType("t.v03")
	if err := set(&e); err != nil {
		t.Fatal(err)
	}
	if err := e.Validate(); err != nil {
		t.Fatalf("sdk-go refuses the test's own event: %v", err)
	}
	return e
}

// A CloudEvents 0.3 event sent by sdk-go's client, in binary and in
// structured mode, is accepted and reaches a workflow as the 1.0 event
// sdk-go maps it to: schemaurl is dataschema, base64 data
// (datacontentencoding) is the decoded bytes, and the 0.3-only attributes
// do not linger as extensions.
func TestCloudEvents03FromSDK(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 30, 0, 0, time.UTC)
	cases := []struct {
		name string
		ev   event.Event
		// inStructured: members sdk-go's structured form must carry, so
		// that the case tests what it says.
		inStructured []string
		want         view
	}{{
		name: "text with schemaurl",
		ev: event03(t, "text", func(e *event.Event) error {
			e.SetSubject("order/1")
			e.SetTime(at)
			e.SetDataSchema("https://example.com/schemas/order.json")
			e.SetExtension("region", "eu")
			return e.SetData("text/plain; charset=utf-8", "Hello, 🌎!\n")
		}),
		inStructured: []string{`"specversion":"0.3"`, `"schemaurl":"https://example.com/schemas/order.json"`},
		want: view{ID: "text", Subject: "order/1", DataContentType: "text/plain; charset=utf-8",
			DataSchema: "https://example.com/schemas/order.json", Time: at,
			Extensions: map[string]string{"region": "string:eu"}, Data: []byte("Hello, 🌎!\n")},
	}, {
		name: "json",
		ev: event03(t, "json", func(e *event.Event) error {
			return e.SetData(event.ApplicationJSON, order{ID: "o-1", Total: 30})
		}),
		inStructured: []string{`"specversion":"0.3"`, `"data":{`},
		want: view{ID: "json", DataContentType: event.ApplicationJSON, Extensions: map[string]string{},
			Data: []byte(`{"ID":"o-1","Total":30}`)},
	}, {
		name: "base64 data",
		ev: event03(t, "bytes", func(e *event.Event) error {
			e.SetDataContentEncoding(event.Base64)
			e.SetDataSchema("urn:example:blob")
			// The bytes themselves: sdk-go's SetData for 0.3 would store
			// their base64 text, which its encoder then encodes again.
			e.SetDataContentType("application/octet-stream")
			e.DataEncoded, e.DataBase64 = []byte{0, 1, 2, 0xfe, 0xff, '"'}, true
			return nil
		}),
		inStructured: []string{`"datacontentencoding":"base64"`, `"data":"AAEC/v8i"`, `"schemaurl":"urn:example:blob"`},
		want: view{ID: "bytes", DataContentType: "application/octet-stream", DataSchema: "urn:example:blob",
			Extensions: map[string]string{}, Data: []byte{0, 1, 2, 0xfe, 0xff, '"'}},
	}, {
		name: "no data",
		ev:   event03(t, "empty", func(e *event.Event) error { e.SetExtension("n", 7); return nil }),
		want: view{ID: "empty", Extensions: map[string]string{"n": "int32:7"}},
	}}
	for _, c := range cases {
		structured, err := json.Marshal(c.ev)
		if err != nil {
			t.Fatal(err)
		}
		for _, member := range c.inStructured {
			if !bytes.Contains(structured, []byte(member)) {
				t.Fatalf("%s: sdk-go's structured form %s lacks %s", c.name, structured, member)
			}
		}
		for _, mode := range []string{"structured", "binary"} {
			t.Run(c.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				n := startNode(t, testConfig())
				if status := n.sdkSend(t, c.ev, mode == "structured"); status != http.StatusAccepted {
					t.Fatalf("status %d; want 202", status)
				}
				got := n.read(t, "t.v03", 1)[0]
				want := c.want
				want.SpecVersion, want.Source, want.Type = specVersion, "https://example.com/shop", "t.v03"
				want.Extensions = maps.Clone(want.Extensions)
				if mode == "binary" && want.Extensions["n"] != "" {
					want.Extensions["n"] = "string:7" // a header is text
				}
				if !got.Time.Equal(want.Time) {
					t.Errorf("time = %v; want %v", got.Time, want.Time)
				}
				got.Time, want.Time = time.Time{}, time.Time{}
				if c.name == "json" {
					got.Data = compact(t, got.Data)
				}
				if g, w := jsonOf(t, got), jsonOf(t, want); g != w {
					t.Errorf("workflow saw\n%s\nwant\n%s", g, w)
				}
			})
		}
	}
}

func jsonOf(t *testing.T, v view) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The CloudEvents conformance suite's 0.3 events (text data with a
// charset), as its tool sends them, in both modes.
func TestCloudEvents03Conformance(t *testing.T) {
	t.Parallel()
	n := startNode(t, testConfig())
	for i, data := range []string{"Hello, World!\n", "Hello, 🌎!\n"} {
		ct := []string{"text/plain; charset=us-ascii", "text/plain; charset=utf-8"}[i]
		id := []string{"conformance-0001", "conformance-0002"}[i]
		src := "//github.com/cloudevents/conformance/yaml/v3.yaml"
		dataJSON, _ := json.Marshal(data)
		if r := n.structured(t, `{"specversion":"0.3","type":"io.cloudevents.minimum","id":"`+id+`","source":"`+src+
			`","datacontenttype":"`+ct+`","data":`+string(dataJSON)+`}`); r.status != http.StatusAccepted {
			t.Fatalf("structured %s: %d %s", id, r.status, r.raw)
		}
		if r := n.post(t, []byte(data), "ce-specversion", "0.3", "ce-type", "io.cloudevents.minimum", "ce-id", id+"b",
			"ce-source", src, "Content-Type", ct); r.status != http.StatusAccepted {
			t.Fatalf("binary %s: %d %s", id, r.status, r.raw)
		}
		for _, got := range n.read(t, "io.cloudevents.minimum", 2) {
			if got.SpecVersion != specVersion || !strings.HasPrefix(got.ID, id) || got.Source != src ||
				got.DataContentType != ct || string(got.Data) != data || len(got.Extensions) != 0 {
				t.Errorf("workflow saw %+v", got)
			}
		}
	}
}

// Structured 0.3 events written by hand: what sdk-go's client does not
// produce but a 0.3 producer may send, and what is refused, with the
// attribute named.
func TestCloudEvents03Structured(t *testing.T) {
	t.Parallel()
	n := startNode(t, actor.Config{MaxPayload: 2000}, WithMaxBodyBytes(4000))
	ev := func(members string) string {
		return `{"specversion":"0.3","id":"x","source":"/s","type":"t.v03"` + members + `}`
	}
	refused := []struct{ name, body, attr string }{
		{"unknown version 0.2", `{"specversion":"0.2","id":"x","source":"/s","type":"t.v03"}`, "specversion"},
		{"unknown version 2.0", `{"specversion":"2.0","id":"x","source":"/s","type":"t.v03"}`, "specversion"},
		{"version as number", `{"specversion":0.3,"id":"x","source":"/s","type":"t.v03"}`, "specversion"},
		{"no id", `{"specversion":"0.3","source":"/s","type":"t.v03"}`, "id"},
		{"relative schemaurl", ev(`,"schemaurl":"/schemas/order"`), "schemaurl"},
		{"empty schemaurl", ev(`,"schemaurl":""`), "schemaurl"},
		{"schemaurl not a string", ev(`,"schemaurl":7`), "schemaurl"},
		{"1.0 dataschema", ev(`,"dataschema":"https://example.com/s"`), "dataschema"},
		{"1.0 data_base64", ev(`,"data_base64":"AAE="`), "data_base64"},
		{"other encoding", ev(`,"datacontentencoding":"quoted-printable","data":"a"`), "datacontentencoding"},
		{"encoding not a string", ev(`,"datacontentencoding":true,"data":"a"`), "datacontentencoding"},
		{"base64 not a string", ev(`,"datacontentencoding":"base64","data":{"a":1}`), "data"},
		{"base64 malformed", ev(`,"datacontentencoding":"base64","data":"not base64!"`), "data"},
		{"bad time", ev(`,"time":"yesterday"`), "time"},
		{"system channel", `{"specversion":"0.3","id":"x","source":"/s","type":"$norn.down"}`, "type"},
		{"bad extension name", ev(`,"Region":"eu"`), `"Region"`},
	}
	for _, c := range refused {
		r := n.structured(t, c.body)
		if r.status != http.StatusBadRequest || r.body.Index == nil || *r.body.Index != 0 || !strings.HasPrefix(r.body.Error, c.attr+":") {
			t.Errorf("%s: %d %s; want 400 naming %s", c.name, r.status, r.raw, c.attr)
		}
	}
	big := ev(`,"datacontenttype":"text/plain","data":"` + strings.Repeat("x", 2500) + `"`)
	if r := n.structured(t, big); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("0.3 event over MaxPayload: %d %s; want 413", r.status, r.raw)
	}
	if w := waiting(t, n.sys); len(w) != 0 {
		t.Fatalf("refused events were committed: %v", w)
	}

	// Accepted: an upper-case encoding name (RFC 2045 tokens are
	// case-insensitive) with JSON-typed base64 data; 0.3 names that are
	// 1.0 extensions stay extensions in a 1.0 event.
	if r := n.structured(t, ev(`,"datacontentencoding":"BASE64","datacontenttype":"application/json","data":"eyJhIjoxfQ=="`)); r.status != http.StatusAccepted {
		t.Fatalf("base64 JSON: %d %s", r.status, r.raw)
	}
	got := n.read(t, "t.v03", 1)[0]
	if string(got.Data) != `{"a":1}` || got.DataContentType != "application/json" || len(got.Extensions) != 0 {
		t.Errorf("base64 JSON: workflow saw %+v", got)
	}
	r := n.structured(t, `{"specversion":"1.0","id":"y","source":"/s","type":"t.v10","schemaurl":"/rel","datacontentencoding":"x"}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("1.0 with 0.3 names: %d %s", r.status, r.raw)
	}
	got = n.read(t, "t.v10", 1)[0]
	if got.DataSchema != "" || got.Extensions["schemaurl"] != "string:/rel" || got.Extensions["datacontentencoding"] != "string:x" {
		t.Errorf("1.0 with 0.3 names: workflow saw %+v", got)
	}
}

// Binary-mode 0.3: ce-schemaurl is the schema, the body is the data as
// is; ce-datacontentencoding and the 1.0 ce-dataschema are refused, and so
// is an unknown version.
func TestCloudEvents03Binary(t *testing.T) {
	t.Parallel()
	n := startNode(t, testConfig())
	hs := func(extra ...string) []string {
		return append([]string{"ce-specversion", "0.3", "ce-id", "b", "ce-source", "/s", "ce-type", "t.v03"}, extra...)
	}
	refused := []struct {
		name    string
		headers []string
		attr    string
	}{
		{"unknown version 0.2", []string{"ce-specversion", "0.2", "ce-id", "b", "ce-source", "/s", "ce-type", "t.v03"}, "specversion"},
		{"unknown version 2.0", []string{"ce-specversion", "2.0", "ce-id", "b", "ce-source", "/s", "ce-type", "t.v03"}, "specversion"},
		{"datacontentencoding", hs("ce-datacontentencoding", "base64", "Content-Type", "text/plain"), "datacontentencoding"},
		{"1.0 dataschema", hs("ce-dataschema", "https://example.com/s"), "dataschema"},
		{"relative schemaurl", hs("ce-schemaurl", "schemas/x"), "schemaurl"},
		{"JSON type, no JSON", hs("Content-Type", "application/json"), "data"},
	}
	for _, c := range refused {
		r := n.post(t, []byte("{not json"), c.headers...)
		if r.status != http.StatusBadRequest || r.body.Index == nil || !strings.HasPrefix(r.body.Error, c.attr+":") {
			t.Errorf("%s: %d %s; want 400 naming %s", c.name, r.status, r.raw, c.attr)
		}
	}
	if w := waiting(t, n.sys); len(w) != 0 {
		t.Fatalf("refused events were committed: %v", w)
	}
	body := []byte{0xff, 0, 'a'}
	if r := n.post(t, body, hs("ce-schemaurl", "https://example.com/s%20x", "Content-Type", "application/octet-stream")...); r.status != http.StatusAccepted {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	got := n.read(t, "t.v03", 1)[0]
	if got.SpecVersion != specVersion || got.DataSchema != "https://example.com/s x" || !bytes.Equal(got.Data, body) || len(got.Extensions) != 0 {
		t.Errorf("workflow saw %+v", got)
	}
}

// A batch of 0.3 events is taken; a batch that mixes versions is refused
// whole, naming the first event of another version.
func TestCloudEvents03Batch(t *testing.T) {
	t.Parallel()
	n := startNode(t, testConfig())
	e03 := func(id string) string {
		return `{"specversion":"0.3","id":"` + id + `","source":"/s","type":"t.v03","schemaurl":"https://example.com/s","datacontentencoding":"base64","data":"AAE="}`
	}
	mixed := "[" + e03("m1") + "," + minimal("m2") + "]"
	r := n.post(t, []byte(mixed), "Content-Type", "application/cloudevents-batch+json")
	if r.status != http.StatusBadRequest || r.body.Index == nil || *r.body.Index != 1 || !strings.HasPrefix(r.body.Error, "specversion:") {
		t.Fatalf("mixed batch: %d %s; want 400 at index 1 naming specversion", r.status, r.raw)
	}
	if w := waiting(t, n.sys); len(w) != 0 {
		t.Fatalf("a refused batch delivered: %v", w)
	}
	r = n.post(t, []byte("["+e03("a")+","+e03("b")+"]"), "Content-Type", "application/cloudevents-batch+json")
	if r.status != http.StatusAccepted {
		t.Fatalf("0.3 batch: %d %s", r.status, r.raw)
	}
	for _, got := range n.read(t, "t.v03", 2) {
		if got.DataSchema != "https://example.com/s" || !bytes.Equal(got.Data, []byte{0, 1}) || len(got.Extensions) != 0 {
			t.Errorf("workflow saw %+v", got)
		}
	}
}

// A workflow that Handle starts for a 0.3 event gets its data decoded and
// the mapped attributes.
func TestCloudEvents03Handle(t *testing.T) {
	t.Parallel()
	type seen struct {
		Order              order
		SpecVersion, Sch   string
		DataContentType, S string
	}
	wf := actor.Workflow("v03", func(ctx *actor.Context, in Event[order]) (seen, error) {
		return seen{Order: in.Data, SpecVersion: in.SpecVersion(), Sch: in.DataSchema(), DataContentType: in.DataContentType(), S: in.Subject()}, nil
	})
	n := startNode(t, actor.Config{Workflows: actor.Register(wf)}, Handle("t.order03", wf))
	e := event03(t, "h1", func(e *event.Event) error {
		e.SetType("t.order03")
		e.SetSubject("o-9")
		e.SetDataSchema("https://example.com/order")
		return e.SetData(event.ApplicationJSON, order{ID: "o-9", Total: 5})
	})
	if status := n.sdkSend(t, e, true); status != http.StatusAccepted {
		t.Fatalf("status %d", status)
	}
	got, err := actor.Await(testutil.Ctx(t, wait), n.sys, wf, actor.PID(InstanceID("v03", "https://example.com/shop", "h1")))
	want := seen{Order: order{"o-9", 5}, SpecVersion: specVersion, Sch: "https://example.com/order", DataContentType: event.ApplicationJSON, S: "o-9"}
	if err != nil || got != want {
		t.Fatalf("workflow = %+v, %v; want %+v", got, err, want)
	}
}
