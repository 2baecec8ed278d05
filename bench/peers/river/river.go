package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// jobArgs is the job of the River workload: the same payload as a message of
// Norn's queue workload (a unique int 0..M−1), as River's JSON args.
type jobArgs struct {
	I int `json:"i"`
}

func (jobArgs) Kind() string { return "norn_bench" }

// queueOpts are the shape of one run, named as Norn's bench flags name them.
type queueOpts struct {
	M            int           // jobs
	P            int           // workers (River: MaxWorkers of the one queue)
	Publishers   int           // inserting goroutines
	PublishBatch int           // jobs per InsertMany (1: Insert one by one)
	Backlog      bool          // insert everything before the client starts (drain)
	Fast         bool          // InsertManyFast (COPY) instead of InsertMany
	Timeout      time.Duration // bound of the consumption wait
	Migrate      bool          // run River's migrations first
	// FetchCooldown is River's Config.FetchCooldown: the producer fetches
	// at most this often, so with P workers River runs at most P jobs per
	// cooldown (its default of 100 ms caps 8 workers at 80 jobs/s).
	FetchCooldown time.Duration
}

// queueResult is what one run measured. The JSON field names are those of
// Norn's bench -json output, so that the comparison reads both alike.
type queueResult struct {
	Throughput  float64            `json:"throughput"` // jobs worked / s
	P50ms       float64            `json:"p50_ms"`
	P99ms       float64            `json:"p99_ms"`
	WallSeconds float64            `json:"wall_seconds"`
	Metrics     map[string]float64 `json:"metrics"`
	Extra       string             `json:"extra"`
	Error       string             `json:"error,omitempty"`
}

// side is the benchmark-only record of the run: when each job was first
// worked, how often each was worked, and when all were.
type side struct {
	at       []atomic.Int64 // first Work of job i, UnixNano
	execs    []atomic.Int32 // Work calls of job i
	unknown  atomic.Int64   // Work calls with an out-of-range arg
	consumed atomic.Int64   // distinct jobs worked
	done     chan struct{}  // closed when consumed reaches len(at)
	once     sync.Once
}

func newSide(m int) *side {
	return &side{at: make([]atomic.Int64, m), execs: make([]atomic.Int32, m), done: make(chan struct{})}
}

// worker does nothing but note the job: a River job whose Work returns nil
// is acknowledged (completed) by the client, as a Norn consumer's Receive
// acknowledges its message.
type worker struct {
	river.WorkerDefaults[jobArgs]
	side *side
}

func (w *worker) Work(_ context.Context, job *river.Job[jobArgs]) error {
	s, i := w.side, job.Args.I
	if i < 0 || i >= len(s.at) {
		s.unknown.Add(1)
		return nil
	}
	s.execs[i].Add(1)
	if s.at[i].CompareAndSwap(0, time.Now().UnixNano()) && s.consumed.Add(1) == int64(len(s.at)) {
		s.once.Do(func() { close(s.done) })
	}
	return nil
}

// migrateRiver brings River's schema up to date in the database at url.
func migrateRiver(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	return nil
}

// runRiver runs River's client through the shape of Norn's queue workload:
// P workers on one queue, M jobs inserted from several goroutines (one by
// one with Insert, or K at a time with InsertMany), each job first worked
// stamped; then the client stops and the jobs table is checked: every job
// completed once.
func runRiver(ctx context.Context, url string, o queueOpts, progress io.Writer) (queueResult, error) {
	res := queueResult{Metrics: map[string]float64{}}
	logf := func(format string, args ...any) { fmt.Fprintf(progress, "  [river] "+format+"\n", args...) }
	if o.Migrate {
		if err := migrateRiver(ctx, url); err != nil {
			return res, err
		}
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return res, err
	}
	// Enough connections for the inserters, the producer's fetches, the
	// completer and the leader's maintenance, so that the pool is not what
	// limits River.
	cfg.MaxConns = int32(max(8, o.Publishers+o.P/2+4))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer pool.Close()

	s := newSide(o.M)
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &worker{side: s}); err != nil {
		return res, err
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:        slog.New(slog.DiscardHandler),
		FetchCooldown: o.FetchCooldown,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.P}},
		Workers:       workers,
	})
	if err != nil {
		return res, err
	}
	// Completions are recorded by River's batching completer after Work
	// returns; the subscription tells when the last one is durable.
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: o.M + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer unsubscribe()
	var completedN atomic.Int64
	var completedAt atomic.Int64
	allCompleted := make(chan struct{})
	go func() {
		for range events {
			completedAt.Store(time.Now().UnixNano())
			if completedN.Add(1) == int64(o.M) {
				close(allCompleted)
			}
		}
	}()

	start := func() error {
		if err := client.Start(ctx); err != nil {
			return fmt.Errorf("river start: %w", err)
		}
		return nil
	}
	if !o.Backlog {
		if err := start(); err != nil {
			return res, err
		}
	}

	batch := max(1, o.PublishBatch)
	logf("inserting %d jobs from %d goroutines (%d per insert) for %d workers (backlog first: %v)", o.M, o.Publishers, batch, o.P, o.Backlog)
	pubAt := make([]atomic.Int64, o.M)
	t0 := time.Now()
	err = parallel(ctx, (o.M+batch-1)/batch, o.Publishers, func(ctx context.Context, c int) error {
		if batch == 1 {
			pubAt[c].Store(time.Now().UnixNano())
			_, err := client.Insert(ctx, jobArgs{I: c}, nil)
			return err
		}
		now := time.Now().UnixNano()
		params := make([]river.InsertManyParams, 0, batch)
		for i := c * batch; i < min((c+1)*batch, o.M); i++ {
			pubAt[i].Store(now)
			params = append(params, river.InsertManyParams{Args: jobArgs{I: i}})
		}
		var err error
		if o.Fast {
			_, err = client.InsertManyFast(ctx, params)
		} else {
			_, err = client.InsertMany(ctx, params)
		}
		return err
	})
	published := time.Since(t0)
	if err != nil {
		return res, fmt.Errorf("insert: %w", err)
	}
	if o.Backlog {
		t0 = time.Now()
		if err := start(); err != nil {
			return res, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var waitErr error
	select {
	case <-s.done:
	case <-wctx.Done():
		waitErr = fmt.Errorf("only %d of %d jobs worked: %w", s.consumed.Load(), o.M, wctx.Err())
	}
	var lastWork int64
	lat := make([]time.Duration, 0, o.M)
	for i := range s.at {
		w := s.at[i].Load()
		if w == 0 {
			continue
		}
		lastWork = max(lastWork, w)
		if p := pubAt[i].Load(); p != 0 {
			lat = append(lat, time.Duration(w-p))
		}
	}
	wall := time.Unix(0, lastWork).Sub(t0)
	if waitErr == nil {
		select {
		case <-allCompleted:
		case <-wctx.Done():
			waitErr = fmt.Errorf("only %d of %d completions seen: %w", completedN.Load(), o.M, wctx.Err())
		}
	}
	stopCtx, stopCancel := context.WithTimeout(ctx, time.Minute)
	defer stopCancel()
	if err := client.Stop(stopCtx); err != nil {
		return res, fmt.Errorf("river stop: %w", err)
	}

	// What the table says: every job completed, each at its first attempt.
	var completed, other, retried int
	err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'completed'),
		count(*) FILTER (WHERE state <> 'completed'),
		count(*) FILTER (WHERE attempt > 1)
		FROM river_job WHERE kind = $1`, jobArgs{}.Kind()).Scan(&completed, &other, &retried)
	if err != nil {
		return res, fmt.Errorf("checking river_job: %w", err)
	}
	var dup, never int
	for i := range s.execs {
		switch n := int(s.execs[i].Load()); {
		case n == 0:
			never++
		case n > 1:
			dup += n - 1
		}
	}

	slices.Sort(lat)
	pct := func(q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(q*float64(len(lat))))]
	}
	worked := int(s.consumed.Load())
	res.Throughput = float64(worked) / wall.Seconds()
	res.P50ms, res.P99ms = ms(pct(0.50)), ms(pct(0.99))
	res.WallSeconds = wall.Seconds()
	res.Metrics["publish_per_s"] = float64(o.M) / published.Seconds()
	res.Metrics["dup"], res.Metrics["lost"] = float64(dup), float64(never)
	res.Metrics["unknown"] = float64(s.unknown.Load())
	res.Metrics["completed_rows"], res.Metrics["other_rows"], res.Metrics["retried_rows"] = float64(completed), float64(other), float64(retried)
	if ca := completedAt.Load(); ca != 0 {
		res.Metrics["completed_per_s"] = float64(completedN.Load()) / time.Unix(0, ca).Sub(t0).Seconds()
	}
	mode := ""
	if o.Backlog {
		mode = "drain of a full queue; "
	}
	insert := "Insert"
	if batch > 1 {
		insert = "InsertMany"
		if o.Fast {
			insert = "InsertManyFast"
		}
	}
	res.Extra = fmt.Sprintf("%sinsert→work; %d workers (fetch cooldown %s), %d inserters (%s, %d per call); insert %.0f jobs/s; completed (durable) %.0f jobs/s; check: %d run twice, %d never run, %d rows not completed, %d retried",
		mode, o.P, o.FetchCooldown, o.Publishers, insert, batch, res.Metrics["publish_per_s"], res.Metrics["completed_per_s"], dup, never, other, retried)
	if waitErr != nil {
		return res, waitErr
	}
	if dup > 0 || never > 0 || other > 0 || retried > 0 || completed != o.M || s.unknown.Load() > 0 {
		return res, errors.New("check failed: jobs run twice, lost or not completed")
	}
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// parallel runs fn(0..n−1) on up to workers goroutines; the first error
// stops the rest (as in Norn's bench).
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, min(workers, n)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}
