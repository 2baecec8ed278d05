package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/gather"
)

// Loads are batched: a broadcast that wakes thousands of parked instances
// starts as many activations, each of which loads its instance, and one
// read-only transaction per instance cost the server a BEGIN, a COMMIT and
// a round trip each. A few loaders take the loads queued meanwhile and
// read them all in one transaction and one round trip.
const (
	loaders      = 4  // loads read at once, each on its own connection
	maxLoadBatch = 32 // instances one loader reads together
	// loadTimeout bounds a batch: its callers may have gone (a Load
	// returns when its context ends), so it does not run on theirs.
	loadTimeout = time.Minute
)

// loadReq is one Load waiting for a loader.
type loadReq struct {
	id                         string
	historyLimit, mailboxLimit int
	out                        persistence.Loaded
	err                        error
	done                       chan struct{}
}

// Load reads an instance, the first events of its run and its mailbox in
// one round trip, in a read-only REPEATABLE READ transaction (so that the
// three agree with one another), together with the other loads queued
// meanwhile.
func (s *Store) Load(ctx context.Context, id string, historyLimit, mailboxLimit int) (persistence.Loaded, error) {
	if err := persistence.ValidateID("id", id); err != nil {
		return persistence.Loaded{}, err
	}
	if historyLimit <= 0 || mailboxLimit <= 0 {
		return persistence.Loaded{}, &persistence.InvalidError{Field: "limit", Reason: "history and mailbox limits must be positive"}
	}
	r := &loadReq{id: id, historyLimit: historyLimit, mailboxLimit: mailboxLimit, done: make(chan struct{})}
	if err := enqueue(s, ctx, s.loadReqs, r); err != nil {
		return persistence.Loaded{}, err
	}
	select {
	case <-r.done:
		return r.out, r.err
	case <-ctx.Done():
		return persistence.Loaded{}, ctx.Err()
	}
}

// loader is one of the goroutines that read the queued loads.
func (s *Store) loader() {
	defer s.writers.Done()
	g := gather.New(s.loadReqs, maxLoadBatch, 0)
	for {
		batch, ok := g.Next()
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
		err := s.loadBatch(ctx, batch)
		cancel()
		for _, r := range batch {
			if err != nil {
				r.out, r.err = persistence.Loaded{}, fmt.Errorf("postgres: load %s: %w", r.id, err)
			}
			close(r.done)
		}
	}
}

// loadBatch reads every load of batch in one transaction and one round
// trip, setting each one's outcome (an instance not found fails its load
// alone); the error is the batch's.
func (s *Store) loadBatch(ctx context.Context, batch []*loadReq) error {
	return s.readTx(ctx, func(b *pgx.Batch) {
		for _, r := range batch {
			b.Queue(sqlInstance, r.id)
			b.Queue(sqlHistoryFirst, r.id, int64(r.historyLimit))
			b.Queue(sqlMailbox, r.id, int64(r.mailboxLimit))
		}
	}, func(br pgx.BatchResults) error {
		for _, r := range batch {
			in, err := scanInstance(br.QueryRow())
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				r.err = fmt.Errorf("%w: %s", persistence.ErrNotFound, r.id)
			case err != nil:
				return err
			}
			r.out.Instance = in
			rows, _ := br.Query()
			if r.out.History, err = pgx.CollectRows(rows, scanEvent); err != nil {
				return err
			}
			rows, _ = br.Query()
			if r.out.Mailbox, err = pgx.CollectRows(rows, scanMessage); err != nil {
				return err
			}
			if r.err != nil {
				r.out = persistence.Loaded{}
			}
		}
		return nil
	})
}
