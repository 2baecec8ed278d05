package timers

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeSource struct {
	mu sync.Mutex
	ts []persistence.Timer
}

// DueTimers serves a fixed list, as a store would.
func (f *fakeSource) DueTimers(_ context.Context, before time.Time, _ []int, limit int) ([]persistence.Timer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []persistence.Timer
	for _, t := range f.ts {
		if t.Due.Before(before) && len(out) < limit {
			out = append(out, t)
		}
	}
	return out, nil
}

func TestFiresInOrderNeverEarly(t *testing.T) {
	now := time.Now()
	src := &fakeSource{ts: []persistence.Timer{
		{Instance: "past", ID: "1", Due: now.Add(-time.Hour)},
		{Instance: "b", ID: "1", Due: now.Add(60 * time.Millisecond)},
		{Instance: "a", ID: "1", Due: now.Add(30 * time.Millisecond)},
		{Instance: "far", ID: "1", Due: now.Add(time.Hour)},
	}}
	type fired struct {
		t  persistence.Timer
		at time.Time
	}
	got := make(chan fired, 10)
	svc, err := New(Config{Source: src, Horizon: time.Minute, Fire: func(t persistence.Timer) { got <- fired{t, time.Now()} }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { svc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	// A timer scheduled after start is fired too.
	time.Sleep(5 * time.Millisecond)
	svc.Schedule(persistence.Timer{Instance: "c", ID: "1", Due: now.Add(45 * time.Millisecond)})
	want := []string{"past", "a", "c", "b"}
	for _, w := range want {
		select {
		case f := <-got:
			if f.t.Instance != w {
				t.Fatalf("fired %s, want %s", f.t.Instance, w)
			}
			if f.at.Before(f.t.Due) {
				t.Fatalf("%s fired early: %v before %v", w, f.at, f.t.Due)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("timer %s never fired", w)
		}
	}
	select {
	case f := <-got:
		t.Fatalf("unexpected firing of %+v", f.t)
	case <-time.After(50 * time.Millisecond):
	}
	if svc.Pending() != 0 {
		t.Fatalf("pending = %d; the far timer is beyond the horizon", svc.Pending())
	}
}

func TestConfigValidation(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("empty config accepted")
	}
}
