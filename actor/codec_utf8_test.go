package actor

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestJSONRefusesInvalidUTF8(t *testing.T) {
	type item struct{ Name string }
	type order struct {
		Items []item
		Tags  map[string]string
		Note  *string
		Raw   []byte
	}
	bad := "a\xffb"
	tests := []struct {
		name string
		v    any
		path string // "" when it must encode
	}{
		{"a string", bad, "the value"},
		{"a field in a slice", order{Items: []item{{"ok"}, {bad}}}, "Items[1].Name"},
		{"a map value", order{Tags: map[string]string{"k": bad}}, `Tags["k"]`},
		{"a map key", map[string]int{bad: 1}, "(a key)"},
		{"behind a pointer", order{Note: &bad}, "Note"},
		{"bytes are bytes", order{Raw: []byte{0xff}}, ""},
		{"a real U+FFFD", "\ufffd", ""},
		{"a literal backslash-u", `\ufffd`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := encodeWith(JSON{}, tt.v)
			if tt.path == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				var back any
				if err := json.Unmarshal(b, &back); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), tt.path) || !strings.Contains(err.Error(), "invalid UTF-8") {
				t.Fatalf("encode = %q, %v; want ErrInvalidInput naming %s", b, err, tt.path)
			}
		})
	}
}
