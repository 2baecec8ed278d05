package persistence_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

func TestValidateText(t *testing.T) {
	for _, tc := range []struct {
		v    string
		max  int
		want string // "" for valid
	}{
		{"plain", 5, ""},
		{"ünï", 5, ""},
		{"", 5, ""},
		{strings.Repeat("x", 1<<16), 0, ""},
		{"toolong", 5, `norn: invalid input: f: 7 bytes long, at most 5 allowed: "toolong"`},
		{"a\x00b", 0, `norn: invalid input: f: contains a NUL byte: "a\x00b"`},
		{"a\xffb", 0, `norn: invalid input: f: not valid UTF-8: "a\xffb"`},
	} {
		err := persistence.ValidateText("f", tc.v, tc.max)
		if tc.want == "" {
			if err != nil {
				t.Errorf("ValidateText(%.20q, %d) = %v", tc.v, tc.max, err)
			}
			continue
		}
		if err == nil || err.Error() != tc.want || !errors.Is(err, persistence.ErrInvalidRecord) {
			t.Errorf("ValidateText(%.20q, %d) = %v, want %s", tc.v, tc.max, err, tc.want)
		}
	}
}

// A long value is quoted only in part, cut at a rune boundary.
func TestInvalidErrorExcerpt(t *testing.T) {
	v := strings.Repeat("é", 200) + "\x00"
	err := persistence.ValidateText("Send[0].Target", v, 0)
	var ie *persistence.InvalidError
	if !errors.As(err, &ie) || ie.Field != "Send[0].Target" {
		t.Fatalf("error = %#v", err)
	}
	want := `norn: invalid input: Send[0].Target: contains a NUL byte: "` + strings.Repeat("é", 32) + `"…`
	if err.Error() != want {
		t.Fatalf("error = %s\nwant    %s", err, want)
	}
	err = persistence.ValidateID("id", "x"+strings.Repeat("é", 200))
	if msg := err.Error(); len(msg) > 160 || !strings.Contains(msg, "401 bytes long, at most 255") || strings.Contains(msg, `\x`) {
		t.Fatalf("error = %s", msg)
	}
}

func TestValidateStep(t *testing.T) {
	step := persistence.Step{Instance: "a", Epoch: 1, Status: persistence.StatusWaiting,
		History:   []persistence.Event{{Seq: 1, Kind: "activity", Name: "charge", Ref: "r", Digest: "d"}},
		Send:      []persistence.NewMessage{{ID: "m", Target: "b", Type: "T", Metadata: map[string]string{"k": "v"}, Dedupe: true}},
		Subscribe: []persistence.Subscription{{Channel: "c", Mode: persistence.Competing}},
		AddTimers: []persistence.Timer{{ID: "t", Due: time.Now()}}, CancelTimers: []string{"u"}, FireTimers: []string{"v"},
		RestartLog: []time.Time{time.Now()},
		Emit:       []persistence.OutboxEvent{{ID: "e", Instance: "a", Type: "com.example.charged", Data: []byte("{}")}},
	}
	if err := step.Validate(); err != nil {
		t.Fatal(err)
	}
	// Validating a valid step is on every Apply: it must not allocate.
	if n := testing.AllocsPerRun(100, func() { _ = step.Validate() }); n != 0 {
		t.Fatalf("Validate of a valid step allocates %v times", n)
	}
	step.Send = append(step.Send, persistence.NewMessage{ID: "m2", Metadata: map[string]string{"key": strings.Repeat("v", 5000)}})
	var ie *persistence.InvalidError
	if err := step.Validate(); !errors.As(err, &ie) || ie.Field != `Send[1].Metadata["key"]` {
		t.Fatalf("error = %v", err)
	}
	if persistence.Status("paused").Valid() || !persistence.StatusCancelled.Valid() {
		t.Fatal("Status.Valid")
	}
}

func TestValidateEmit(t *testing.T) {
	for _, tc := range []struct {
		e     persistence.OutboxEvent
		field string // "" for valid
	}{
		{persistence.OutboxEvent{ID: "e", Data: []byte("\x00\xff")}, ""}, // data is not text
		{persistence.OutboxEvent{ID: strings.Repeat("é", persistence.MaxIDLen/2), Type: strings.Repeat("t", persistence.MaxNameLen)}, ""},
		{persistence.OutboxEvent{}, "Emit[1].ID"},
		{persistence.OutboxEvent{ID: strings.Repeat("i", persistence.MaxIDLen+1)}, "Emit[1].ID"},
		{persistence.OutboxEvent{ID: "a\x00b"}, "Emit[1].ID"},
		{persistence.OutboxEvent{ID: "a\xffb"}, "Emit[1].ID"},
		{persistence.OutboxEvent{ID: "e", Instance: strings.Repeat("i", persistence.MaxIDLen+1)}, "Emit[1].Instance"},
		{persistence.OutboxEvent{ID: "e", Instance: "a\x00"}, "Emit[1].Instance"},
		{persistence.OutboxEvent{ID: "e", Type: strings.Repeat("t", persistence.MaxNameLen+1)}, "Emit[1].Type"},
		{persistence.OutboxEvent{ID: "e", Type: "\xfe"}, "Emit[1].Type"},
		{persistence.OutboxEvent{ID: "e", Type: "a\x00b"}, "Emit[1].Type"},
	} {
		step := persistence.Step{Emit: []persistence.OutboxEvent{{ID: "ok"}, tc.e}}
		err := step.Validate()
		var ie *persistence.InvalidError
		if tc.field == "" {
			if err != nil {
				t.Errorf("Validate(%.40q) = %v", tc.e.ID, err)
			}
		} else if !errors.As(err, &ie) || ie.Field != tc.field || !errors.Is(err, persistence.ErrInvalidRecord) {
			t.Errorf("Validate(%+.40v) = %v, want an error for %s", tc.e, err, tc.field)
		}
	}
}

func TestValidateOutboxCalls(t *testing.T) {
	long := strings.Repeat("o", persistence.MaxIDLen+1)
	for _, tc := range []struct {
		name  string
		err   error
		field string // "" for valid
	}{
		{"claim", persistence.ValidateOutboxClaim("relay-1", time.Second), ""},
		{"claim: no owner", persistence.ValidateOutboxClaim("", time.Second), "owner"},
		{"claim: long owner", persistence.ValidateOutboxClaim(long, time.Second), "owner"},
		{"claim: zero ttl", persistence.ValidateOutboxClaim("relay-1", 0), "ttl"},
		{"claim: negative ttl", persistence.ValidateOutboxClaim("relay-1", -time.Second), "ttl"},
		{"finish", persistence.ValidateOutboxFinish("e", "relay-1", persistence.OutboxPending, "HTTP 503"), ""},
		{"finish: no id", persistence.ValidateOutboxFinish("", "relay-1", persistence.OutboxSent, ""), "id"},
		{"finish: bad id", persistence.ValidateOutboxFinish("e\x00", "relay-1", persistence.OutboxSent, ""), "id"},
		{"finish: no owner", persistence.ValidateOutboxFinish("e", "", persistence.OutboxSent, ""), "owner"},
		{"finish: no status", persistence.ValidateOutboxFinish("e", "relay-1", "", ""), "status"},
		{"finish: unknown status", persistence.ValidateOutboxFinish("e", "relay-1", "lost", ""), "status"},
		{"finish: error text", persistence.ValidateOutboxFinish("e", "relay-1", persistence.OutboxInvalid, "bad\xff"), "errText"},
		{"list all", persistence.ValidateOutboxList("", ""), ""},
		{"list", persistence.ValidateOutboxList(persistence.OutboxExpired, "e"), ""},
		{"list: unknown status", persistence.ValidateOutboxList("lost", ""), "status"},
		{"list: after", persistence.ValidateOutboxList("", long), "after"},
	} {
		var ie *persistence.InvalidError
		if tc.field == "" {
			if tc.err != nil {
				t.Errorf("%s: %v", tc.name, tc.err)
			}
		} else if !errors.As(tc.err, &ie) || ie.Field != tc.field || !errors.Is(tc.err, persistence.ErrInvalidRecord) {
			t.Errorf("%s: error = %v, want one for %s", tc.name, tc.err, tc.field)
		}
	}
	for _, s := range []persistence.OutboxStatus{persistence.OutboxPending, persistence.OutboxSent, persistence.OutboxInvalid, persistence.OutboxExpired} {
		if !s.Valid() {
			t.Errorf("%s.Valid() = false", s)
		}
	}
}

func TestValidateBuckets(t *testing.T) {
	for _, ok := range [][]int{nil, {}, {0}, {persistence.NumBuckets - 1, 0, 0}} {
		if err := persistence.ValidateBuckets(ok); err != nil {
			t.Errorf("ValidateBuckets(%v) = %v", ok, err)
		}
	}
	for _, tc := range []struct {
		buckets []int
		want    string
	}{
		{[]int{-1}, "norn: invalid input: buckets[0]: -1 is not in [0, 1024)"},
		{[]int{3, persistence.NumBuckets}, "norn: invalid input: buckets[1]: 1024 is not in [0, 1024)"},
	} {
		err := persistence.ValidateBuckets(tc.buckets)
		if err == nil || err.Error() != tc.want || !errors.Is(err, persistence.ErrInvalidRecord) {
			t.Errorf("ValidateBuckets(%v) = %v, want %s", tc.buckets, err, tc.want)
		}
	}
}

func TestValidateLeaseTTL(t *testing.T) {
	create := func(owner string, expires time.Time) *persistence.Instance {
		return &persistence.Instance{ID: "a", Workflow: "wf", LeaseOwner: owner, LeaseEpoch: 1, LeaseExpires: expires}
	}
	for _, s := range []persistence.Step{
		{Create: create("n", time.Time{}), LeaseTTL: time.Second},
		{Create: create("n", time.Now())},
		{Create: create("", time.Time{})},
	} {
		if err := s.Validate(); err != nil {
			t.Errorf("valid step: %v", err)
		}
	}
	for _, s := range []persistence.Step{
		{Create: create("n", time.Time{}), LeaseTTL: -time.Second},
		{Instance: "a", LeaseTTL: time.Second},
		{Create: create("", time.Time{}), LeaseTTL: time.Second},
		{Create: create("n", time.Now()), LeaseTTL: time.Second},
	} {
		var ie *persistence.InvalidError
		if err := s.Validate(); !errors.As(err, &ie) || ie.Field != "LeaseTTL" {
			t.Errorf("step with LeaseTTL %v: error %v, want one about LeaseTTL", s.LeaseTTL, err)
		}
	}
}

// IDs and names show on one line (tables, logs, addresses): control
// characters are refused, in ValidateID and in every ID field of a step.
func TestValidateIDControlCharacters(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"a\nb", "a\tb", "a\rb", "\x1b[31mred", "a\x7fb", "a\u0085b", "a\x00b"} {
		err := persistence.ValidateID("id", v)
		if !errors.Is(err, persistence.ErrInvalidRecord) {
			t.Errorf("ValidateID(%q) = %v, want ErrInvalidRecord", v, err)
		}
		steps := []persistence.Step{
			{Create: &persistence.Instance{ID: v, Workflow: "w"}},
			{Instance: "a", Send: []persistence.NewMessage{{ID: "m", Channel: v}}},
			{Instance: "a", Send: []persistence.NewMessage{{ID: "m", Target: v}}},
		}
		for i, s := range steps {
			if err := s.Validate(); !errors.Is(err, persistence.ErrInvalidRecord) {
				t.Errorf("step %d with %q: Validate() = %v, want ErrInvalidRecord", i, v, err)
			}
		}
		q := persistence.InstanceQuery{Workflow: v}
		if err := q.Validate(); !errors.Is(err, persistence.ErrInvalidRecord) {
			t.Errorf("InstanceQuery{Workflow: %q}.Validate() = %v", v, err)
		}
	}
	for _, v := range []string{"order-1", "orders/1/ship", "ünï code", "a b"} {
		if err := persistence.ValidateID("id", v); err != nil {
			t.Errorf("ValidateID(%q) = %v", v, err)
		}
	}
	err := persistence.ValidateID("id", "a\nb")
	if want := `norn: invalid input: id: contains a control character (U+000A at byte 1): "a\nb"`; err.Error() != want {
		t.Errorf("error = %s, want %s", err, want)
	}
}

// The input filter's text form, shared by the viewer and the norn command.
func TestParseInputFilter(t *testing.T) {
	t.Parallel()
	got, err := persistence.ParseInputFilter(nil, " a=b, c.d = e ,,f=")
	if err != nil || len(got) != 3 || got["a"] != "b" || got["c.d"] != "e" || got["f"] != "" {
		t.Fatalf("ParseInputFilter = %v, %v", got, err)
	}
	got, err = persistence.ParseInputFilter(got, "g=h")
	if err != nil || len(got) != 4 || got["g"] != "h" {
		t.Fatalf("ParseInputFilter added to a map = %v, %v", got, err)
	}
	if got, err := persistence.ParseInputFilter(nil, "  "); err != nil || got != nil {
		t.Fatalf("ParseInputFilter of blanks = %v, %v", got, err)
	}
	for _, bad := range []string{"a=b,c", "=x", "a=b, =c"} {
		if _, err := persistence.ParseInputFilter(nil, bad); !errors.Is(err, persistence.ErrInvalidRecord) {
			t.Errorf("ParseInputFilter(%q) = %v, want ErrInvalidRecord", bad, err)
		}
	}
}
