package viewer

import (
	"strings"
	"testing"
	"time"
)

func TestDiagramSteps(t *testing.T) {
	// Equal neighbours fold into one step with a count; bookkeeping rows
	// are left out.
	rows := []item{
		{Seq: 0, Class: "start", Label: "started", Name: "wf"},
		{Seq: 1, Class: "other", Label: "clock read"},
		{Seq: 2, Class: "activity", Label: "activity", Name: "a"},
		{Seq: 3, Class: "retry", Label: "attempt failed", Name: "b"},
		{Seq: 4, Class: "activity", Label: "activity", Name: "a"},
		{Seq: 5, Class: "activity", Label: "activity", Name: "b"},
	}
	got := diagramSteps(rows, nil, 0, []step{{Class: "timer", Text: "waits", Seq: -1, Wait: true}})
	want := []string{"started wf", "activity a", "activity b", "waits"}
	if len(got) != len(want) {
		t.Fatalf("steps %+v", got)
	}
	for i, s := range got {
		if s.Text != want[i] {
			t.Errorf("step %d = %q, want %q", i, s.Text, want[i])
		}
	}
	if got[1].Count != 2 || got[1].Seq != 2 || !got[3].Wait {
		t.Errorf("fold: %+v", got)
	}

	// A long run keeps its start and end, with the middle folded; a gap
	// between head and tail shows.
	var head []item
	for i := range 100 {
		name := "a"
		if i%2 == 1 {
			name = "b"
		}
		head = append(head, item{Seq: int64(i), Class: "activity", Label: "activity", Name: name})
	}
	tail := []item{{Seq: 500, Class: "end ok", Label: "completed"}}
	got = diagramSteps(head, tail, 399, nil)
	if len(got) != 40 {
		t.Fatalf("%d steps, want 40", len(got))
	}
	if got[0].Seq != 0 || got[39].Text != "completed" || got[38].Text != "… 399 events not loaded …" {
		t.Errorf("ends: %+v … %+v", got[0], got[37:])
	}
	if got[20].Class != "gap" || !strings.Contains(got[20].Text, "63 more steps") {
		t.Errorf("fold: %+v", got[20])
	}

	svgText := string(svg([]step{{Class: "start", Text: `<b>"x"</b>`, Seq: 0}, {Class: "timer", Text: "w", Seq: -1, Wait: true}}))
	if strings.Contains(svgText, "<b>") || !strings.Contains(svgText, `href="#ev-0"`) || !strings.Contains(svgText, "step timer wait") {
		t.Errorf("svg: %s", svgText)
	}
}

func TestFmtDuration(t *testing.T) {
	for d, want := range map[int64]string{
		500:                  "0µs",
		1_500_000:            "1ms",
		2_500_000_000:        "2.5s",
		125_000_000_000:      "2m05s",
		3*3600e9 + 7*60e9:    "3h07m",
		50 * 3600e9:          "2d02h",
		-2 * 1_000_000_000e0: "-2.0s",
	} {
		if got := fmtDuration(timeDuration(d)); got != want {
			t.Errorf("fmtDuration(%d) = %q, want %q", d, got, want)
		}
	}
	if comma(1234567) != "1,234,567" || comma(-1000) != "-1,000" || comma(12) != "12" {
		t.Error("comma")
	}
}

func timeDuration(n int64) time.Duration { return time.Duration(n) }
