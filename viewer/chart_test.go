package viewer

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/norntype"
)

// TestSpansParallel: two activities with recorded starts, a timer and a
// child that overlap get a bar each, on different rows; marks stay on the
// instance's row; an activity after them reuses a free row.
func TestSpansParallel(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	js := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	down := js(receivedMessage{Channel: mailbox.DownChannel,
		Payload: js(mailbox.Down{PID: "wf/child:1", Status: string(norntype.StatusCompleted)})})
	evs := []norntype.HistoryEvent{
		{Seq: 0, Kind: norntype.EventStarted, At: at(0)},
		{Seq: 1, Kind: norntype.EventActivityRetry, Name: "a", Ref: "a:1", At: at(4), Payload: js(retryRecord{Attempt: 1, Start: at(1)})},
		{Seq: 2, Kind: norntype.EventActivityRetry, Name: "b", Ref: "b:1", At: at(5), Payload: js(retryRecord{Attempt: 1, Start: at(1)})},
		{Seq: 3, Kind: norntype.EventTimer, Name: "sleep:1", At: at(2)},
		{Seq: 4, Kind: norntype.EventChildSpawned, Name: "ship", Ref: "wf/child:1", At: at(3)},
		{Seq: 5, Kind: norntype.EventActivity, Name: "a", Ref: "a:1", At: at(10)},
		{Seq: 6, Kind: norntype.EventActivity, Name: "b", Ref: "b:1", At: at(12), Error: "declined"},
		{Seq: 7, Kind: norntype.EventReceived, Name: "receive:1", At: at(15), Payload: down},
		{Seq: 8, Kind: norntype.EventTimerFired, Name: "sleep:1", At: at(20)},
		{Seq: 9, Kind: norntype.EventActivity, Name: "c", Ref: "c:1", At: at(30)},
		{Seq: 10, Kind: norntype.EventCompleted, At: at(31)},
	}
	ss := spans(evs)
	byLabel := map[string]span{}
	for _, s := range ss {
		byLabel[s.Label] = s
	}
	check := func(label string, from, to int, approx, failed bool) {
		t.Helper()
		s, ok := byLabel[label]
		if !ok {
			t.Fatalf("no bar %q in %+v", label, ss)
		}
		if !s.Start.Equal(at(from)) || !s.End.Equal(at(to)) || s.Approx != approx || s.Failed != failed || s.Open || s.Mark {
			t.Errorf("%s = %+v, want %dms to %dms approx %v failed %v", label, s, from, to, approx, failed)
		}
	}
	check("a", 1, 10, false, false)
	check("b", 1, 12, false, true)
	check("sleep:1", 2, 20, false, false)
	check("child wf/child:1", 3, 15, false, false)
	// No recorded start: from the event before (the timer's firing).
	check("c", 20, 30, true, false)
	if s := byLabel["completed"]; !s.Mark || s.Seq != 10 {
		t.Errorf("completed = %+v, want a mark", s)
	}

	rows := layout(ss, at(31), func(t time.Time) float64 { return float64(t.Sub(t0)) / float64(time.Millisecond) * 20 })
	byLabel = map[string]span{}
	for _, s := range ss {
		byLabel[s.Label] = s
	}
	parallel := []string{"a", "b", "sleep:1", "child wf/child:1"}
	seen := map[int]string{}
	for _, l := range parallel {
		r := byLabel[l].row
		if r == 0 {
			t.Errorf("%s on the instance's row", l)
		}
		if o, dup := seen[r]; dup {
			t.Errorf("%s and %s overlap on row %d", l, o, r)
		}
		seen[r] = l
	}
	if rows != 5 || byLabel["c"].row == 0 || byLabel["started"].row != 0 {
		t.Errorf("rows = %d, c on %d, started on %d; want 5 rows, c reusing one", rows, byLabel["c"].row, byLabel["started"].row)
	}

	svg := string(chart(ss, at(31), ""))
	for _, want := range []string{`<svg class="chart"`, `class="bar activity failed"`, `<a href="#ev-6">`, `class="bar activity approx"`,
		`class="bar end ok"`, "+31ms"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q:\n%s", want, svg)
		}
	}
}

// TestSpansOpen: what has not ended is open and runs to the chart's end.
func TestSpansOpen(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	evs := []norntype.HistoryEvent{
		{Seq: 0, Kind: norntype.EventStarted, At: t0},
		{Seq: 1, Kind: norntype.EventReceiveWait, Name: "receive:1", At: t0.Add(time.Second)},
		{Seq: 2, Kind: norntype.EventChildSpawned, Ref: "p/child:1", At: t0.Add(2 * time.Second)},
	}
	ss := spans(evs)
	if len(ss) != 3 || !ss[1].Open || !ss[2].Open || ss[1].Class != "wait" || ss[2].Class != "child" {
		t.Fatalf("spans = %+v", ss)
	}
	svg := string(chart(ss, t0.Add(time.Minute), "a note <b>"))
	if !strings.Contains(svg, `class="bar wait open"`) || !strings.Contains(svg, "+1m00s") || !strings.Contains(svg, "a note &lt;b&gt;") {
		t.Errorf("chart:\n%s", svg)
	}
	if chart(nil, t0, "") != "" {
		t.Error("chart of nothing is not empty")
	}
}
