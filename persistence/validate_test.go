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
