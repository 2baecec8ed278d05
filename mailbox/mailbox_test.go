package mailbox

import (
	"testing"
	"time"
)

func TestSpecMatches(t *testing.T) {
	m := Message{ID: "1", Channel: "pay", Sender: "a", Payload: []byte(`{"amount":5}`)}
	tests := []struct {
		name    string
		filters []Filter
		want    bool
	}{
		{"no filters", nil, true},
		{"channel", []Filter{OnChannel("pay")}, true},
		{"other channel", []Filter{OnChannel("ship")}, false},
		{"plain sends only", []Filter{OnChannel("")}, false},
		{"sender", []Filter{From("a")}, true},
		{"other sender", []Filter{From("b")}, false},
		{"predicate", []Filter{Match(func(m Message) bool { return m.ID == "1" })}, true},
		{"all must hold", []Filter{OnChannel("pay"), Match(func(Message) bool { return false })}, false},
		{"timeout is not a filter", []Filter{Timeout(time.Second)}, true},
	}
	down := Message{ID: "2", Channel: DownChannel}
	if NewSpec().Matches(down) || NewSpec(From("")).Matches(down) || !NewSpec(OnChannel(DownChannel)).Matches(down) {
		t.Fatal("a Down must match only a receive that names DownChannel")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NewSpec(tc.filters...).Matches(m); got != tc.want {
				t.Fatalf("Matches = %v, want %v", got, tc.want)
			}
		})
	}
	if NewSpec(Timeout(time.Minute)).Timeout != time.Minute {
		t.Fatal("timeout not kept")
	}
}
