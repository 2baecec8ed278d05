package actor

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nornlabs/norn/persistence"
)

const (
	// defaultRetention keeps ended instances 30 days: long enough to look
	// into a failure after a holiday, short enough that the store holds a
	// month of work rather than every instance ever run.
	defaultRetention = 30 * 24 * time.Hour
	// minRetention: a shorter retention would purge an instance before a
	// caller waiting for its result had a chance to read it.
	minRetention = time.Second
	// retentionBatch is how many instances one purge transaction deletes:
	// a few milliseconds of the store's writer, between other steps.
	retentionBatch = 100
)

// validateRetention accepts a negative Retention (keep forever), zero (the
// default) or at least minRetention.
func (c *Config) validateRetention() error {
	if c.Retention > 0 && c.Retention < minRetention {
		return fmt.Errorf("%w: Config.Retention is %v; it must be at least %v (zero for the default, negative to keep ended instances forever)",
			ErrInvalidInput, c.Retention, minRetention)
	}
	return nil
}

// retentionLoop purges the ended instances of this node's buckets once
// they are older than Retention: at start, then every pruneEvery (or every
// Retention, if that is shorter), with jitter so that the nodes of a
// cluster do not purge in step. Each node purges only the buckets it owns,
// so that the nodes share the work rather than race for it.
func (s *System) retentionLoop() {
	if s.cfg.Retention < 0 {
		return
	}
	every := min(pruneEvery, s.cfg.Retention)
	for {
		s.purgeEnded()
		d := time.Duration(float64(every) * (0.8 + 0.4*rand.Float64()))
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// purgeEnded purges, batch by batch, every ended instance of the owned
// buckets that ended more than Retention ago. Between batches it rests as
// long as the batch took, so that a backlog (retention turned on over a
// store that kept everything) takes at most about half of the store's
// time and steps keep flowing meanwhile.
func (s *System) purgeEnded() {
	f := persistence.PurgeFilter{Before: time.Now().Add(-s.cfg.Retention), Buckets: s.ownedBuckets(), Limit: retentionBatch}
	total := 0
	defer func() {
		if total > 0 {
			s.log.Info("purged ended instances", "count", total, "retention", s.cfg.Retention)
		}
	}()
	for {
		start := time.Now()
		n, err := s.store.PurgeInstances(s.ctx, f)
		total += n
		if err != nil {
			if s.ctx.Err() == nil {
				s.log.Warn("purging ended instances failed", "err", err)
			}
			return
		}
		if n < f.Limit {
			return
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(time.Since(start)):
		}
	}
}
