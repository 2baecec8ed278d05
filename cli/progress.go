package cli

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress draws a bar on a terminal for a long operation over a known
// number of items; elsewhere (a file, a pipe, CI logs) it draws nothing and
// the command prints its counts at the end.
type progress struct {
	w     io.Writer
	on    bool
	label string
	total int
	done  int
	drawn time.Time
}

func (e *env) progress(label string, total int) *progress {
	return &progress{w: e.stderr, on: e.tty && !e.json && total > 1, label: label, total: total}
}

// redrawEvery bounds how often the bar is redrawn: a terminal need not see
// every item of a million.
const redrawEvery = 100 * time.Millisecond

// step counts one item done.
func (p *progress) step() {
	p.done++
	if !p.on {
		return
	}
	if now := time.Now(); p.done == p.total || now.Sub(p.drawn) >= redrawEvery {
		p.drawn = now
		p.draw()
	}
}

func (p *progress) draw() {
	const width = 30
	filled := width
	if p.total > 0 {
		filled = width * p.done / p.total
	}
	fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d", p.label, strings.Repeat("#", filled), strings.Repeat(".", width-filled), p.done, p.total)
}

// finish ends the bar's line.
func (p *progress) finish() {
	if p.on {
		p.draw()
		fmt.Fprintln(p.w)
	}
}
