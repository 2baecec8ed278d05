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

// Restart decides on one more restart of an activation that crashed at
// now, given the times of its earlier restarts, oldest first (a log kept
// in the store, so that the budget holds across processes). It returns
// the back-off before the restart and the log to keep (the earlier
// restarts still within Period, then now), or ok false when the budget is
// spent and the instance is to fail instead.
func (p RestartPolicy) Restart(log []time.Time, now time.Time) (delay time.Duration, keep []time.Time, ok bool) {
	for _, t := range log {
		if now.Sub(t) <= p.Period {
			keep = append(keep, t)
		}
	}
	delay, ok = p.Decide(keep, now)
	if !ok {
		return 0, nil, false
	}
	return delay, append(keep, now), true
}
