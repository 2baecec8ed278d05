package postgres

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestWakePayloads(t *testing.T) {
	decode := func(ps []string) (ids []string, rescan bool) {
		for _, p := range ps {
			if len(p) >= 8000 {
				t.Fatalf("payload of %d bytes", len(p))
			}
			var m wakeMsg
			if err := json.Unmarshal([]byte(p), &m); err != nil {
				t.Fatal(err)
			}
			if m.From != "me" {
				t.Fatalf("from = %q", m.From)
			}
			ids = append(ids, m.IDs...)
			rescan = rescan || m.Rescan
		}
		return ids, rescan
	}
	if ps := wakePayloads("me", nil); len(ps) != 0 {
		t.Fatalf("no ids: %v", ps)
	}
	ids, rescan := decode(wakePayloads("me", []string{"a", "b", "a", `we"ird,id`}))
	if fmt.Sprint(ids) != `[a b we"ird,id]` || rescan {
		t.Fatalf("ids = %v, rescan %v", ids, rescan)
	}
	var many []string
	for i := range 1000 {
		many = append(many, fmt.Sprintf("instance-%05d", i))
	}
	ps := wakePayloads("me", many)
	ids, rescan = decode(ps)
	if len(ps) < 2 || len(ids) != 1000 || rescan {
		t.Fatalf("1000 ids: %d payloads, %d ids, rescan %v", len(ps), len(ids), rescan)
	}
	for i := range 5000 {
		many = append(many, fmt.Sprintf("instance-%05d", 1000+i))
	}
	if ps := wakePayloads("me", many); len(ps) != 1 {
		t.Fatalf("6000 ids: %d payloads", len(ps))
	} else if _, rescan := decode(ps); !rescan {
		t.Fatal("6000 ids: no rescan")
	}
	if _, rescan := decode(wakePayloads("me", []string{"a", strings.Repeat("x", 9000)})); !rescan {
		t.Fatal("huge id: no rescan")
	}
}
