package viewer

import (
	"encoding/json"
	"fmt"
	"html/template"
	"sort"
	"strings"
	"time"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/norntype"
)

// span is one bar of the timeline chart: something that took time, from
// its start to its end, or a moment (a mark) when Start equals End.
type span struct {
	Class string // activity, timer, wait, child, message, end …
	Label string
	Start time.Time
	End   time.Time
	// Open: not ended yet; the bar runs to the chart's end.
	Open bool
	// Approx: the start was not recorded and is inferred (see spans).
	Approx bool
	Failed bool
	Mark   bool  // a moment, not a duration
	Seq    int64 // the history row the bar links to (-1: none)

	// Set by layout: the row, the bar's and its label's place, and the
	// extent of both.
	row        int
	barX, barW float64
	label      string
	labelX     float64
	anchor     string
	inside     bool
	x0, x1     float64
}

// spans turns the loaded events of one run (in order; a window of the run
// if gap > 0) into the chart's bars:
//
//   - an activity runs from its first attempt's start until its result;
//     history records that start only once an attempt failed, otherwise
//     the bar starts at the event before the result (Approx), which is
//     right for a call the workflow made after that event, and late for
//     one it made earlier and that ran beside others;
//   - a timer runs from being set until it fired, a receive with a
//     timeout from its wait until its message or its timeout, a child from
//     its spawn until its end arrived;
//   - what has not ended is Open, up to now (or up to the last event, for
//     an instance that has ended);
//   - messages, the start and the end are marks.
func spans(events []norntype.HistoryEvent) []span {
	var out []span
	open := map[string]int{} // key → index in out of an open span
	begin := func(key string, s span) {
		s.Open = true
		open[key] = len(out)
		out = append(out, s)
	}
	finish := func(key string, at time.Time, seq int64, failed bool) bool {
		i, ok := open[key]
		if !ok {
			return false
		}
		delete(open, key)
		out[i].End, out[i].Open, out[i].Seq = at, false, seq
		out[i].Failed = out[i].Failed || failed
		return true
	}
	mark := func(cls, label string, e norntype.HistoryEvent) {
		out = append(out, span{Class: cls, Label: label, Start: e.At, End: e.At, Mark: true, Seq: e.Seq})
	}
	var prev time.Time
	for _, e := range events {
		switch e.Kind {
		case norntype.EventStarted:
			mark("start", "started", e)
		case norntype.EventActivityRetry:
			key := "act:" + e.Ref
			if _, ok := open[key]; !ok {
				var r retryRecord
				_ = json.Unmarshal(e.Payload, &r)
				s := span{Class: "activity", Label: e.Name, Start: r.Start, Seq: e.Seq}
				if r.Start.IsZero() {
					s.Start, s.Approx = prev, true
				}
				begin(key, s)
			}
			out[open["act:"+e.Ref]].Label = e.Name + " (retrying)"
		case norntype.EventActivity, norntype.EventCompensation:
			key := "act:" + e.Ref
			label := e.Name
			if e.Kind == norntype.EventCompensation {
				label = "compensate " + e.Name
			}
			if i, ok := open[key]; ok {
				out[i].Label = label
				finish(key, e.At, e.Seq, e.Error != "")
				break
			}
			start, approx := prev, true
			if start.IsZero() {
				start = e.At
			}
			out = append(out, span{Class: "activity", Label: label, Start: start, End: e.At, Approx: approx, Failed: e.Error != "", Seq: e.Seq})
		case norntype.EventTimer:
			begin("timer:"+e.Name, span{Class: "timer", Label: e.Name, Start: e.At, Seq: e.Seq})
		case norntype.EventTimerFired:
			if !finish("timer:"+e.Name, e.At, e.Seq, false) {
				mark("timer", "timer fired "+e.Name, e)
			}
		case norntype.EventReceiveWait:
			begin("recv:"+e.Name, span{Class: "wait", Label: e.Name, Start: e.At, Seq: e.Seq})
		case norntype.EventReceiveTimeout:
			if !finish("recv:"+e.Name, e.At, e.Seq, true) {
				mark("wait", "receive timed out", e)
			}
		case norntype.EventReceived:
			var m receivedMessage
			_ = json.Unmarshal(e.Payload, &m)
			if m.Channel == mailbox.DownChannel {
				var down mailbox.Down
				_ = json.Unmarshal(m.Payload, &down)
				failed := down.Status != string(norntype.StatusCompleted)
				if finish("child:"+string(down.PID), e.At, e.Seq, failed) {
					break
				}
			}
			if finish("recv:"+e.Name, e.At, e.Seq, false) {
				break
			}
			mark("message", "message "+channelName(m.Channel), e)
		case norntype.EventChildSpawned:
			begin("child:"+e.Ref, span{Class: "child", Label: "child " + e.Ref, Start: e.At, Seq: e.Seq})
		case norntype.EventSent:
			mark("message", "sent to "+e.Name, e)
		case norntype.EventPublished:
			mark("message", "published on "+e.Name, e)
		case norntype.EventCompleted:
			mark("end ok", "completed", e)
		case norntype.EventFailed:
			mark("end failed", "failed", e)
		case norntype.EventCancelled:
			mark("end cancelled", "cancelled", e)
		}
		prev = e.At
	}
	return out
}

// layout gives each bar a row: the first whose bars (with their labels)
// all end before it starts, so that bars on one row never overlap and bars
// that ran at the same time are on different rows. Marks share row 0 (the
// instance's own line). x maps a time to the axis. It returns the number
// of rows.
func layout(ss []span, end time.Time, x func(time.Time) float64) int {
	idx := make([]int, 0, len(ss))
	for i := range ss {
		if ss[i].Mark {
			ss[i].row = 0
			continue
		}
		ss[i].place(end, x)
		idx = append(idx, i)
	}
	sort.SliceStable(idx, func(a, b int) bool { return ss[idx[a]].x0 < ss[idx[b]].x0 })
	var rowEnds []float64 // rows 1…
	for _, i := range idx {
		s := &ss[i]
		placed := false
		for r, re := range rowEnds {
			if s.x0 >= re {
				rowEnds[r], s.row, placed = s.x1+labelGap, r+1, true
				break
			}
		}
		if !placed {
			rowEnds = append(rowEnds, s.x1+labelGap)
			s.row = len(rowEnds)
		}
	}
	return len(rowEnds) + 1
}

// place works out where a bar and its label go: the label inside a bar
// wide enough, else after it, or before it near the right edge. x0 and x1
// bound both, for layout.
func (s *span) place(end time.Time, x func(time.Time) float64) {
	e := s.End
	if s.Open {
		e = end
	}
	s.barX = x(s.Start)
	s.barW = max(x(e)-s.barX, minBarW)
	s.label = truncate(s.Label, labelChars)
	tw := float64(len([]rune(s.label)))*charW + 4
	s.x0, s.x1 = s.barX, s.barX+s.barW
	switch {
	case s.barW > tw+4:
		s.labelX, s.anchor, s.inside = s.barX+4, "start", true
	case s.x1+4+tw <= chartLeft+chartW:
		s.labelX, s.anchor = s.x1+4, "start"
		s.x1 += 4 + tw
	default:
		s.labelX, s.anchor = s.barX-4, "end"
		s.x0 -= 4 + tw
	}
}

// Chart geometry, in SVG user units.
const (
	chartW     = 760 // the time axis
	chartLeft  = 8
	rowH       = 22
	barH       = 16
	axisH      = 22
	maxRows    = 60
	minBarW    = 3
	labelChars = 60
	charW      = 6.2 // an average character of the labels' 11px font
	labelGap   = 6   // between bars (and labels) on one row
)

// chart draws the spans on a time axis from the run's start to end, as
// inline SVG; bars link to their history row when it is on the page. note
// is shown under the axis (e.g. that events were not loaded).
func chart(ss []span, end time.Time, note string) template.HTML {
	if len(ss) == 0 {
		return ""
	}
	start := ss[0].Start
	for _, s := range ss {
		if !s.Start.IsZero() && s.Start.Before(start) {
			start = s.Start
		}
		if s.End.After(end) {
			end = s.End
		}
	}
	total := end.Sub(start)
	if total <= 0 {
		total = time.Millisecond
	}
	x := func(t time.Time) float64 { return chartLeft + float64(t.Sub(start))/float64(total)*chartW }
	rows := layout(ss, end, x)
	cut := 0
	if rows > maxRows {
		cut, rows = rows-maxRows, maxRows
	}
	height := axisH + rows*rowH + 8
	if note != "" || cut > 0 {
		height += 16
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="what the instance did, on a time axis">`,
		chartW+2*chartLeft, height, chartW+2*chartLeft, height)
	// The axis: five ticks, as offsets from the start.
	for i := 0; i <= 4; i++ {
		tx := chartLeft + float64(i)*chartW/4
		anchor := "middle"
		switch i {
		case 0:
			anchor = "start"
		case 4:
			anchor = "end"
		}
		fmt.Fprintf(&b, `<line class="tick" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/><text class="axis" x="%.1f" y="12" text-anchor="%s">+%s</text>`,
			tx, axisH-4, tx, height, tx, anchor, template.HTMLEscapeString(fmtDuration(total*time.Duration(i)/4)))
	}
	for _, s := range ss {
		if s.row >= rows {
			continue
		}
		y := axisH + s.row*rowH
		cls := "bar " + s.Class
		if s.Failed {
			cls += " failed"
		}
		if s.Open {
			cls += " open"
		}
		if s.Approx {
			cls += " approx"
		}
		title := s.Label + ": " + describe(s, start)
		if s.Seq >= 0 {
			fmt.Fprintf(&b, `<a href="#ev-%d">`, s.Seq)
		}
		fmt.Fprintf(&b, `<g class="%s"><title>%s</title>`, template.HTMLEscapeString(cls), template.HTMLEscapeString(title))
		if s.Mark {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%d" r="5"/>`, x(s.Start), y+barH/2)
		} else {
			tcls := "label"
			if s.inside {
				tcls += " in"
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" rx="3"/><text class="%s" x="%.1f" y="%d" text-anchor="%s">%s</text>`,
				s.barX, y, s.barW, barH, tcls, s.labelX, y+barH-4, s.anchor, template.HTMLEscapeString(s.label))
		}
		b.WriteString(`</g>`)
		if s.Seq >= 0 {
			b.WriteString(`</a>`)
		}
	}
	if cut > 0 {
		note = strings.TrimSpace(note + fmt.Sprintf(" %d more rows not drawn.", cut))
	}
	if note != "" {
		fmt.Fprintf(&b, `<text class="note" x="%d" y="%d">%s</text>`, chartLeft, height-4, template.HTMLEscapeString(note))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every text in it is escaped above
}

// describe is a bar's tooltip: when it ran and for how long.
func describe(s span, start time.Time) string {
	at := "+" + fmtDuration(s.Start.Sub(start))
	if s.Mark {
		return "at " + at
	}
	if s.Open {
		return "since " + at + ", not ended"
	}
	d := fmtDuration(s.End.Sub(s.Start))
	if s.Approx {
		return "ended at +" + fmtDuration(s.End.Sub(start)) + ", ≈" + d + " (its start is not recorded: drawn from the event before)"
	}
	return "from " + at + " for " + d
}
