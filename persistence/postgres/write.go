package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/gather"
)

// maxAttempts bounds how often a step that lost a conflict with another
// transaction (deadlock, lock not available) is tried again.
const maxAttempts = 5

// writeReq is one Apply call waiting for a writer.
type writeReq struct {
	step    persistence.Step
	res     persistence.StepResult
	err     error
	done    chan struct{}
	attempt int

	ops   []op             // the step compiled for the current attempt
	locks map[lockKey]bool // advisory locks it needs: exclusive or shared
	retry bool             // the step lost a conflict and is worth another attempt
	// savepoint: in a batch of several, the step runs in a savepoint of
	// its own (see mayFail).
	savepoint bool
	// merged: some of the step's writes are in the batch's merged
	// statements (see mergeWrites), which need its locks all the same.
	merged bool
	// used marks the Dedupe messages of step.Send (by index) whose ID
	// turned out to be used: they are left out from then on.
	used map[int]bool
	// later: the step would have been one savepoint too many for its
	// transaction (see maxSavepoints); it waits for the next one.
	later bool
}

// maxSavepoints caps the steps of one transaction that run in a savepoint
// of their own (see mayFail): PostgreSQL caches 64 subtransactions per
// backend, and past that every snapshot taken while the transaction runs,
// on any connection, looks transaction IDs up in pg_subtrans. A batch
// holds up to Options.MaxBatch steps, more than this, since most steps
// need no savepoint; those past the cap run in the next transaction.
const maxSavepoints = 64

// deferSavepoints marks the steps of batch past the maxSavepoints-th that
// has a savepoint as later, with nothing to write in this transaction.
func deferSavepoints(batch []*writeReq) {
	n := 0
	for _, r := range batch {
		if r.later || !r.savepoint {
			continue
		}
		if n++; n > maxSavepoints {
			r.later, r.savepoint, r.merged, r.ops = true, false, false, nil
		}
	}
}

// Instance locks. A step that ends an instance holds that instance's
// advisory lock exclusively and a step that sends to it holds it shared,
// so that no message lands in the mailbox of an instance that ended
// meanwhile, while the ends of different instances never wait for one
// another (they did when instances shared 1,024 locks: two batches of ends
// almost always met on one, and the writers took turns).
//
// A batch that sends to more than instLockExactMax instances would hold as
// many locks, more than PostgreSQL's lock table is sized for. It locks
// their buckets instead (instBuckets of them), exclusively; an end also
// holds its bucket's lock shared, so it still waits for such a batch, and
// such batches wait for each other only when they share a bucket.
const (
	instLockExactMax = 128
	instBuckets      = 1024
)

// instBucketLock is the bucket lock of the instance whose lock key is key.
func instBucketLock(s *Store, key int32) lockKey {
	return lockKey{s.instBucketLocks, int32(uint32(key) % instBuckets)}
}

// lockKey names a two-key advisory lock.
type lockKey struct{ space, key int32 }

// lockHash maps a channel or instance name to the second key of its
// advisory lock.
func lockHash(name string) int32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int32(h.Sum32())
}

// batchLocks is the statement that takes every advisory lock the batch's
// steps need, at the start of the transaction, in one global order (and
// each in the strongest mode any step needs). Taken step by step, locks
// would be held by early steps while later ones wait, and two batches could
// wait for each other; PostgreSQL would find the deadlock only after
// deadlock_timeout, for each step that hits one.
func batchLocks(s *Store, batch []*writeReq) (op, bool) {
	all := map[lockKey]bool{}
	for _, r := range batch {
		if len(r.ops) == 0 && !r.merged {
			continue
		}
		for k, x := range r.locks {
			all[k] = all[k] || x
		}
	}
	if len(all) == 0 {
		return op{}, false
	}
	// Too many sends' instance locks: their buckets' instead (see
	// instLockExactMax).
	sends := 0
	for k, x := range all {
		if k.space == s.instLocks && !x {
			sends++
		}
	}
	if sends > instLockExactMax {
		for k, x := range all {
			if k.space == s.instLocks && !x {
				delete(all, k)
				all[instBucketLock(s, k.key)] = true
			}
		}
	}
	keys := make([]lockKey, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].space != keys[j].space {
			return keys[i].space < keys[j].space
		}
		return keys[i].key < keys[j].key
	})
	spaces, ids, excl := make([]int32, len(keys)), make([]int32, len(keys)), make([]bool, len(keys))
	for i, k := range keys {
		spaces[i], ids[i], excl[i] = k.space, k.key, all[k]
	}
	return op{label: "take advisory locks", name: sqlLocks, args: []any{spaces, ids, excl}, batchLock: true}, true
}

// op is one statement of a pipelined batch.
type op struct {
	req       *writeReq // nil for transaction control
	follow    bool      // settles a failed step (see check)
	batchLock bool      // takes the batch's advisory locks
	merged    bool      // writes for several steps (see mergeWrites)
	label     string    // what the statement does, for error messages
	name      string    // prepared statement
	args      []any
	// read consumes the statement's result; nil means Exec.
	read func(br pgx.BatchResults) error
	// check maps a norn_check failure of this statement to the step's
	// error; follow, if not nil, is a statement to run after the rollback
	// that decides the step's outcome (diagnosis, the existing instance).
	check func(pe *pgconn.PgError) (err error, follow *op)
}

func (o *op) run(br pgx.BatchResults) error {
	if o.read != nil {
		return o.read(br)
	}
	_, err := br.Exec()
	return err
}

// Apply commits one step. Concurrent calls share transactions (group
// commit); each step still succeeds or fails on its own.
func (s *Store) Apply(ctx context.Context, step persistence.Step) (persistence.StepResult, error) {
	if err := step.Validate(); err != nil {
		return persistence.StepResult{}, err
	}
	req := &writeReq{step: step, done: make(chan struct{})}
	if err := enqueue(s, ctx, s.reqs, req); err != nil {
		return persistence.StepResult{}, err
	}
	// Once queued the step is applied whatever the caller's context does,
	// so wait for the outcome: returning early would hide a commit.
	<-req.done
	if req.err != nil {
		return persistence.StepResult{}, req.err
	}
	return req.res, nil
}

// enqueue hands r to the goroutines that read ch (writers, loaders),
// unless the store is closed or ctx ends first. Close closes ch under
// closeMu, so a send never meets a closed channel.
func enqueue[T any](s *Store, ctx context.Context, ch chan<- T, r T) error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return persistence.ErrStoreClosed
	}
	select {
	case ch <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writer is one group-commit loop: it takes every step queued while it was
// busy (up to MaxBatch) and commits them in one transaction. Several writers
// run at once, each with its own connection.
func (s *Store) writer() {
	defer s.writers.Done()
	g := gather.New(s.reqs, s.opts.MaxBatch, s.opts.CommitDelay)
	for {
		batch, ok := g.Next()
		if !ok {
			return
		}
		s.commit(batch)
	}
}

// commit applies a batch and completes its requests, trying steps that lost
// a conflict with another transaction again in a new transaction.
func (s *Store) commit(batch []*writeReq) {
	// Steps are independent, so their order is free: sort them by instance
	// so that every batch locks instance rows in the same (ID) order as
	// every other batch and as RenewLeases, which avoids most deadlocks.
	sort.SliceStable(batch, func(i, j int) bool { return stepKey(batch[i].step) < stepKey(batch[j].step) })
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.WriteTimeout)
	defer cancel()
	start := time.Now()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		err = fmt.Errorf("postgres: connect to %s: %w", s.target, err)
		for _, r := range batch {
			r.err = err
			close(r.done)
		}
		s.observe(len(batch), start, err)
		return
	}
	defer conn.Release()
	limit := 0 // steps per transaction; 0: the whole batch (see errLockTableFull)
	for len(batch) > 0 {
		deferSteps(batch, limit)
		tried := ran(batch)
		err := s.runTx(ctx, conn, batch)
		s.observe(ran(batch), start, err)
		start = time.Now()
		if errors.Is(err, errLockTableFull) {
			// Nothing of the batch committed: its steps go again, in
			// transactions of half as many as that one tried.
			limit = max(1, tried/2)
			s.lockTableFull(err)
		}
		var woken []string
		again := batch[:0:0]
		for _, r := range batch {
			if r.later {
				r.later = false
				again = append(again, r)
				continue
			}
			if r.retry && r.attempt+1 < maxAttempts && ctx.Err() == nil {
				r.attempt++
				again = append(again, r)
				continue
			}
			if r.err == nil {
				woken = append(woken, r.res.Woken...)
				// A spawn nobody leased: its owner may be elsewhere.
				woken = append(woken, r.step.Unleased(&r.res)...)
			}
			close(r.done)
		}
		if len(woken) > 0 {
			s.queueWake(woken)
		}
		batch = again
	}
}

// A full lock table. PostgreSQL keeps every transaction's locks in one
// table of max_locks_per_transaction × max_connections entries, shared by
// all connections; a transaction may hold more than its share while others
// hold less. A batch that ends many instances takes two advisory locks for
// each (see batchLocks), and with many writers (many nodes) doing so at
// once the table can fill: the statement that takes them fails with "out
// of shared memory" (53200), and with it the transaction (any statement
// that needs a lock may, but that one asks for the most). Nothing of the
// batch commits, so its steps go again in transactions of half as many
// steps (halving again while the table stays full), not to their callers
// as errors. A step alone that finds the table full is tried again
// like one that lost a conflict (see maxAttempts).
var errLockTableFull = errors.New("postgres: the server's lock table is full (raise max_locks_per_transaction)")

// outOfSharedMemory reports whether err is PostgreSQL's "out of shared
// memory", which a full lock table raises.
func outOfSharedMemory(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "53200"
}

// deferSteps marks the steps of batch past the first limit as later (none
// if limit is 0).
func deferSteps(batch []*writeReq, limit int) {
	if limit <= 0 {
		return
	}
	n := 0
	for _, r := range batch {
		if r.later {
			continue
		}
		if n++; n > limit {
			r.later = true
		}
	}
}

// lockTableFull logs a transaction that found the lock table full, at
// most once a minute: it is a sign the server is sized for fewer locks
// than its clients take.
func (s *Store) lockTableFull(err error) {
	now := time.Now().UnixNano()
	last := s.lockFullLogged.Load()
	if last != 0 && now-last < int64(time.Minute) || !s.lockFullLogged.CompareAndSwap(last, now) {
		return
	}
	s.opts.Logger.Warn("norn/postgres: a write transaction found the server's lock table full; its steps run again in smaller transactions",
		"server", s.target, "err", err)
}

// ran counts the steps of batch that its transaction ran (not those left
// for later).
func ran(batch []*writeReq) int {
	n := 0
	for _, r := range batch {
		if !r.later {
			n++
		}
	}
	return n
}

// observe reports one transaction to Options.Commits and the observers
// ObserveCommits added.
func (s *Store) observe(steps int, start time.Time, err error) {
	ci := persistence.CommitInfo{Driver: "postgres", Steps: steps, Duration: time.Since(start), Err: err}
	if s.opts.Commits != nil {
		s.opts.Commits.ObserveCommit(ci)
	}
	s.observers.Notify(ci)
}

// ObserveCommits adds o to the observers of this store's commits.
func (s *Store) ObserveCommits(o persistence.CommitObserver) (remove func()) {
	return s.observers.Add(o)
}

func stepKey(st persistence.Step) string {
	if len(st.CreateMany) > 0 {
		return st.CreateMany[0].Instance.ID
	}
	if st.Create != nil {
		return st.Create.ID
	}
	return st.Instance
}

// runTx applies batch in one transaction and sets every request's outcome.
//
// The whole batch goes to the server as one pipeline: BEGIN, the steps
// (when the batch has several, those that may fail between SAVEPOINT and
// RELEASE, see mayFail), COMMIT. Every condition a step depends on is
// checked by the statement itself (norn_check raises), so a failing step
// stops the pipeline at its own statement. If it had a savepoint, the steps
// before it stand, and a second pipeline rolls back to the failed step's
// savepoint, runs whatever decides its outcome (a diagnosis) and goes on
// with the steps after it; if not, the batch runs again, every step in a
// savepoint. A batch costs one round trip, plus one per failed step. It
// returns the error that failed the whole transaction, if one did (steps
// that failed on their own do not count).
func (s *Store) runTx(ctx context.Context, conn *pgxpool.Conn, batch []*writeReq) error {
	multi := ran(batch) > 1
	guarded := s.guarded.Load() > 0
	if guarded {
		s.guarded.Add(-1)
	}
	var sql int
	// A batch that emits wakes the relayers of other processes with a
	// NOTIFY in its own transaction: delivered at the commit, and never
	// for a rollback. Unlike wake-ups (see notifier) it cannot be lost to
	// a crash after the commit. It is sent in every pipeline of the
	// transaction, since an emitting step may be before the one a pipeline
	// resumes at; PostgreSQL folds identical notifications of one
	// transaction into one. A step that emits and then fails leaves a
	// needless notification, which costs a relayer one empty claim.
	notify := false
	for _, r := range batch {
		r.res, r.err, r.retry = persistence.StepResult{}, nil, false
		if r.later {
			// Left for the next transaction (see deferSteps).
			r.ops, r.merged, r.savepoint = nil, false, false
			continue
		}
		r.ops, r.merged = s.compile(r), false
		r.savepoint = multi && (guarded || mayFail(r))
	}
	deferSavepoints(batch)
	for _, r := range batch {
		sql += len(r.ops)
		notify = notify || len(r.step.Emit) > 0
	}
	if sql == 0 {
		return nil // nothing to write: empty steps, or only known duplicates to send
	}
	var first, last []op // merged writes (see mergeWrites)
	if multi && !guarded {
		first, last = s.mergeWrites(batch)
	}
	// guard applies the whole batch again from the start of a new
	// transaction, every step in a savepoint and nothing merged; sticky,
	// the next few batches too. An ID taken is not sticky: it says nothing
	// about the next batches, and idempotent spawns may take one often.
	guard := func(sticky bool) {
		s.reruns.Add(1)
		if sticky {
			s.guarded.Store(guardedBatches)
		}
		for _, x := range batch {
			if x.later {
				continue
			}
			x.res, x.err, x.retry = persistence.StepResult{}, nil, false
			x.ops = s.compile(x)
			x.savepoint, x.merged = true, false
		}
		deferSavepoints(batch)
		first, last = nil, nil
	}
	pre := s.beginOps(batch)
	next := 0
	for {
		// The first merged writes run at the start of the transaction: a
		// pipeline that resumes it after a failed step's savepoint keeps
		// them.
		var head []op
		if begins(pre) {
			head = first
		}
		ops := s.pipeline(batch[next:], pre, head, last, notify)
		failAt, err := runOps(ctx, conn, ops)
		if err == nil {
			return nil // committed
		}

		var pe *pgconn.PgError
		o := ops[failAt]
		if outOfSharedMemory(err) {
			// The lock table is full (see errLockTableFull): the whole
			// transaction goes, whatever ran of it.
			_, _ = conn.Exec(ctx, sqlRollback)
			if ran(batch) > 1 {
				for _, r := range batch {
					r.later, r.savepoint, r.merged, r.ops = true, false, false, nil
				}
				return fmt.Errorf("%w: %s: %w", errLockTableFull, o.label, err)
			}
			for _, r := range batch {
				if !r.later {
					r.retry, r.err = true, fmt.Errorf("postgres: %s: %w", o.label, err)
				}
			}
			return nil
		}
		if o.merged && errors.As(err, &pe) {
			// A step of the merged writes failed, and the transaction
			// with it: find which, each step on its own.
			guard(o.name != sqlCreateMerged)
			next = 0
			pre = append([]op{ctl(sqlRollback)}, s.beginOps(batch)...)
			continue
		}
		if o.batchLock && retryable(err) {
			// Lost a conflict before any step ran: try them all again.
			_, _ = conn.Exec(ctx, sqlRollback)
			for _, r := range batch {
				if r.err == nil && !r.later {
					r.retry, r.err = true, fmt.Errorf("postgres: %s: %w", o.label, err)
				}
			}
			return nil
		}
		if o.req == nil || o.follow || !errors.As(err, &pe) {
			// A connection failure, a timeout, or a failed COMMIT: the
			// transaction is gone, and with it every step's work. (If the
			// connection broke after COMMIT was sent, the outcome is not
			// known; the error says so only by being an error.)
			err = fmt.Errorf("postgres: %s: %w", o.label, err)
			fatal(batch, err)
			if conn.Conn().PgConn().TxStatus() == 'E' || conn.Conn().PgConn().TxStatus() == 'T' {
				_, _ = conn.Exec(ctx, sqlRollback)
			}
			return err
		}

		r := o.req
		if multi && !r.savepoint {
			// A step without a savepoint failed, and the transaction with
			// it.
			guard(o.name != sqlInsertInstance)
			next = 0
			pre = append([]op{ctl(sqlRollback)}, s.beginOps(batch)...)
			continue
		}
		follow := stepFailed(&o, err, pe)
		for i, x := range batch {
			if x == r {
				next = i + 1
			}
		}
		switch {
		case errors.Is(r.err, errUsed):
			// A Dedupe message was a duplicate (compile marked it): undo
			// the step and apply it again without the message, in this
			// transaction. Each round leaves out one more message, so this
			// ends.
			next--
			r.res, r.err = persistence.StepResult{}, nil
			r.ops = s.compile(r)
			if multi {
				pre = []op{ctl(sqlRollbackTo), ctl(sqlRelease)}
				continue
			}
			// Without a savepoint the transaction goes; the same pipeline
			// starts the next one.
			pre = append([]op{ctl(sqlRollback)}, s.beginOps(batch)...)
		case multi:
			pre = []op{ctl(sqlRollbackTo), ctl(sqlRelease)}
			if follow != nil {
				pre = append(pre, *follow)
			}
		default:
			// A single step runs without a savepoint: roll the transaction
			// back, then settle the step outside it.
			settle(ctx, conn, r, follow)
			return nil
		}
	}
}

// Savepoints. In a batch of several steps, a step that may fail in the
// normal course of things runs in a savepoint of its own, so that its
// failure rolls back only itself: a creation (an ID may be taken), a
// subscription (a mode conflict), a claim, a message that must be
// delivered or carries an ID to deduplicate. Every other step (an instance
// appending to its history, consuming its mail, sending, ending) fails
// only when something is wrong for the whole batch to see (a lost lease, a
// lost lock conflict), and saves the two statements: if one does fail,
// the transaction goes, and the batch runs again with every step in a
// savepoint, as do the guardedBatches batches after it.
const guardedBatches = 16

// mayFail reports whether a step may fail in the normal course of things
// (see guardedBatches). A creation that writes nothing but the instance
// and its events does not count: its ID taken costs the batch a second
// run, with savepoints, and it can be merged with others (see
// mergeWrites).
func mayFail(r *writeReq) bool {
	st := &r.step
	if st.Create != nil && !plainCreate(r) || len(st.CreateMany) > 0 || len(st.Subscribe) > 0 || len(st.Claim) > 0 {
		return true
	}
	for i := range st.Send {
		if st.Send[i].Dedupe || st.Send[i].MustDeliver {
			return true
		}
	}
	return false
}

// plainCreate reports whether a compiled step that creates writes nothing
// but the instance and its events.
func plainCreate(r *writeReq) bool {
	for i := range r.ops {
		if n := r.ops[i].name; n != sqlInsertInstance && n != sqlInsertEvent {
			return false
		}
	}
	return true
}

// ctl is a transaction control statement.
func ctl(name string) op { return op{label: name, name: name} }

// beginOps starts a transaction for batch: BEGIN, its planner settings
// (see sqlWritePlans), then its advisory locks.
func (s *Store) beginOps(batch []*writeReq) []op {
	pre := []op{ctl(sqlBegin), ctl(sqlWritePlans)}
	if l, ok := batchLocks(s, batch); ok {
		pre = append(pre, l)
	}
	return pre
}

// pipeline is one round trip of runTx: pre (what starts or resumes the
// transaction), the merged writes that go first (see mergeWrites), the
// steps of batch, those with a savepoint between SAVEPOINT and RELEASE,
// the merged writes that go last (a pipeline that failed stopped before
// them), the relayers' NOTIFY, and COMMIT.
func (s *Store) pipeline(batch []*writeReq, pre, first, last []op, notify bool) []op {
	ops := append(append([]op(nil), pre...), first...)
	for _, r := range batch {
		if len(r.ops) == 0 {
			continue // nothing to write
		}
		if r.savepoint {
			ops = append(ops, ctl(sqlSavepoint))
		}
		ops = append(ops, r.ops...)
		if r.savepoint {
			ops = append(ops, ctl(sqlRelease))
		}
	}
	ops = append(ops, last...)
	if notify {
		ops = append(ops, op{label: "notify relayers", name: sqlNotify, args: []any{s.outboxChannel, s.origin}})
	}
	return append(ops, op{label: "commit", name: sqlCommit, read: readCommit})
}

// begins reports whether the statements start a transaction.
func begins(pre []op) bool {
	for i := range pre {
		if pre[i].name == sqlBegin {
			return true
		}
	}
	return false
}

// runOps sends ops as one pipeline and reads their results until the
// first error: it returns the index of the statement that failed, and the
// error.
func runOps(ctx context.Context, conn *pgxpool.Conn, ops []op) (int, error) {
	b := &pgx.Batch{}
	for i := range ops {
		b.Queue(ops[i].name, ops[i].args...)
	}
	br := conn.SendBatch(ctx, b)
	failAt, err := -1, error(nil)
	for i := range ops {
		if err = ops[i].run(br); err != nil {
			failAt = i
			break
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		failAt, err = len(ops)-1, cerr
	}
	return failAt, err
}

// fatal sets the outcome of a batch whose transaction failed: nothing of
// it commits. Steps whose failure is already known keep their error; every
// other one (including a step whose outcome a follow-up statement was to
// decide) gets err.
func fatal(batch []*writeReq, err error) {
	for _, r := range batch {
		if r.later {
			continue // not run: it goes to the next transaction
		}
		if r.err == nil || r.retry {
			r.err, r.retry = err, false
		}
	}
}

// stepFailed sets the outcome of the step whose statement o failed with
// err (pe): a retry for a lost conflict, the error o's check maps a
// failed condition to, or err. It returns the statement that is to settle
// the step after the rollback, if any.
func stepFailed(o *op, err error, pe *pgconn.PgError) *op {
	r := o.req
	var follow *op
	switch {
	case retryable(err):
		r.retry = true
		r.err = fmt.Errorf("postgres: %s: %w", o.label, err)
	case pe.Code == checkCode && o.check != nil:
		r.err, follow = o.check(pe)
	default:
		r.err = fmt.Errorf("postgres: %s: %w", o.label, err)
	}
	return follow
}

// settle rolls back the transaction of a batch of one failed step r and
// runs follow, which decides r's outcome, outside it.
func settle(ctx context.Context, conn *pgxpool.Conn, r *writeReq, follow *op) {
	pre := []op{ctl(sqlRollback)}
	if follow != nil {
		pre = append(pre, *follow)
	}
	if _, err := runOps(ctx, conn, pre); err != nil {
		r.err, r.retry = fmt.Errorf("postgres: settle failed step: %w", err), false
	}
}

func readCommit(br pgx.BatchResults) error {
	tag, err := br.Exec()
	if err == nil && tag.String() != "COMMIT" {
		err = fmt.Errorf("transaction was rolled back (%s)", tag)
	}
	return err
}

// queueWake hands IDs that committed work woke to the notifier goroutine.
func (s *Store) queueWake(ids []string) {
	s.wakeMu.RLock()
	defer s.wakeMu.RUnlock()
	if s.wakeClosed {
		return
	}
	select {
	case s.wake <- ids:
	default:
		// The notifier is behind (the channel is full, so it has work and
		// will look at this): tell listeners to rescan rather than block.
		s.wakeLost.Store(true)
	}
}

// notifier sends the wake-up notifications of committed batches: whatever
// the writers queued while it was sending the previous ones goes out in one
// transaction, so notifications cost the writers nothing and coalesce under
// load. They are sent after the commit they describe, so a crash in between
// loses them: the runtime's slow safety-net scan of Runnable covers that.
// When no other store listens (one process on the database), it sends
// nothing at all (see othersListening).
func (s *Store) notifier() {
	defer close(s.notifierDone)
	for ids := range s.wake {
	more:
		for len(ids) < 100000 {
			select {
			case x, ok := <-s.wake:
				if !ok {
					break more
				}
				ids = append(ids, x...)
			default:
				break more
			}
		}
		s.sendWake(ids)
	}
}

func (s *Store) sendWake(ids []string) {
	lost := s.wakeLost.Swap(false)
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.WriteTimeout)
	defer cancel()
	if !s.othersListening(ctx) {
		// No one would hear it but this store, which skips its own. (A
		// listener that missed an earlier one has left, or rescans when
		// it comes back.)
		return
	}
	payloads := wakePayloads(s.origin, ids)
	if lost {
		payloads = []string{rescanPayload(s.origin)}
	}
	b := &pgx.Batch{}
	b.Queue(sqlBegin)
	// Nothing depends on a notification surviving a crash; do not wait
	// for the disk (NOTIFY holds a global lock until its commit is done).
	b.Queue(sqlAsyncCommit)
	for _, p := range payloads {
		b.Queue(sqlNotify, s.channel, p)
	}
	b.Queue(sqlCommit)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		s.wakeLost.Store(true)
		s.opts.Logger.Warn("norn/postgres: sending wake-up notifications", "server", s.target, "err", err)
	}
}

// Presence of other listeners. A store whose wake-ups no other store hears
// (one process on the database: a store skips its own notifications) sends
// none: each would cost the server a transaction per batch for nothing.
// Every wake-up listener holds a shared advisory lock on its connection for
// as long as it listens, which the server drops with the connection,
// however that ends.
//
// A store trusts a look that found no one for presenceTTL, and only while
// a listener of its own was there at the look and since (without one, it
// looks at every send). So a store that may still be sending nothing to a
// new listener is itself a listener whose lock the new one sees: a
// listener that finds another one when it connects rescans only
// presenceLag later, when every store has looked again; one that finds
// none rescans at once.
const (
	// presenceTTL is how long the notifier trusts its last look at the
	// listeners (a look is one read of pg_locks).
	presenceTTL = 250 * time.Millisecond
	// presenceLag is how long after it connects a listener that found
	// another one waits before its rescan.
	presenceLag = 2 * presenceTTL
)

// othersListening reports whether a wake-up listener of another Store
// (another process, as a rule) listens on this store's channel, and says
// yes when it cannot tell. Called by the notifier goroutine only.
func (s *Store) othersListening(ctx context.Context) bool {
	now := time.Now()
	s.listenMu.Lock()
	gen := s.listenGen
	pids := make([]int32, 0, len(s.listenPIDs))
	for pid := range s.listenPIDs {
		pids = append(pids, int32(pid))
	}
	s.listenMu.Unlock()
	if !s.othersAt.IsZero() && gen == s.othersGen && now.Sub(s.othersAt) < time.Duration(s.presenceTTL.Load()) {
		return s.others
	}
	var others bool
	if err := s.pool.QueryRow(ctx, sqlListening, s.listenerLocks, lockHash(s.channel), pids).Scan(&others); err != nil {
		s.othersAt = time.Time{}
		return true
	}
	s.others, s.othersAt, s.othersGen = others, now, gen
	if !others && len(pids) == 0 {
		s.othersAt = time.Time{} // no listener of its own: look again next time
	}
	return others
}
