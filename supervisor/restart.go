package supervisor

import (
	"fmt"
	"time"
)

// RestartPolicy decides whether a failed activation is started again:
// at most MaxRestarts within Period (Erlang's restart intensity), waiting
// Backoff(n) before the n-th restart.
type RestartPolicy struct {
	MaxRestarts int
	Period      time.Duration
	Backoff     RetryPolicy
}

// DefaultRestart allows 5 restarts a minute, 100 ms doubling to 10 s apart.
func DefaultRestart() RestartPolicy {
	return RestartPolicy{MaxRestarts: 5, Period: time.Minute,
		Backoff: RetryPolicy{Initial: 100 * time.Millisecond, Multiplier: 2, MaxInterval: 10 * time.Second, Jitter: 0.2}}
}

// Validate reports a policy that cannot work.
func (p RestartPolicy) Validate() error {
	if p.MaxRestarts < 0 || p.Period < 0 {
		return fmt.Errorf("supervisor: negative restart budget")
	}
	return p.Backoff.Validate()
}

// Decide says whether to restart given the times of earlier restarts (oldest
// first) and now, and how long to wait.
func (p RestartPolicy) Decide(recent []time.Time, now time.Time) (time.Duration, bool) {
	n := 0
	for _, t := range recent {
		if now.Sub(t) <= p.Period {
			n++
		}
	}
	if n >= p.MaxRestarts {
		return 0, false
	}
	return p.Backoff.Backoff(n + 1), true
}
