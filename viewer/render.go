package viewer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// pageData is what every page's layout needs.
type pageData struct {
	Title   string
	Base    string
	Actions bool
	Search  string // the ID in the header's search box
	// Nav names the header link of the page shown.
	Nav string
	// Refresh makes the page refresh itself (see static/viewer.js).
	Refresh bool
	// The header's counts (see header): by status, all workflows.
	HasCounts bool
	Counts    []statusCount
	Total     int
}

func (h *handler) page(title string) pageData {
	return pageData{Title: title, Base: h.base, Actions: h.opts.AllowActions}
}

func (h *handler) parseTemplates() error {
	funcs := template.FuncMap{
		"ago":      h.ago,
		"stamp":    stamp,
		"dur":      fmtDuration,
		"instURL":  h.instanceURL,
		"csrf":     func(string, string) string { return "" }, // per request: see template
		"statuses": func() []string { return allStatuses },
		"comma":    comma,
		"startID":  func() string { return startFormID },
	}
	h.pages = map[string]*template.Template{}
	for _, name := range []string{"list", "instance", "channels", "counts", "error"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return fmt.Errorf("viewer: template %s: %w", name, err)
		}
		h.pages[name] = t
	}
	return nil
}

// render writes a page; it renders into a buffer first so that a template
// error becomes a 500 instead of half a page.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	var buf bytes.Buffer
	t, err := h.template(r, name)
	if err == nil {
		err = t.ExecuteTemplate(&buf, "layout", data)
	}
	if err != nil {
		h.log.ErrorContext(r.Context(), "viewer: render", "page", name, "err", err)
		http.Error(w, "viewer: cannot render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// stamp is a time as the pages show it (UTC, to the millisecond).
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000")
}

// ago is t relative to now ("3m ago", "in 2h").
func (h *handler) ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := h.now().Sub(t)
	if d < 0 {
		return "in " + fmtDuration(-d)
	}
	return fmtDuration(d) + " ago"
}

// fmtDuration is a duration rounded for people.
func fmtDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + fmtDuration(-d)
	case d < time.Millisecond:
		return strconv.FormatInt(d.Microseconds(), 10) + "µs"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// comma writes n with thousands separators.
func comma(n any) string {
	var v int64
	switch x := n.(type) {
	case int:
		v = int64(x)
	case int64:
		v = x
	}
	s := strconv.FormatInt(v, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// maxShown bounds a payload shown in full on a page.
const maxShown = 64 << 10

// pretty shows a stored payload: indented JSON when it is JSON, text when it
// is UTF-8, a size otherwise (protobuf, raw bytes).
func pretty(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	cut := ""
	if len(b) > maxShown {
		cut = fmt.Sprintf("\n… (%s bytes in all)", comma(len(b)))
	}
	if json.Valid(b) {
		if len(b) > maxShown {
			return string(b[:maxShown]) + cut
		}
		var out bytes.Buffer
		if json.Indent(&out, b, "", "  ") == nil {
			return out.String()
		}
	}
	if utf8.Valid(b) {
		if len(b) > maxShown {
			return string(b[:maxShown]) + cut
		}
		return string(b)
	}
	return fmt.Sprintf("(%s bytes, not text)", comma(len(b)))
}

// short is a one-line preview of a payload.
func short(b []byte, n int) string {
	if len(b) == 0 {
		return ""
	}
	var s string
	if json.Valid(b) {
		var out bytes.Buffer
		if json.Compact(&out, b) == nil {
			s = out.String()
		}
	}
	if s == "" {
		if !utf8.Valid(b) {
			return fmt.Sprintf("(%d bytes)", len(b))
		}
		s = strings.Join(strings.Fields(string(b)), " ")
	}
	return truncate(s, n)
}

// truncate cuts s to n runes with an ellipsis.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func jsonValid(s string) bool { return json.Valid([]byte(s)) }
