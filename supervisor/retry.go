package supervisor

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy says how often and how fast a failed activity is tried again.
// The zero value is not useful; start from DefaultRetry or Exponential.
type RetryPolicy struct {
	// Initial is the wait before the second attempt.
	Initial time.Duration
	// Multiplier grows the wait after each attempt (≥ 1).
	Multiplier float64
	// MaxInterval caps one wait.
	MaxInterval time.Duration
	// MaxAttempts caps attempts in all, the first included; 0 means no cap.
	MaxAttempts int
	// MaxDuration caps the time from the first attempt; 0 means no cap.
	MaxDuration time.Duration
	// Jitter spreads each wait by ± this fraction (0 to 1).
	Jitter float64
}

// DefaultRetry is Edda's default: 1 s, doubling, capped at 60 s, 5 attempts,
// at most 5 minutes in all, no jitter.
func DefaultRetry() RetryPolicy {
	return RetryPolicy{Initial: time.Second, Multiplier: 2, MaxInterval: time.Minute, MaxAttempts: 5, MaxDuration: 5 * time.Minute}
}

// Exponential is a policy with the given back-off and attempt limit.
func Exponential(initial time.Duration, multiplier float64, maxInterval time.Duration, maxAttempts int) RetryPolicy {
	return RetryPolicy{Initial: initial, Multiplier: multiplier, MaxInterval: maxInterval, MaxAttempts: maxAttempts}
}

// NoRetry tries once.
func NoRetry() RetryPolicy { return RetryPolicy{MaxAttempts: 1, Multiplier: 1} }

// Validate reports a policy that cannot work.
func (p RetryPolicy) Validate() error {
	switch {
	case p.Initial < 0 || p.MaxInterval < 0 || p.MaxDuration < 0:
		return errors.New("supervisor: negative duration in retry policy")
	case p.Multiplier < 1:
		return fmt.Errorf("supervisor: retry multiplier %v < 1", p.Multiplier)
	case p.MaxAttempts < 0:
		return errors.New("supervisor: negative MaxAttempts")
	case p.Jitter < 0 || p.Jitter > 1:
		return fmt.Errorf("supervisor: jitter %v outside [0, 1]", p.Jitter)
	}
	return nil
}

// Backoff is the wait after the given attempt (1 = after the first).
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	d := float64(p.Initial) * math.Pow(p.Multiplier, float64(attempt-1))
	if p.MaxInterval > 0 && d > float64(p.MaxInterval) {
		d = float64(p.MaxInterval)
	}
	if p.Jitter > 0 {
		d *= 1 + p.Jitter*(2*rand.Float64()-1)
	}
	if d > float64(math.MaxInt64) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(d)
}

// Next decides whether to try again after attempt failed with err, elapsed
// after the first attempt started, and how long to wait first.
func (p RetryPolicy) Next(attempt int, elapsed time.Duration, err error) (time.Duration, bool) {
	if IsTerminal(err) {
		return 0, false
	}
	if p.MaxAttempts > 0 && attempt >= p.MaxAttempts {
		return 0, false
	}
	d := p.Backoff(attempt)
	if p.MaxDuration > 0 && elapsed+d > p.MaxDuration {
		return 0, false
	}
	return d, true
}

// TerminalError marks an error that retrying cannot fix.
type TerminalError struct{ Err error }

func (e *TerminalError) Error() string { return e.Err.Error() }
func (e *TerminalError) Unwrap() error { return e.Err }

// Terminal wraps err so that it is never retried.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &TerminalError{Err: err}
}

// IsTerminal reports whether err (or an error it wraps) is terminal.
func IsTerminal(err error) bool {
	var t *TerminalError
	return errors.As(err, &t)
}

// RetryExhaustedError is returned when a policy gives up; Last is the final
// attempt's error.
type RetryExhaustedError struct {
	Attempts int
	Last     error
}

func (e *RetryExhaustedError) Error() string {
	return fmt.Sprintf("gave up after %d attempts: %v", e.Attempts, e.Last)
}
func (e *RetryExhaustedError) Unwrap() error { return e.Last }
