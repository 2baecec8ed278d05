package viewer

import (
	"fmt"
	"html/template"
	"strings"
)

// step is one box of the diagram: a run of equal timeline rows, or a wait.
type step struct {
	Class string
	Text  string
	Count int
	Seq   int64 // first row's seq, for the link into the timeline (-1: none)
	Wait  bool  // where the instance waits now (dashed)
}

// diagramSteps folds timeline rows into steps: bookkeeping rows (clock
// reads, version markers, failed attempts) are left out, and consecutive
// rows of the same kind and name become one step with a count. gap, if
// positive, is the number of events between head and tail not loaded.
func diagramSteps(head, tail []item, gap int64, waits []step) []step {
	var out []step
	add := func(rows []item) {
		for _, it := range rows {
			switch it.Class {
			case "other", "retry":
				continue
			}
			text := it.Label
			if it.Name != "" {
				text += " " + it.Name
			}
			if n := len(out); n > 0 && out[n-1].Text == text && out[n-1].Class == it.Class {
				out[n-1].Count++
				continue
			}
			out = append(out, step{Class: it.Class, Text: text, Count: 1, Seq: it.Seq})
		}
	}
	add(head)
	if gap > 0 {
		out = append(out, step{Class: "gap", Text: fmt.Sprintf("… %s events not loaded …", comma(gap)), Seq: -1})
	}
	add(tail)
	// A long diagram keeps its start and its end.
	const maxSteps = 40
	if len(out) > maxSteps {
		cut := len(out) - maxSteps + 1
		mid := maxSteps / 2
		folded := step{Class: "gap", Text: fmt.Sprintf("… %d more steps …", cut), Seq: -1}
		out = append(append(out[:mid:mid], folded), out[mid+cut:]...)
	}
	return append(out, waits...)
}

// Diagram geometry, in SVG user units.
const (
	boxW   = 300
	boxH   = 30
	boxGap = 14
	padX   = 10
)

// svg draws steps top to bottom, joined by arrows, as inline SVG. Steps
// link to their row of the timeline when it is on the page.
func svg(steps []step) template.HTML {
	if len(steps) == 0 {
		return ""
	}
	height := len(steps)*(boxH+boxGap) - boxGap + 2*padX
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="diagram" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="steps of the instance">`,
		boxW+2*padX, height, boxW+2*padX, height)
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>`)
	for i, s := range steps {
		y := padX + i*(boxH+boxGap)
		if i > 0 {
			fmt.Fprintf(&b, `<line class="edge" x1="%d" y1="%d" x2="%d" y2="%d" marker-end="url(#arrow)"/>`,
				padX+boxW/2, y-boxGap, padX+boxW/2, y-1)
		}
		cls := "step " + s.Class
		if s.Wait {
			cls += " wait"
		}
		text := s.Text
		if s.Count > 1 {
			text = fmt.Sprintf("%s ×%d", text, s.Count)
		}
		text = truncate(text, 44)
		if s.Seq >= 0 {
			fmt.Fprintf(&b, `<a href="#ev-%d">`, s.Seq)
		}
		fmt.Fprintf(&b, `<g class="%s"><title>%s</title><rect x="%d" y="%d" width="%d" height="%d" rx="6"/><text x="%d" y="%d">%s</text></g>`,
			template.HTMLEscapeString(cls), template.HTMLEscapeString(s.Text), padX, y, boxW, boxH,
			padX+12, y+boxH/2+5, template.HTMLEscapeString(text))
		if s.Seq >= 0 {
			b.WriteString(`</a>`)
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every text in it is escaped above
}
