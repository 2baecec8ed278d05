package norntype_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/nornlabs/norn/norntype"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	terminal := map[norntype.Status]bool{norntype.StatusCompleted: true, norntype.StatusFailed: true, norntype.StatusCancelled: true}
	all := norntype.Statuses()
	if len(all) != 6 || all[0] != norntype.StatusRunning {
		t.Fatalf("Statuses() = %v", all)
	}
	for _, s := range all {
		if !s.Valid() {
			t.Errorf("%s not valid", s)
		}
		if s.Terminal() != terminal[s] {
			t.Errorf("%s.Terminal() = %v", s, s.Terminal())
		}
	}
	for _, s := range []norntype.Status{"", "Running", "done"} {
		if s.Valid() || s.Terminal() {
			t.Errorf("%q: valid %v, terminal %v", s, s.Valid(), s.Terminal())
		}
	}
	// The list is a copy: callers may sort or change it.
	all[0] = "x"
	if norntype.Statuses()[0] != norntype.StatusRunning {
		t.Fatal("Statuses shares its slice")
	}
}

func TestMode(t *testing.T) {
	t.Parallel()
	for _, m := range []norntype.Mode{norntype.Broadcast, norntype.Competing, norntype.Direct} {
		if !m.Valid() {
			t.Errorf("%s not valid", m)
		}
	}
	for _, m := range []norntype.Mode{"", "Broadcast", "fanout"} {
		if m.Valid() {
			t.Errorf("%q valid", m)
		}
	}
}

func TestPIDString(t *testing.T) {
	t.Parallel()
	if s := fmt.Sprint(norntype.PID("order-1")); s != "order-1" {
		t.Fatalf("PID prints as %q", s)
	}
}

func TestEventKindsDistinct(t *testing.T) {
	t.Parallel()
	kinds := []norntype.EventKind{norntype.EventStarted, norntype.EventActivity, norntype.EventActivityRetry,
		norntype.EventNow, norntype.EventTimer, norntype.EventTimerFired, norntype.EventReceived,
		norntype.EventReceiveWait, norntype.EventReceiveTimeout, norntype.EventSent, norntype.EventPublished,
		norntype.EventSubscribed, norntype.EventUnsubscribed, norntype.EventCompensating,
		norntype.EventCompensation, norntype.EventChildSpawned, norntype.EventLinkedExit, norntype.EventMonitor,
		norntype.EventCancelSent, norntype.EventCancelObserved, norntype.EventVersion, norntype.EventEmitted,
		norntype.EventCompleted, norntype.EventFailed, norntype.EventCancelled}
	sorted := slices.Clone(kinds)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(kinds) {
		t.Fatalf("event kinds repeat: %v", kinds)
	}
}
