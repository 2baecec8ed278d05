package doccheck

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Block is a fenced code block of a Markdown file.
type Block struct {
	Lang string // the fence's info string, e.g. "go", "sh"
	Text string // the lines between the fences, each ending in a newline
	Line int    // the line of the opening fence, from 1
	// Note is the HTML comment on the line just before the fence, without
	// "<!--" and "-->", e.g. "file: main.go"; empty if there is none.
	Note string
}

// Doc is a Markdown file split into what the checks need.
type Doc struct {
	Blocks []Block
	// Prose is the file without its fenced blocks (one line per line, so
	// that line numbers still hold; a block's lines are left empty).
	Prose []string
}

// Parse splits a Markdown file into fenced blocks and prose. Only
// backtick fences at the start of a line are recognised, which is all the
// project's docs use.
func Parse(src string) Doc {
	var d Doc
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "```") {
			d.Prose = append(d.Prose, l)
			continue
		}
		b := Block{Lang: strings.TrimSpace(strings.TrimPrefix(l, "```")), Line: i + 1}
		if i > 0 {
			prev := strings.TrimSpace(lines[i-1])
			if note, ok := strings.CutPrefix(prev, "<!--"); ok {
				b.Note = strings.TrimSpace(strings.TrimSuffix(note, "-->"))
			}
		}
		d.Prose = append(d.Prose, "")
		var body strings.Builder
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			body.WriteString(lines[i])
			body.WriteByte('\n')
			d.Prose = append(d.Prose, "")
		}
		d.Prose = append(d.Prose, "")
		b.Text = body.String()
		d.Blocks = append(d.Blocks, b)
	}
	return d
}

var (
	codeSpanRE = regexp.MustCompile("`[^`]+`")
	linkRE     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE  = regexp.MustCompile(`^#{1,6}\s+(.*)$`)
)

// CodeSpans returns the inline code spans of the prose, without backticks.
func (d Doc) CodeSpans() []string {
	var out []string
	for _, l := range d.Prose {
		for _, m := range codeSpanRE.FindAllString(l, -1) {
			out = append(out, strings.Trim(m, "`"))
		}
	}
	return out
}

// Link is a Markdown link target and the line it is on.
type Link struct {
	Target string
	Line   int
}

// Links returns the link targets in the prose, code spans excluded.
func (d Doc) Links() []Link {
	var out []Link
	for i, l := range d.Prose {
		l = codeSpanRE.ReplaceAllString(l, "")
		for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
			out = append(out, Link{Target: m[1], Line: i + 1})
		}
	}
	return out
}

// Anchors returns the anchors GitHub makes for the file's headings.
func (d Doc) Anchors() map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range d.Prose {
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := Slug(m[1])
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// Slug is GitHub's anchor for a heading: lower case, punctuation dropped
// (hyphens and underscores kept), spaces turned into hyphens.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
