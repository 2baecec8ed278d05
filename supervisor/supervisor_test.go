package supervisor

import (
	"errors"
	"testing"
	"time"
)

func TestRetryNext(t *testing.T) {
	p := DefaultRetry()
	boom := errors.New("boom")
	tests := []struct {
		name    string
		attempt int
		elapsed time.Duration
		err     error
		wait    time.Duration
		retry   bool
	}{
		{"first failure waits Initial", 1, 0, boom, time.Second, true},
		{"doubles", 3, 0, boom, 4 * time.Second, true},
		{"attempt cap", 5, 0, boom, 0, false},
		{"terminal never retried", 1, 0, Terminal(boom), 0, false},
		{"wrapped terminal", 1, 0, errors.Join(errors.New("ctx"), Terminal(boom)), 0, false},
		{"duration cap", 2, 299 * time.Second, boom, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wait, retry := p.Next(tc.attempt, tc.elapsed, tc.err)
			if wait != tc.wait || retry != tc.retry {
				t.Fatalf("Next = %v, %v; want %v, %v", wait, retry, tc.wait, tc.retry)
			}
		})
	}
	capped := Exponential(time.Second, 10, 5*time.Second, 0)
	if d := capped.Backoff(4); d != 5*time.Second {
		t.Fatalf("capped backoff = %v", d)
	}
	j := RetryPolicy{Initial: time.Second, Multiplier: 1, Jitter: 0.5}
	for i := 0; i < 100; i++ {
		if d := j.Backoff(1); d < 500*time.Millisecond || d > 1500*time.Millisecond {
			t.Fatalf("jittered backoff %v outside ±50%%", d)
		}
	}
	for _, bad := range []RetryPolicy{{Multiplier: 0.5}, {Multiplier: 1, Jitter: 2}, {Multiplier: 1, Initial: -1}, {Multiplier: 1, MaxAttempts: -1}} {
		if bad.Validate() == nil {
			t.Fatalf("Validate(%+v) = nil", bad)
		}
	}
	var ex *RetryExhaustedError
	if !errors.As(error(&RetryExhaustedError{Attempts: 3, Last: boom}), &ex) || !errors.Is(ex, boom) {
		t.Fatal("RetryExhaustedError does not unwrap to the last error")
	}
}

func TestRestartDecide(t *testing.T) {
	p := RestartPolicy{MaxRestarts: 2, Period: time.Minute, Backoff: Exponential(time.Second, 2, time.Minute, 0)}
	now := time.Now()
	if d, ok := p.Decide(nil, now); !ok || d != time.Second {
		t.Fatalf("first restart = %v, %v", d, ok)
	}
	if d, ok := p.Decide([]time.Time{now.Add(-time.Second)}, now); !ok || d != 2*time.Second {
		t.Fatalf("second restart = %v, %v", d, ok)
	}
	if _, ok := p.Decide([]time.Time{now.Add(-2 * time.Second), now.Add(-time.Second)}, now); ok {
		t.Fatal("third restart within the period allowed")
	}
	if _, ok := p.Decide([]time.Time{now.Add(-2 * time.Hour), now.Add(-time.Second)}, now); !ok {
		t.Fatal("restarts outside the period counted")
	}
	if DefaultRestart().Validate() != nil {
		t.Fatal("default restart policy invalid")
	}
}
