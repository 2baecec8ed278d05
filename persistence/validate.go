package persistence

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on the text a store accepts. Every driver enforces the same ones
// (through Step.Validate and the Validate helpers) before it touches its
// database, so that a record one store accepts is accepted by all, and no
// database rejects a value with an error of its own. Lengths are in bytes.
//
// Every text field must also be valid UTF-8 without NUL bytes: PostgreSQL
// cannot store either in a text column. Payloads ([]byte) are not checked.
const (
	// MaxIDLen bounds identifiers and names: instance IDs, workflow names,
	// parents, lease owners, channel names, senders and targets, message
	// IDs, timer IDs, event kinds, event digests, outgoing event IDs and
	// outbox claimers.
	MaxIDLen = 255
	// MaxNameLen bounds an event's Name and Ref and a message's or outgoing
	// event's Type, which may hold qualified (and generic) type or function
	// names.
	MaxNameLen = 1024
	// MaxMetadataKeyLen bounds a message metadata key.
	MaxMetadataKeyLen = 255
	// MaxMetadataValueLen bounds a message metadata value.
	MaxMetadataValueLen = 4096
	// MaxReasonLen bounds a cancel reason.
	MaxReasonLen = 4096
)

// excerptLen is how much of an offending value an InvalidError quotes: enough
// to recognise it, never a whole multi-kilobyte value.
const excerptLen = 64

// InvalidError says which field of a record broke which rule. It matches
// ErrInvalidRecord with errors.Is.
type InvalidError struct {
	// Field names the field as a Go expression on the argument, such as
	// "Send[2].Target" or "History[0].Name".
	Field string
	// Reason is the broken rule, with a short quoted excerpt of the value.
	Reason string
}

func (e *InvalidError) Error() string {
	return "norn: invalid input: " + e.Field + ": " + e.Reason
}

// Is makes errors.Is(err, ErrInvalidRecord) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalidRecord }

// excerpt quotes at most excerptLen bytes of v, cut at a rune boundary where
// v is valid UTF-8, and marks a cut with an ellipsis.
func excerpt(v string) string {
	if len(v) <= excerptLen {
		return strconv.Quote(v)
	}
	cut := excerptLen
	for cut > excerptLen-utf8.UTFMax && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return strconv.Quote(v[:cut]) + "…"
}

// ValidateText checks that v is valid UTF-8 without NUL bytes and, if max is
// positive, at most max bytes long. field names v in the error.
func ValidateText(field, v string, max int) error {
	switch {
	case max > 0 && len(v) > max:
		return &InvalidError{Field: field, Reason: fmt.Sprintf("%d bytes long, at most %d allowed: %s", len(v), max, excerpt(v))}
	case strings.IndexByte(v, 0) >= 0:
		return &InvalidError{Field: field, Reason: "contains a NUL byte: " + excerpt(v)}
	case !utf8.ValidString(v):
		return &InvalidError{Field: field, Reason: "not valid UTF-8: " + excerpt(v)}
	}
	return nil
}

// ValidateID checks an identifier or name (an instance ID, a lease owner, a
// channel …) against the MaxIDLen rule, and refuses control characters
// (newlines, tabs, escapes …): an ID is shown on one line in tables, logs
// and addresses, where one would pass for another. Empty is valid here;
// callers that need a value check that themselves.
func ValidateID(field, v string) error {
	if err := ValidateText(field, v, MaxIDLen); err != nil {
		return err
	}
	if i := strings.IndexFunc(v, unicode.IsControl); i >= 0 {
		return &InvalidError{Field: field, Reason: fmt.Sprintf("contains a control character (%U at byte %d): %s", []rune(v[i:])[0], i, excerpt(v))}
	}
	return nil
}

// ValidateReason checks a cancel reason.
func ValidateReason(v string) error { return ValidateText("reason", v, MaxReasonLen) }

// validator collects the first violation of a sequence of checks, so that
// Validate reads as a list of rules. A field is named by where it is (list,
// index, name: "Send", 2, "Target" is Send[2].Target; index -1 for a field
// outside any list) and the name is only built for a violation, so that
// validating a valid step allocates nothing.
type validator struct{ err error }

func fieldName(list string, i int, name string) string {
	if i < 0 {
		return list + name
	}
	if name != "" {
		name = "." + name
	}
	return list + "[" + strconv.Itoa(i) + "]" + name
}

func (v *validator) text(list string, i int, name, s string, max int) {
	if v.err != nil {
		return
	}
	if max > 0 && len(s) > max || !validText(s) {
		v.err = ValidateText(fieldName(list, i, name), s, max)
	}
}

func (v *validator) id(list string, i int, name, s string) {
	if v.err == nil && (len(s) > MaxIDLen || !validID(s)) {
		v.err = ValidateID(fieldName(list, i, name), s)
	}
}

// validID reports whether s is valid UTF-8 without control characters
// (NUL among them).
func validID(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c >= 0x80 {
			// Multi-byte runes take the slower check (C1 controls).
			return utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0
		}
	}
	return true
}

// required checks an identifier that must be set.
func (v *validator) required(list string, i int, name, s string) {
	if v.err == nil && s == "" {
		v.err = &InvalidError{Field: fieldName(list, i, name), Reason: "empty"}
	}
	v.id(list, i, name, s)
}

func (v *validator) fail(list string, i int, name, reason string) {
	if v.err == nil {
		v.err = &InvalidError{Field: fieldName(list, i, name), Reason: reason}
	}
}

// validText reports whether s is valid UTF-8 without NUL bytes.
func validText(s string) bool { return strings.IndexByte(s, 0) < 0 && utf8.ValidString(s) }

// Validate checks every text field of the step against the limits above, and
// the fields that must be set or must name a known value. It returns the
// first violation as an *InvalidError. Drivers call it before anything else
// in Apply, so an invalid step writes nothing.
func (s *Step) Validate() error {
	var v validator
	v.id("Instance", -1, "", s.Instance)
	if c := s.Create; c != nil {
		v.required("Create.", -1, "ID", c.ID)
		v.required("Create.", -1, "Workflow", c.Workflow)
		v.id("Create.", -1, "Parent", c.Parent)
		v.id("Create.", -1, "LeaseOwner", c.LeaseOwner)
		if c.Status != "" && !c.Status.Valid() {
			v.fail("Create.", -1, "Status", "unknown status "+excerpt(string(c.Status)))
		}
	}
	s.validateCreateMany(&v)
	v.id("TakeLease", -1, "", s.TakeLease)
	s.validateRun(&v)
	for i := range s.History {
		e := &s.History[i]
		v.id("History", i, "Kind", e.Kind)
		v.text("History", i, "Name", e.Name, MaxNameLen)
		v.text("History", i, "Ref", e.Ref, MaxNameLen)
		v.text("History", i, "Error", e.Error, 0)
		v.id("History", i, "Digest", e.Digest)
	}
	if s.Status != "" && !s.Status.Valid() {
		v.fail("Status", -1, "", "unknown status "+excerpt(string(s.Status)))
	}
	v.text("Error", -1, "", s.Error, 0)
	s.validateSend(&v)
	for i := range s.Subscribe {
		sub := &s.Subscribe[i]
		v.id("Subscribe", i, "Channel", sub.Channel)
		if !sub.Mode.Valid() {
			v.fail("Subscribe", i, "Mode", "unknown channel mode "+excerpt(string(sub.Mode)))
		}
	}
	for i, ch := range s.Unsubscribe {
		v.id("Unsubscribe", i, "", ch)
	}
	if len(s.Claim) > 0 && s.Instance == "" && s.Create == nil {
		v.fail("Claim", -1, "", "set without an Instance to claim for")
	}
	for i := range s.AddTimers {
		v.id("AddTimers", i, "ID", s.AddTimers[i].ID)
	}
	for i, t := range s.CancelTimers {
		v.id("CancelTimers", i, "", t)
	}
	for i, t := range s.FireTimers {
		v.id("FireTimers", i, "", t)
	}
	for i := range s.Emit {
		e := &s.Emit[i]
		v.required("Emit", i, "ID", e.ID)
		v.id("Emit", i, "Instance", e.Instance)
		v.text("Emit", i, "Type", e.Type, MaxNameLen)
	}
	return v.err
}

// validateRun checks the fields that start or continue a run: Reopen, and
// the lease a step takes or gives.
func (s *Step) validateRun(v *validator) {
	if s.Reopen {
		switch {
		case s.Create != nil || s.TakeLease != "":
			v.fail("Reopen", -1, "", "set with Create or TakeLease: it starts a new run of an existing, ended instance")
		case !s.ResetHistory || len(s.History) == 0 || s.Status == "" || s.Status.Terminal():
			v.fail("Reopen", -1, "", "needs ResetHistory, the new run's History and a Status that is not terminal")
		}
	}
	switch {
	case s.LeaseTTL < 0:
		v.fail("LeaseTTL", -1, "", "negative: "+s.LeaseTTL.String())
	case s.TakeLease != "" && (s.Instance == "" || s.Create != nil):
		v.fail("TakeLease", -1, "", "set without an existing Instance to take")
	case s.TakeLease != "" && s.LeaseTTL == 0:
		v.fail("LeaseTTL", -1, "", "zero with TakeLease: the lease taken needs a duration")
	case s.TakeLease != "":
	case s.LeaseTTL == 0:
	case len(s.CreateMany) > 0:
		// Checked per instance (validateCreateMany).
	case s.Create == nil || s.Create.LeaseOwner == "":
		v.fail("LeaseTTL", -1, "", "set without a Create.LeaseOwner to lease to")
	case !s.Create.LeaseExpires.IsZero():
		// Two expiries: say which one the caller meant rather than guess.
		v.fail("LeaseTTL", -1, "", "set together with Create.LeaseExpires")
	}
}

// validateCreateMany checks a batch of creations: each instance as Create's
// is checked, its history from Seq 0, the IDs distinct, and nothing else
// in the step but LeaseTTL.
func (s *Step) validateCreateMany(v *validator) {
	if len(s.CreateMany) == 0 {
		return
	}
	if f := s.besidesCreateMany(); f != "" {
		v.fail(f, -1, "", "set with CreateMany, which goes with nothing but LeaseTTL")
		return
	}
	seen := make(map[string]int, len(s.CreateMany))
	for i := range s.CreateMany {
		c := &s.CreateMany[i].Instance
		v.required("CreateMany", i, "Instance.ID", c.ID)
		v.required("CreateMany", i, "Instance.Workflow", c.Workflow)
		v.id("CreateMany", i, "Instance.Parent", c.Parent)
		v.id("CreateMany", i, "Instance.LeaseOwner", c.LeaseOwner)
		if c.Status != "" && !c.Status.Valid() {
			v.fail("CreateMany", i, "Instance.Status", "unknown status "+excerpt(string(c.Status)))
		}
		if s.LeaseTTL > 0 && c.LeaseOwner != "" && !c.LeaseExpires.IsZero() {
			v.fail("CreateMany", i, "Instance.LeaseExpires", "set together with LeaseTTL")
		}
		if j, ok := seen[c.ID]; ok && v.err == nil {
			v.fail("CreateMany", i, "Instance.ID", "repeats CreateMany["+strconv.Itoa(j)+"]: "+excerpt(c.ID))
		}
		seen[c.ID] = i
		for j := range s.CreateMany[i].History {
			e := &s.CreateMany[i].History[j]
			list := fieldName("CreateMany", i, "History")
			if e.Seq != int64(j) {
				v.fail(list, j, "Seq", fmt.Sprintf("%d, not %d: a created instance's history starts at 0", e.Seq, j))
			}
			v.id(list, j, "Kind", e.Kind)
			v.text(list, j, "Name", e.Name, MaxNameLen)
			v.text(list, j, "Ref", e.Ref, MaxNameLen)
			v.text(list, j, "Error", e.Error, 0)
			v.id(list, j, "Digest", e.Digest)
		}
	}
}

// besidesCreateMany names a field set beside CreateMany, if any.
func (s *Step) besidesCreateMany() string {
	set := []struct {
		name string
		on   bool
	}{
		{"Instance", s.Instance != "" || s.Epoch != 0},
		{"Create", s.Create != nil},
		{"TakeLease", s.TakeLease != ""},
		{"History", len(s.History) > 0},
		{"ResetHistory", s.ResetHistory},
		{"Status", s.Status != "" || s.Output != nil || s.Error != ""},
		{"Waits", s.SetWaits || s.Waits != nil},
		{"Consume", len(s.Consume) > 0},
		{"Claim", len(s.Claim) > 0},
		{"Send", len(s.Send) > 0},
		{"Subscribe", len(s.Subscribe) > 0 || len(s.Unsubscribe) > 0},
		{"AddTimers", len(s.AddTimers) > 0 || len(s.CancelTimers) > 0 || len(s.FireTimers) > 0},
		{"ReleaseLease", s.ReleaseLease},
		{"Reopen", s.Reopen},
		{"IncRestarts", s.IncRestarts || s.RestartLog != nil},
		{"Emit", len(s.Emit) > 0},
	}
	for _, f := range set {
		if f.on {
			return f.name
		}
	}
	return ""
}

// validateSend checks the messages a step sends.
func (s *Step) validateSend(v *validator) {
	for i := range s.Send {
		m := &s.Send[i]
		v.required("Send", i, "ID", m.ID)
		v.id("Send", i, "Channel", m.Channel)
		v.id("Send", i, "Target", m.Target)
		v.id("Send", i, "Sender", m.Sender)
		v.id("Send", i, "HandTo", m.HandTo)
		v.id("Send", i, "HandOwner", m.HandOwner)
		if v.err == nil && m.HandTo != "" && (m.Target != "" || m.Channel == "" || m.HandOwner == "") {
			v.err = &InvalidError{Field: fieldName("Send", i, "HandTo"), Reason: "needs a published message (a Channel, no Target) and a HandOwner"}
		}
		v.text("Send", i, "Type", m.Type, MaxNameLen)
		for k, val := range m.Metadata {
			v.text("Send", i, "Metadata", k, MaxMetadataKeyLen)
			if v.err == nil && (len(val) > MaxMetadataValueLen || !validText(val)) {
				// Name the entry; the key is valid by now, and excerpt keeps
				// a long one short.
				v.text("Send", i, "Metadata["+excerpt(k)+"]", val, MaxMetadataValueLen)
			}
		}
	}
}

// Valid reports whether s is one of the known outbox statuses.
func (s OutboxStatus) Valid() bool {
	switch s {
	case OutboxPending, OutboxSent, OutboxInvalid, OutboxExpired:
		return true
	}
	return false
}

// ValidateOutboxClaim checks the arguments of Outbox.ClaimOutbox. A claim
// must last: with a ttl of zero it would have expired as it was taken, and
// another claimer could take the same event at once.
func ValidateOutboxClaim(owner string, ttl time.Duration) error {
	var v validator
	v.required("owner", -1, "", owner)
	if ttl <= 0 {
		v.fail("ttl", -1, "", "not positive: "+ttl.String())
	}
	return v.err
}

// ValidateOutboxFinish checks the arguments of Outbox.FinishOutbox.
func ValidateOutboxFinish(id, owner string, status OutboxStatus, errText string) error {
	var v validator
	v.required("id", -1, "", id)
	v.required("owner", -1, "", owner)
	if !status.Valid() {
		v.fail("status", -1, "", "unknown outbox status "+excerpt(string(status)))
	}
	v.text("errText", -1, "", errText, 0)
	return v.err
}

// ValidateOutboxRelease checks the arguments of Outbox.ReleaseOutbox.
func ValidateOutboxRelease(owner string, ids []string) error {
	var v validator
	v.required("owner", -1, "", owner)
	for i, id := range ids {
		v.required("ids", i, "", id)
	}
	return v.err
}

// ValidateOutboxList checks the arguments of Outbox.ListOutbox; an empty
// status means every status.
func ValidateOutboxList(status OutboxStatus, after string) error {
	var v validator
	if status != "" && !status.Valid() {
		v.fail("status", -1, "", "unknown outbox status "+excerpt(string(status)))
	}
	v.id("after", -1, "", after)
	return v.err
}

// Validate checks the filter's text fields as Step.Validate checks a step's.
func (f *ListFilter) Validate() error {
	var v validator
	for i, st := range f.Status {
		v.id("Status", i, "", string(st))
	}
	v.id("Workflow", -1, "", f.Workflow)
	v.id("After", -1, "", f.After)
	return v.err
}

// ValidateBuckets checks a bucket set given to Runnable or DueTimers: every
// bucket must be in [0, NumBuckets). nil (every bucket) and empty (none)
// are valid.
func ValidateBuckets(buckets []int) error {
	for i, b := range buckets {
		if b < 0 || b >= NumBuckets {
			return &InvalidError{Field: fieldName("buckets", i, ""), Reason: fmt.Sprintf("%d is not in [0, %d)", b, NumBuckets)}
		}
	}
	return nil
}
