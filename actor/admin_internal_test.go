package actor

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

func TestOpenWork(t *testing.T) {
	due := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := func(stored bool) []byte {
		b, _ := json.Marshal(timerRecord{Due: due, Stored: stored})
		return b
	}
	retry := func(timer string) []byte {
		b, _ := json.Marshal(retryRecord{Attempt: 1, Next: due, Timer: timer})
		return b
	}
	ev := func(kind, name, ref string, payload []byte) persistence.Event {
		return persistence.Event{Kind: kind, Name: name, Ref: ref, Payload: payload}
	}
	tests := []struct {
		name   string
		events []persistence.Event
		timers string
		subs   string
	}{
		{"a sleep not yet over", []persistence.Event{ev(EventTimer, "sleep:1", "", rec(true))}, "[sleep:1]", "[]"},
		{"a sleep over", []persistence.Event{ev(EventTimer, "sleep:1", "", rec(true)), ev(EventTimerFired, "sleep:1", "", nil)}, "[]", "[]"},
		{"a timer already due when set has no row", []persistence.Event{ev(EventTimer, "sleep:1", "", rec(false))}, "[]", "[]"},
		{"a receive timeout running", []persistence.Event{ev(EventReceiveWait, "receive:1", "", rec(true))}, "[receive:1]", "[]"},
		{"a receive that got its message", []persistence.Event{ev(EventReceiveWait, "receive:1", "", rec(true)), ev(EventReceived, "receive:1", "m-1", nil)}, "[]", "[]"},
		{"a durable back-off waiting", []persistence.Event{ev(EventActivityRetry, "ship", "act:1", retry("retry:act:1:1"))}, "[retry:act:1:1]", "[]"},
		{"a back-off over", []persistence.Event{ev(EventActivityRetry, "ship", "act:1", retry("retry:act:1:1")), ev(EventActivity, "ship", "act:1", nil)}, "[]", "[]"},
		{"an in-memory back-off", []persistence.Event{ev(EventActivityRetry, "ship", "act:1", retry(""))}, "[]", "[]"},
		{"subscribed", []persistence.Event{ev(EventSubscribed, "jobs", "", []byte("competing"))}, "[]", "[jobs:competing]"},
		{"subscribed and left", []persistence.Event{ev(EventSubscribed, "jobs", "", []byte("competing")), ev(EventUnsubscribed, "jobs", "", nil)}, "[]", "[]"},
		{"a refused subscription", []persistence.Event{{Kind: EventSubscribed, Name: "jobs", Payload: []byte("broadcast"), Error: `{"kind":"error"}`}}, "[]", "[]"},
		{"a monitor waiting for its Down", []persistence.Event{ev(EventMonitor, "other", "", nil)}, "[]", "[" + mailbox.MonitorChannel("other") + ":broadcast]"},
		{"a monitor of an instance already ended", []persistence.Event{ev(EventMonitor, "other", "", []byte("down"))}, "[]", "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts, ss, err := openWork(tt.events)
			if err != nil {
				t.Fatal(err)
			}
			var tn, sn []string
			for _, x := range ts {
				if !x.Due.Equal(due) {
					t.Fatalf("timer %s due %v, want %v", x.ID, x.Due, due)
				}
				tn = append(tn, x.ID)
			}
			for _, s := range ss {
				sn = append(sn, s.Channel+":"+string(s.Mode))
			}
			if got := fmt.Sprint(tn); got != tt.timers {
				t.Fatalf("timers %s, want %s", got, tt.timers)
			}
			if got := fmt.Sprint(sn); got != tt.subs {
				t.Fatalf("subscriptions %s, want %s", got, tt.subs)
			}
		})
	}
	if _, _, err := openWork([]persistence.Event{ev(EventTimer, "t", "", []byte("{"))}); err == nil {
		t.Fatal("an unreadable timer record passed")
	}
}

func TestRetryPoint(t *testing.T) {
	ev := func(kind, ref, errText string) persistence.Event {
		return persistence.Event{Kind: kind, Ref: ref, Error: errText}
	}
	tests := []struct {
		name string
		hist []persistence.Event
		want int
	}{
		{"the workflow's own failure", []persistence.Event{ev(EventStarted, "", ""), ev(EventActivity, "a:1", ""), ev(EventFailed, "", "x")}, 2},
		{"an activity that ran out of retries", []persistence.Event{ev(EventStarted, "", ""), ev(EventActivity, "a:1", ""),
			ev(EventActivityRetry, "a:2", ""), ev(EventActivityRetry, "a:2", ""), ev(EventActivity, "a:2", "boom"), ev(EventFailed, "", "x")}, 2},
		{"a failure at once", []persistence.Event{ev(EventStarted, "", ""), ev(EventFailed, "", "x")}, 1},
	}
	for _, tt := range tests {
		if got := retryPoint(tt.hist); got != tt.want {
			t.Errorf("%s: retryPoint = %d, want %d", tt.name, got, tt.want)
		}
	}
}
