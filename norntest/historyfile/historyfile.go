// Package historyfile reads and writes history files: an instance's
// recorded history as JSON, written by `norn history --export ID` and
// replayed against today's code by norntest.Replay, so that a change to a
// workflow is tested against the histories of the instances it will meet.
//
// A file looks like:
//
//	{
//	  "format": 1,
//	  "instance": "order-1",
//	  "workflow": "order",
//	  "events": [
//	    {"seq": 0, "kind": "started", "name": "order", "ref": "json", "payload": {"N": 1}, "at": "..."},
//	    {"seq": 1, "kind": "activity", "name": "reserve", "ref": "reserve:1", "payload": "rsv-1", "digest": "...", "at": "..."}
//	  ]
//	}
//
// A payload that is valid JSON is kept as such, so that the file reads
// well and diffs well; any other payload (protobuf) is in payload_base64.
package historyfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nornlabs/norn/norntype"
)

// Format is the version of the file format this package writes.
const Format = 1

// ErrFormat is returned for a file this package cannot read.
var ErrFormat = errors.New("historyfile: not a history file")

// File is one instance's history.
type File struct {
	Format   int     `json:"format"`
	Instance string  `json:"instance"`
	Workflow string  `json:"workflow"`
	Events   []Event `json:"events"`
}

// Event is one history event as the file holds it.
type Event struct {
	Seq     int64           `json:"seq"`
	Kind    string          `json:"kind"`
	Name    string          `json:"name,omitempty"`
	Ref     string          `json:"ref,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// PayloadBase64 holds a payload that is not JSON.
	PayloadBase64 []byte `json:"payload_base64,omitempty"`
	// Error is the recorded failure as the store holds it.
	Error  string    `json:"error,omitempty"`
	Digest string    `json:"digest,omitempty"`
	At     time.Time `json:"at"`
}

// New makes the file of an instance's history.
func New(instance, workflow string, hist []norntype.HistoryEvent) File {
	f := File{Format: Format, Instance: instance, Workflow: workflow, Events: make([]Event, len(hist))}
	for i, h := range hist {
		ev := Event{Seq: h.Seq, Kind: string(h.Kind), Name: h.Name, Ref: h.Ref, Error: h.ErrorRecord, Digest: h.Digest, At: h.At.UTC()}
		if len(h.Payload) > 0 {
			if json.Valid(h.Payload) {
				ev.Payload = json.RawMessage(h.Payload)
			} else {
				ev.PayloadBase64 = h.Payload
			}
		}
		f.Events[i] = ev
	}
	return f
}

// Write writes f as indented JSON.
func Write(w io.Writer, f File) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // payloads byte for byte
	return enc.Encode(f)
}

// Read reads a history file.
func Read(r io.Reader) (File, error) {
	var f File
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return File{}, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if f.Format != Format {
		return File{}, fmt.Errorf("%w: format %d, this build reads %d", ErrFormat, f.Format, Format)
	}
	if f.Workflow == "" || len(f.Events) == 0 {
		return File{}, fmt.Errorf("%w: no workflow or no events", ErrFormat)
	}
	for i, e := range f.Events {
		if e.Seq != int64(i) {
			return File{}, fmt.Errorf("%w: event %d has sequence number %d", ErrFormat, i, e.Seq)
		}
	}
	return f, nil
}

// History is the file's events as Replay takes them.
func (f File) History() []norntype.HistoryEvent {
	out := make([]norntype.HistoryEvent, len(f.Events))
	for i, e := range f.Events {
		p := []byte(e.PayloadBase64)
		if len(e.Payload) > 0 {
			// Compact: the codec wrote it compact, and a digest or a
			// byte comparison must see the bytes it wrote.
			var b bytes.Buffer
			if err := json.Compact(&b, e.Payload); err == nil {
				p = b.Bytes()
			} else {
				p = e.Payload
			}
		}
		out[i] = norntype.HistoryEvent{Seq: e.Seq, Kind: norntype.EventKind(e.Kind), Name: e.Name, Ref: e.Ref, Payload: p,
			ErrorRecord: e.Error, Digest: e.Digest, At: e.At}
	}
	return out
}
