package historyfile_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/norntest/historyfile"
	"github.com/nornlabs/norn/norntype"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	hist := []norntype.HistoryEvent{
		{Seq: 0, Kind: "started", Name: "order", Ref: "json", Payload: []byte(`{"N":1,"Note":"a<b"}`), At: at},
		{Seq: 1, Kind: "activity", Name: "pack", Ref: "pack:1", Payload: []byte{0x0a, 0x03, 'a', 'b', 'c'}, Digest: "d1", At: at},
		{Seq: 2, Kind: "failed", ErrorRecord: `{"message":"boom"}`, At: at},
	}
	var b bytes.Buffer
	if err := historyfile.Write(&b, historyfile.New("order-1", "order", hist)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"N": 1`) {
		t.Errorf("a JSON payload is not kept readable:\n%s", b.String())
	}
	f, err := historyfile.Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	got := f.History()
	if f.Instance != "order-1" || f.Workflow != "order" || len(got) != len(hist) {
		t.Fatalf("read back %+v", f)
	}
	for i := range hist {
		w, g := hist[i], got[i]
		if !bytes.Equal(w.Payload, g.Payload) || w.Kind != g.Kind || w.Ref != g.Ref || w.ErrorRecord != g.ErrorRecord ||
			w.Digest != g.Digest || !w.At.Equal(g.At) {
			t.Errorf("event %d: wrote %+v, read %+v", i, w, g)
		}
	}
}

func TestReadRejects(t *testing.T) {
	t.Parallel()
	for name, src := range map[string]string{
		"not JSON":      `hello`,
		"other format":  `{"format": 2, "workflow": "w", "events": [{"seq": 0, "kind": "started"}]}`,
		"no events":     `{"format": 1, "workflow": "w", "events": []}`,
		"gap in seq":    `{"format": 1, "workflow": "w", "events": [{"seq": 0, "kind": "started"}, {"seq": 2, "kind": "completed"}]}`,
		"unknown field": `{"format": 1, "workflow": "w", "extra": 1, "events": [{"seq": 0, "kind": "started"}]}`,
		"no workflow":   `{"format": 1, "events": [{"seq": 0, "kind": "started"}]}`,
	} {
		if _, err := historyfile.Read(strings.NewReader(src)); !errors.Is(err, historyfile.ErrFormat) {
			t.Errorf("%s: Read = %v, want ErrFormat", name, err)
		}
	}
}
