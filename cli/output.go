package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// table writes aligned columns; cells must not contain tabs or newlines
// (cell cleans them).
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cells ...string) {
	clean := make([]string, len(cells))
	for i, c := range cells {
		clean[i] = cell(c)
	}
	// An error writing shows at flush.
	fmt.Fprintln(t.tw, strings.Join(clean, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// cell makes s fit on one table line.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
}

// timeFormat is how tables show times: UTC, to the second, one width,
// saying it is UTC (the store's instants, the same on every machine; the
// filters read this form back).
const timeFormat = "2006-01-02 15:04:05 UTC"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeFormat)
}

// preview shows an encoded value in a table cell: JSON as compact text,
// anything else as its size, cut to max runes.
func preview(b []byte, max int) string {
	if len(b) == 0 {
		return ""
	}
	if !json.Valid(b) {
		return fmt.Sprintf("<%d bytes>", len(b))
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return fmt.Sprintf("<%d bytes>", len(b))
	}
	s := buf.String()
	if max > 0 && utf8.RuneCountInString(s) > max {
		r := []rune(s)
		s = string(r[:max-1]) + "…"
	}
	return s
}

// payload is an encoded value in JSON output: the value itself when it is
// JSON, else {"base64": "..."} (protobuf, raw bytes).
func payload(b []byte) any {
	switch {
	case len(b) == 0:
		return nil
	case json.Valid(b):
		return json.RawMessage(b)
	}
	return map[string]string{"base64": base64.StdEncoding.EncodeToString(b)}
}

// writeJSON prints v indented, for scripts.
func (e *env) writeJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

// optTime is a time in JSON output: omitted when zero.
func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
