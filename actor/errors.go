package actor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

// Errors callers branch on.
var (
	// ErrUnknownWorkflow: the workflow is not registered on this System.
	ErrUnknownWorkflow = errors.New("norn: unknown workflow")
	// ErrNotFound: no instance has that ID.
	ErrNotFound = persistence.ErrNotFound
	// ErrInstanceDone: the instance has already ended.
	ErrInstanceDone = persistence.ErrInstanceDone
	// ErrChannelModeConflict: the channel already has subscribers in another mode.
	ErrChannelModeConflict = persistence.ErrChannelMode
	// ErrCancelled is returned inside a workflow from the call that noticed
	// the instance was cancelled, and by Await for a cancelled instance.
	ErrCancelled = errors.New("norn: cancelled")
	// ErrTimeout is returned by Receive when its Timeout passes first.
	ErrTimeout = errors.New("norn: receive timed out")
	// ErrStopped: the System is stopping or stopped.
	ErrStopped = errors.New("norn: system stopped")
	// ErrInvalidInput: an argument that can never work (bad mode, an ID with
	// a NUL byte, a name too long…). The store's validation errors
	// (*persistence.InvalidError, naming the field) match it too.
	ErrInvalidInput = persistence.ErrInvalidRecord
	// ErrActivityTimeout: an activity attempt ran past its WithTimeout.
	ErrActivityTimeout = errors.New("norn: activity attempt timed out")
)

// NonDeterminismError says that replay met a durable call that does not match
// the next history entry: the workflow code changed under a running instance
// or made a decision that is not deterministic. The instance stops with it
// and is not restarted; nothing recorded is overwritten.
type NonDeterminismError struct {
	Seq      int64
	Expected string // what history recorded, "kind name"
	Got      string // what the code asked for
}

func (e *NonDeterminismError) Error() string {
	return fmt.Sprintf("norn: non-deterministic workflow: history event %d is %s but the code called %s", e.Seq, e.Expected, e.Got)
}

// WorkflowError is how Await and AwaitChild report an instance that ended
// failed. Unwrap gives the recorded cause, rebuilt from history: an
// *ActivityError, *PanicError, *NonDeterminismError, or a registered error.
type WorkflowError struct {
	Instance string
	Message  string
	cause    error
}

func (e *WorkflowError) Error() string {
	return fmt.Sprintf("norn: workflow %s failed: %s", e.Instance, e.Message)
}

// Unwrap returns the recorded cause.
func (e *WorkflowError) Unwrap() error { return e.cause }

// ActivityError is a recorded activity failure. It is rebuilt from history
// on the first run and on every replay alike, so a workflow branching on it
// takes the same path after a restart.
type ActivityError struct {
	Activity string
	ID       string
	// Type is the Go type of the error the activity returned, Message its text.
	Type    string
	Message string
	// Terminal: the error was marked supervisor.Terminal (never retried).
	Terminal bool
	// Timeout: the last attempt ran past the activity's WithTimeout.
	Timeout bool
	// Attempts is how many attempts ran.
	Attempts int
	// Code names the registered error (Config.Errors) the failure matched, if any.
	Code string
	// Details is the registered typed error's recorded form (JSON).
	Details json.RawMessage
	causes  []error
}

func (e *ActivityError) Error() string {
	return fmt.Sprintf("activity %s (%s) failed: %s", e.Activity, e.ID, e.Message)
}

// Unwrap makes errors.Is and errors.As see the registered error, a
// *supervisor.RetryExhaustedError when the retry policy gave up, a
// *supervisor.TerminalError, ErrActivityTimeout, or a *PanicError.
func (e *ActivityError) Unwrap() []error { return e.causes }

// PanicError is a recovered panic: its value as text and the goroutine's
// stack. Inspect shows it apart from the instance's one-line error.
type PanicError struct {
	Value string
	Stack string
}

func (e *PanicError) Error() string { return "panic: " + e.Value }

// DecodeError says a received message's payload does not decode as the type
// asked for. The message has been consumed and recorded in history (so
// nothing is lost and replay returns the same error); Message holds it.
type DecodeError struct {
	MessageID string
	Type      string
	Message   []byte
	Err       error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("norn: message %s does not decode as %s: %v", e.MessageID, e.Type, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// ErrorDef lets an error keep its identity through history: a failure that
// matches it is recorded under its name and rebuilt as the same sentinel, or
// as a value of the same type, on the first run and on replay. Register them
// in Config.Errors.
type ErrorDef struct {
	name    string
	match   func(error) (json.RawMessage, bool)
	rebuild func(json.RawMessage) (error, bool)
}

// Sentinel registers a sentinel error: errors.Is(recorded, err) holds.
func Sentinel(name string, err error) ErrorDef {
	return ErrorDef{name: name,
		match:   func(e error) (json.RawMessage, bool) { return nil, errors.Is(e, err) },
		rebuild: func(json.RawMessage) (error, bool) { return err, true }}
}

// ErrorType registers an error type: errors.As(recorded, &e) holds for an
// E, whose exported fields are kept (as JSON).
func ErrorType[E error](name string) ErrorDef {
	return ErrorDef{name: name,
		match: func(err error) (json.RawMessage, bool) {
			var e E
			if !errors.As(err, &e) {
				return nil, false
			}
			b, jerr := json.Marshal(e)
			if jerr != nil {
				return nil, true
			}
			return b, true
		},
		rebuild: func(d json.RawMessage) (error, bool) {
			t := reflect.TypeFor[E]()
			var v reflect.Value
			if t.Kind() == reflect.Pointer {
				v = reflect.New(t.Elem())
			} else {
				v = reflect.New(t)
			}
			if len(d) > 0 {
				if json.Unmarshal(d, v.Interface()) != nil {
					return nil, false
				}
			}
			if t.Kind() != reflect.Pointer {
				v = v.Elem()
			}
			e, ok := v.Interface().(E)
			return e, ok
		}}
}

// errorRecord is how an error is kept in history.
type errorRecord struct {
	Kind     string          `json:"kind"` // activity, panic, nondeterminism, cancelled, timeout, store, workflow
	Type     string          `json:"type,omitempty"`
	Message  string          `json:"message"`
	Code     string          `json:"code,omitempty"`
	Details  json.RawMessage `json:"details,omitempty"`
	Terminal bool            `json:"terminal,omitempty"`
	Timeout  bool            `json:"timeout,omitempty"`
	Attempts int             `json:"attempts,omitempty"`
	Stack    string          `json:"stack,omitempty"`
	Seq      int64           `json:"seq,omitempty"`
	Expected string          `json:"expected,omitempty"`
	Got      string          `json:"got,omitempty"`
	Activity string          `json:"activity,omitempty"`
	ID       string          `json:"id,omitempty"`
	Instance string          `json:"instance,omitempty"`
	Cause    *errorRecord    `json:"cause,omitempty"`
}

func (r *errorRecord) marshal() string {
	b, _ := json.Marshal(r)
	return string(b)
}

func parseErrorRecord(s string) *errorRecord {
	if s == "" {
		return nil
	}
	var r errorRecord
	if !strings.HasPrefix(s, "{") || json.Unmarshal([]byte(s), &r) != nil || r.Kind == "" {
		// Not a structured record: keep the text.
		return &errorRecord{Kind: "error", Message: s}
	}
	return &r
}

// recordError turns an error a workflow observed into its history form.
func (e *env) recordError(err error) *errorRecord {
	if err == nil {
		return nil
	}
	var (
		ae *ActivityError
		pe *PanicError
		nd *NonDeterminismError
		we *WorkflowError
	)
	switch {
	case errors.As(err, &ae):
		return &errorRecord{Kind: "activity", Type: ae.Type, Message: ae.Message, Code: ae.Code, Details: ae.Details,
			Terminal: ae.Terminal, Timeout: ae.Timeout, Attempts: ae.Attempts, Activity: ae.Activity, ID: ae.ID,
			Stack: panicStack(ae.causes)}
	case errors.As(err, &nd):
		return &errorRecord{Kind: "nondeterminism", Message: nd.Error(), Seq: nd.Seq, Expected: nd.Expected, Got: nd.Got}
	case errors.As(err, &pe):
		return &errorRecord{Kind: "panic", Message: pe.Value, Stack: pe.Stack}
	case errors.As(err, &we):
		return &errorRecord{Kind: "workflow", Message: we.Message, Instance: we.Instance, Cause: e.recordError(we.cause)}
	}
	rec := &errorRecord{Kind: "error", Type: errType(err), Message: err.Error()}
	switch {
	case errors.Is(err, ErrCancelled):
		rec.Kind = "cancelled"
	case errors.Is(err, ErrCallTimeout):
		rec.Kind = "call_timeout"
	case errors.Is(err, ErrTimeout):
		rec.Kind = "timeout"
	}
	e.matchRegistered(err, rec)
	return rec
}

func panicStack(errs []error) string {
	for _, e := range errs {
		if p, ok := e.(*PanicError); ok {
			return p.Stack
		}
	}
	return ""
}

func (e *env) matchRegistered(err error, rec *errorRecord) {
	for _, d := range e.cfg.Errors {
		if details, ok := d.match(err); ok {
			rec.Code, rec.Details = d.name, details
			return
		}
	}
	// The runtime's own sentinels keep their identity without registration.
	for _, c := range builtinErrors {
		if errors.Is(err, c.err) {
			rec.Code = c.code
			return
		}
	}
}

var builtinErrors = []struct {
	code string
	err  error
}{
	{"norn.not_found", ErrNotFound},
	{"norn.instance_done", ErrInstanceDone},
	{"norn.mode_conflict", ErrChannelModeConflict},
	{"norn.invalid_input", ErrInvalidInput},
	{"norn.invalid_input", persistence.ErrInvalidRecord},
	{"norn.timeout", ErrTimeout},
	{"norn.cancelled", ErrCancelled},
	{"norn.unknown_workflow", ErrUnknownWorkflow},
	{"norn.activity_timeout", ErrActivityTimeout},
	{"norn.stopped", ErrStopped},
	{"norn.id_conflict", ErrIDConflict},
	{"norn.payload_too_large", ErrPayloadTooLarge},
}

func errType(err error) string {
	// The innermost error names the kind of failure best.
	for {
		u := errors.Unwrap(err)
		if u == nil {
			break
		}
		err = u
	}
	return reflect.TypeOf(err).String()
}

// rebuild turns a recorded error back into an error value; the first run
// returns this too, so both see the same thing.
func (e *env) rebuildError(r *errorRecord) error {
	if r == nil {
		return nil
	}
	switch r.Kind {
	case "activity":
		ae := &ActivityError{Activity: r.Activity, ID: r.ID, Type: r.Type, Message: r.Message, Terminal: r.Terminal,
			Timeout: r.Timeout, Attempts: r.Attempts, Code: r.Code, Details: r.Details}
		base := e.registered(r)
		if base == nil {
			base = &recordedErr{msg: r.Message}
		}
		switch {
		case r.Stack != "":
			base = &PanicError{Value: strings.TrimPrefix(r.Message, "panic: "), Stack: r.Stack}
		case r.Timeout:
			base = &recordedErr{msg: r.Message, kind: ErrActivityTimeout}
		}
		ae.causes = append(ae.causes, base)
		if r.Terminal {
			ae.causes = append(ae.causes, &supervisor.TerminalError{Err: base})
		} else if r.Attempts > 1 {
			ae.causes = append(ae.causes, &supervisor.RetryExhaustedError{Attempts: r.Attempts, Last: base})
		}
		return ae
	case "nondeterminism":
		return &NonDeterminismError{Seq: r.Seq, Expected: r.Expected, Got: r.Got}
	case "panic":
		return &PanicError{Value: r.Message, Stack: r.Stack}
	case "workflow":
		return &WorkflowError{Instance: r.Instance, Message: r.Message, cause: e.rebuildError(r.Cause)}
	case "cancelled":
		return &recordedErr{msg: r.Message, kind: ErrCancelled}
	case "timeout":
		return &recordedErr{msg: r.Message, kind: ErrTimeout}
	case "call_timeout":
		return &recordedErr{msg: r.Message, kind: &callTimeoutError{}}
	}
	if base := e.registered(r); base != nil {
		if base.Error() == r.Message {
			return base
		}
		return &recordedErr{msg: r.Message, kind: base}
	}
	return &recordedErr{msg: r.Message}
}

func (e *env) registered(r *errorRecord) error {
	if r.Code == "" {
		return nil
	}
	for _, d := range e.cfg.Errors {
		if d.name == r.Code {
			if e, ok := d.rebuild(r.Details); ok {
				return e
			}
		}
	}
	for _, c := range builtinErrors {
		if c.code == r.Code {
			return c.err
		}
	}
	return nil
}

// recordedErr is an error rebuilt from its text, wrapping the sentinel it
// was recorded with, if any.
type recordedErr struct {
	msg  string
	kind error
}

func (e *recordedErr) Error() string { return e.msg }
func (e *recordedErr) Unwrap() error { return e.kind }

// oneLine is the first line of s, for instance error columns and logs.
func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// isCtxErr reports a context's own error.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// validID fails at once for an ID or name the store would reject (too
// long, invalid UTF-8, NUL). Such a call records nothing: it fails the same
// way on every replay.
func validID(field, v string) error {
	// A *persistence.InvalidError already is ErrInvalidInput and says so.
	return persistence.ValidateID(field, v)
}
