// Package chaosrun is the kill -9 chaos run behind `go run ./internal/chaos`
// (see that command for usage), callable from tests.
//
// Run starts worker processes (re-executions of Config.WorkerCommand) that
// each open the store and run an actor.System with the chaos workflows. It
// spawns chain workflows through the workers (a spawn counts once a worker
// has acknowledged it; an unacknowledged one is asked again, by ID, from a
// worker that is alive), publishes queue messages with System.Publish from
// its own System (which runs no workflows), and meanwhile kills a random
// worker with SIGKILL every so often and starts it again. Once everything
// has ended, or at the deadline, it stops the workers cleanly and checks
// the outcome from the store alone (see Result).
package chaosrun

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// Config describes one chaos run.
type Config struct {
	// Store is a SQLite file path, sqlite://path or postgres://… URL.
	// Empty: a new SQLite file in Dir.
	Store string
	// Workflows is how many chain workflows are spawned and how many queue
	// messages are published.
	Workflows int
	// Consumers is how many competing consumers share the queue. Default 4.
	Consumers int
	// Kills is how many times a worker is killed with SIGKILL. The kills
	// are spread over the run by progress: the k-th comes once the workers
	// have logged a random share of the expected activity executions.
	Kills int
	// Workers is how many worker processes run at once. Default 1 for
	// SQLite, 2 for PostgreSQL.
	Workers int
	// Chain, Queue and Tx select the workloads (they may run together). Tx
	// spawns -workflows instances of a workflow whose one transactional
	// activity increments a row of a user table in the store's database.
	Chain, Queue, Tx bool
	// LeaseTTL is the workers' actor.Config.LeaseTTL: how long the
	// instances of a killed worker that restarts under a new node ID wait
	// for a take-over. Default 2s.
	LeaseTTL time.Duration
	// Timeout bounds the run up to the checks (which get their own time).
	Timeout time.Duration
	// Seed makes the kill schedule repeatable. 0 picks one (see Result.Seed).
	Seed uint64
	// WorkerCommand is the argv that starts a worker; Run adds the
	// environment that makes it one (see IsWorker). Required.
	WorkerCommand []string
	// Dir holds the side-effect log, the workers' stderr (worker-N.log) and
	// the default SQLite file. Required.
	Dir string
	// Logger receives progress; default slog.Default().
	Logger *slog.Logger
}

// How often the run loop looks at progress and at the store.
const (
	tickEvery       = 20 * time.Millisecond
	storeCheckEvery = 500 * time.Millisecond
	// spawnBatch is how many spawns go to a worker in one line; a worker
	// gets more once fewer than 2×spawnBatch of its spawns are unanswered.
	spawnBatch = 200
	// crashRestartDelay keeps a worker that keeps failing at start-up from
	// spinning.
	crashRestartDelay = 500 * time.Millisecond
	maxCrashes        = 20
	// stopGrace bounds the wait for workers to stop cleanly at the end.
	stopGrace = 60 * time.Second
	// checkTimeout bounds the checks after the run.
	checkTimeout = 10 * time.Minute
	publishers   = 4
)

// item is one spawn the parent asks a worker for.
type item struct {
	kind string // "chain" or "consumer"
	i    int
}

// slot is one worker position; each restart is a new generation.
type slot struct {
	idx      int
	gen      int
	nodeID   string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	alive    bool // started and not yet reaped
	ready    bool
	killed   bool // we sent SIGKILL
	stopping bool // we sent "stop"
	inflight map[item]bool
	started  time.Time
	// restartAt, when set, is when a slot whose worker died on its own is
	// started again.
	restartAt time.Time
}

// event is a line from a worker, or its exit.
type event struct {
	slot, gen int
	line      string
	exited    bool
	err       error
}

type runner struct {
	cfg      Config
	log      *slog.Logger
	rng      *mrand.Rand
	run      string // this run's ID prefix
	storeURL string
	effects  string // side-effect log path
	st       persistence.Store
	sys      *actor.System // the parent's: publishes and sends, runs nothing

	slots   []*slot
	events  chan event
	quit    chan struct{} // closed once every worker is reaped
	readers sync.WaitGroup

	unassigned []item
	acked      map[item]bool
	toAck      int

	progress   *lineCounter
	thresholds []int // kill k once progress reaches thresholds[k]
	lastKillAt int   // progress at the last kill
	kills      int
	crashes    int
	nacks      int

	published  chan struct{} // closed when the publisher is done
	pubIDs     []string      // message ID of job i ("" if never published)
	pubRetries atomic.Int64
	// stopIDs are the message IDs of the stops published (one per
	// consumer, once the queue has drained).
	stopIDs     map[string]bool
	stopsFailed int // publishes of a stop that failed (and were tried again)
	chainDone   bool
	txDone      bool
	queueDone   bool
	lastStoreAt time.Time
}

// Run performs one chaos run and returns one Result per workload. An error
// means the run itself could not be carried out; a run whose checks fail
// returns results for which OK is false.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if len(cfg.WorkerCommand) == 0 || cfg.Dir == "" {
		return nil, errors.New("chaosrun: Config.WorkerCommand and Config.Dir are required")
	}
	if !cfg.Chain && !cfg.Queue && !cfg.Tx {
		return nil, errors.New("chaosrun: no workload selected")
	}
	if cfg.Workflows < 0 || cfg.Kills < 0 {
		return nil, errors.New("chaosrun: negative -workflows or -kills")
	}
	if cfg.Consumers <= 0 {
		cfg.Consumers = 4
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = defaultLeaseTTL
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 20 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Seed == 0 {
		cfg.Seed = mrand.Uint64()
	}
	pg := isPostgres(cfg.Store)
	if cfg.Workers <= 0 {
		cfg.Workers = 1
		if pg {
			cfg.Workers = 2
		}
	}
	r := &runner{
		cfg: cfg, rng: mrand.New(mrand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), run: "x" + randomHex(4),
		storeURL: cfg.Store, effects: filepath.Join(cfg.Dir, "effects.log"),
		events: make(chan event, 1024), quit: make(chan struct{}), acked: map[item]bool{}, stopIDs: map[string]bool{},
		published: make(chan struct{}),
	}
	if r.storeURL == "" {
		r.storeURL = "sqlite://" + filepath.Join(cfg.Dir, "norn.db")
	}
	r.log = cfg.Logger.With("run", r.run, "store", storeLabel(cfg.Store))
	r.log.Info("chaos run", "workflows", cfg.Workflows, "kills", cfg.Kills, "workers", cfg.Workers, "lease", cfg.LeaseTTL,
		"chain", cfg.Chain, "queue", cfg.Queue, "tx", cfg.Tx, "seed", cfg.Seed, "dir", cfg.Dir)

	// The effect log exists before any worker, so that progress can follow it.
	f, err := os.OpenFile(r.effects, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("chaosrun: side-effect log: %w", err)
	}
	r.progress = &lineCounter{f: f}
	defer f.Close()

	if r.st, err = storeurl.Open(ctx, r.storeURL); err != nil {
		return nil, fmt.Errorf("chaosrun: open store %s: %w", storeLabel(cfg.Store), err)
	}
	defer r.st.Close()
	// The parent's own node never runs a workflow; its recovery scan is
	// pushed out of the way so that it does not take (and at once give
	// back) the leases of instances a killed worker left. Wake-ups it
	// still gets for such instances end in warnings about an unknown
	// workflow, hence only its errors are logged.
	quiet := slog.New(minLevel{Handler: r.log.Handler(), min: slog.LevelError})
	if r.sys, err = actor.Start(ctx, actor.Config{Store: r.st, NodeID: r.run + "-parent", LeaseTTL: cfg.LeaseTTL,
		RecoveryInterval: 24 * time.Hour, Logger: quiet}); err != nil {
		return nil, fmt.Errorf("chaosrun: start the parent's system: %w", err)
	}
	sysStopped := false
	stopSys := func() {
		if !sysStopped {
			sysStopped = true
			sctx, cancel := context.WithTimeout(context.Background(), stopGrace)
			defer cancel()
			if err := r.sys.Stop(sctx); err != nil {
				r.log.Warn("stopping the parent's system", "err", err)
			}
		}
	}
	defer stopSys()

	// Consumers first: the queue drains only once they exist.
	if cfg.Queue {
		for j := range cfg.Consumers {
			r.unassigned = append(r.unassigned, item{"consumer", j})
		}
	}
	if cfg.Chain {
		for i := range cfg.Workflows {
			r.unassigned = append(r.unassigned, item{"chain", i})
		}
	}
	if cfg.Tx {
		// The user's table, before any worker writes it.
		if err := execTx(ctx, r.st, txTable); err != nil {
			return nil, fmt.Errorf("chaosrun: create the tx workload's table: %w", err)
		}
		for i := range cfg.Workflows {
			r.unassigned = append(r.unassigned, item{"tx", i})
		}
	}
	r.toAck = len(r.unassigned)
	expected := 0
	if cfg.Chain {
		expected += chainSteps * cfg.Workflows
	}
	if cfg.Tx {
		expected += cfg.Workflows
	}
	if cfg.Queue {
		expected += cfg.Workflows
	}
	r.thresholds = killSchedule(r.rng, cfg.Kills, expected)

	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	start := time.Now()

	var pubWG sync.WaitGroup
	if cfg.Queue {
		r.pubIDs = make([]string, cfg.Workflows)
		pubWG.Go(func() { r.publish(rctx) })
	} else {
		close(r.published)
	}
	// Whatever happens below, the publisher is stopped and joined and no
	// worker outlives Run.
	defer func() {
		cancel()
		pubWG.Wait()
	}()
	defer r.reapAll()

	r.slots = make([]*slot, cfg.Workers)
	for i := range r.slots {
		r.slots[i] = &slot{idx: i, inflight: map[item]bool{}}
		if err := r.startWorker(r.slots[i]); err != nil {
			return nil, err
		}
	}
	loopErr := r.loop(rctx)
	elapsed := time.Since(start)
	r.log.Info("chaos phase over", "elapsed", elapsed.Round(time.Millisecond), "kills", r.kills, "crashes", r.crashes,
		"spawn retries", r.nacks, "deadline", rctx.Err() != nil)
	cancel() // stops the publisher if it is still going
	pubWG.Wait()
	if err := r.stopWorkers(); err != nil {
		r.log.Warn("workers did not stop cleanly", "err", err)
		r.crashes++
	}
	stopSys()
	if loopErr != nil {
		return nil, loopErr
	}

	cctx, ccancel := context.WithTimeout(ctx, checkTimeout)
	defer ccancel()
	results, err := r.check(cctx)
	if err != nil {
		return nil, fmt.Errorf("chaosrun: checking the store: %w", err)
	}
	for i := range results {
		results[i].Store = storeLabel(cfg.Store)
		results[i].Kills, results[i].Crashes, results[i].Elapsed, results[i].Seed = r.kills, r.crashes, elapsed, cfg.Seed
	}
	return results, nil
}

// killSchedule spreads kills over the expected activity executions: sorted
// random points in the first 90 %, so that the last kills still have work
// to interrupt.
func killSchedule(rng *mrand.Rand, kills, expected int) []int {
	out := make([]int, kills)
	for k := range out {
		out[k] = int(float64(expected) * (0.02 + 0.88*rng.Float64()))
	}
	slices.Sort(out)
	return out
}

// loop runs the chaos phase until every workload has ended or ctx ends.
func (r *runner) loop(ctx context.Context) error {
	tick := time.NewTicker(tickEvery)
	defer tick.Stop()
	for {
		select {
		case ev := <-r.events:
			if err := r.handle(ev); err != nil {
				return err
			}
		case <-tick.C:
			done, err := r.tick(ctx)
			if err != nil || done {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

func (r *runner) tick(ctx context.Context) (bool, error) {
	if err := r.progress.update(); err != nil {
		return false, err
	}
	now := time.Now()
	for _, s := range r.slots {
		if !s.alive && !s.restartAt.IsZero() && now.After(s.restartAt) {
			if err := r.startWorker(s); err != nil {
				return false, err
			}
		}
	}
	r.dispatch()
	r.maybeKill()
	if now.Sub(r.lastStoreAt) < storeCheckEvery {
		return false, nil
	}
	r.lastStoreAt = now
	return r.checkEnd(ctx), nil
}

// dispatch hands unassigned spawns to ready workers.
func (r *runner) dispatch() {
	for _, s := range r.slots {
		if len(r.unassigned) == 0 {
			return
		}
		if !s.alive || !s.ready || s.killed || s.stopping || len(s.inflight) >= 2*spawnBatch {
			continue
		}
		n := min(spawnBatch, len(r.unassigned))
		batch := r.unassigned[:n]
		// One line per kind: consumers and chains may share a batch.
		byKind := map[string][]string{}
		var kinds []string
		for _, it := range batch {
			if _, ok := byKind[it.kind]; !ok {
				kinds = append(kinds, it.kind)
			}
			byKind[it.kind] = append(byKind[it.kind], strconv.Itoa(it.i))
			s.inflight[it] = true
		}
		r.unassigned = r.unassigned[n:]
		var b strings.Builder
		for _, k := range kinds {
			fmt.Fprintf(&b, "spawn %s %s\n", k, strings.Join(byKind[k], " "))
		}
		// A failed write means the worker just died; its exit event puts
		// the batch back.
		if _, err := io.WriteString(s.stdin, b.String()); err != nil {
			r.log.Debug("write to worker", "slot", s.idx, "err", err)
		}
	}
}

// maybeKill kills a random running worker once progress has reached the
// next point of the schedule (and has moved since the last kill, so that
// every kill leaves the workers some progress).
func (r *runner) maybeKill() {
	if r.kills >= len(r.thresholds) {
		return
	}
	p := r.progress.lines
	if p < r.thresholds[r.kills] || (r.kills > 0 && p <= r.lastKillAt) {
		return
	}
	var cands []*slot
	for _, s := range r.slots {
		if s.alive && !s.killed && !s.stopping {
			cands = append(cands, s)
		}
	}
	if len(cands) == 0 {
		return
	}
	s := cands[r.rng.IntN(len(cands))]
	if err := s.cmd.Process.Kill(); err != nil {
		r.log.Warn("kill -9 worker", "slot", s.idx, "err", err)
		return
	}
	s.killed = true
	r.kills++
	r.lastKillAt = p
	r.log.Debug("kill -9", "slot", s.idx, "gen", s.gen, "ready", s.ready, "up", time.Since(s.started).Round(time.Millisecond),
		"progress", p, "kill", r.kills)
	if r.kills%max(1, r.cfg.Kills/10) == 0 {
		r.log.Info("progress", "kills", r.kills, "executions", p, "acked", len(r.acked), "of", r.toAck)
	}
}

// handle applies one worker event.
func (r *runner) handle(ev event) error {
	s := r.slots[ev.slot]
	if ev.gen != s.gen {
		return nil // an older generation's late line
	}
	if ev.exited {
		s.alive, s.ready = false, false
		for it := range s.inflight {
			if !r.acked[it] {
				r.unassigned = append(r.unassigned, it)
			}
		}
		clear(s.inflight)
		switch {
		case s.stopping:
			if ev.err != nil {
				r.crashes++
				r.log.Warn("worker failed to stop cleanly", "slot", s.idx, "err", ev.err, "log", r.workerLog(s.idx))
			}
		case s.killed:
			return r.startWorker(s)
		default:
			r.crashes++
			r.log.Warn("worker exited on its own", "slot", s.idx, "gen", s.gen, "err", ev.err, "log", r.workerLog(s.idx))
			if r.crashes > maxCrashes {
				return fmt.Errorf("chaosrun: workers exited on their own %d times; see %s", r.crashes, r.workerLog(s.idx))
			}
			s.restartAt = time.Now().Add(crashRestartDelay)
		}
		return nil
	}
	f := strings.Fields(ev.line)
	switch {
	case len(f) == 1 && f[0] == "ready":
		s.ready = true
	case len(f) == 3 && (f[0] == "ack" || f[0] == "nack"):
		i, err := strconv.Atoi(f[2])
		if err != nil {
			return fmt.Errorf("chaosrun: worker said %q", ev.line)
		}
		it := item{f[1], i}
		if !s.inflight[it] {
			return nil // answered twice (a batch sent again); the first answer counted
		}
		delete(s.inflight, it)
		if f[0] == "ack" {
			r.acked[it] = true
		} else {
			r.nacks++
			r.unassigned = append(r.unassigned, it)
		}
	case len(f) == 1 && f[0] == "stopped":
	default:
		r.log.Warn("unexpected worker output", "slot", s.idx, "line", ev.line)
	}
	return nil
}

// checkEnd looks at the store: have the workloads ended? It also
// publishes the consumers' stops once the queue has drained.
func (r *runner) checkEnd(ctx context.Context) bool {
	if r.cfg.Chain && !r.chainDone && r.allAcked("chain") {
		open, err := r.anyOpen(ctx, chainName, chainPrefix(r.run))
		if err != nil {
			r.log.Warn("store check", "err", err)
			return false
		}
		r.chainDone = !open
		if r.chainDone {
			r.log.Info("every chain workflow ended", "executions", r.progress.lines, "kills", r.kills)
		}
	}
	if r.cfg.Queue && !r.queueDone && r.allAcked("consumer") && isClosed(r.published) {
		if len(r.stopIDs) < r.cfg.Consumers {
			waiting, err := r.waiting(ctx)
			if err != nil {
				r.log.Warn("store check", "err", err)
				return false
			}
			if waiting == 0 || len(r.stopIDs) > 0 {
				r.publishStops(ctx)
			}
		}
		if len(r.stopIDs) == r.cfg.Consumers {
			open, err := r.anyOpen(ctx, consumerName, consumerPrefix(r.run))
			if err != nil {
				r.log.Warn("store check", "err", err)
				return false
			}
			r.queueDone = !open
			if r.queueDone {
				r.log.Info("queue drained and every consumer ended", "kills", r.kills)
			}
		}
	}
	if r.cfg.Tx && !r.txDone && r.allAcked("tx") {
		open, err := r.anyOpen(ctx, txName, txPrefix(r.run))
		if err != nil {
			r.log.Warn("store check", "err", err)
			return false
		}
		r.txDone = !open
		if r.txDone {
			r.log.Info("every tx workflow ended", "executions", r.progress.lines, "kills", r.kills)
		}
	}
	return (!r.cfg.Chain || r.chainDone) && (!r.cfg.Queue || r.queueDone) && (!r.cfg.Tx || r.txDone)
}

func (r *runner) allAcked(kind string) bool {
	n := r.cfg.Workflows
	if kind == "consumer" {
		n = r.cfg.Consumers
	}
	for i := range n {
		if !r.acked[item{kind, i}] {
			return false
		}
	}
	return true
}

var openStatuses = []persistence.Status{persistence.StatusRunning, persistence.StatusWaiting, persistence.StatusCompensating}

// anyOpen reports whether some instance of workflow whose ID starts with
// prefix has not ended.
func (r *runner) anyOpen(ctx context.Context, workflow, prefix string) (bool, error) {
	page, err := r.st.List(ctx, persistence.ListFilter{Status: openStatuses, Workflow: workflow, After: prefix, Limit: 1})
	if err != nil {
		return false, err
	}
	return len(page) > 0 && strings.HasPrefix(page[0].ID, prefix), nil
}

// waiting is how many messages the run's channel still holds.
func (r *runner) waiting(ctx context.Context) (int, error) {
	stats, err := r.st.ChannelStats(ctx)
	if err != nil {
		return 0, err
	}
	for _, s := range stats {
		if s.Channel == channelName(r.run) {
			return s.Waiting, nil
		}
	}
	return 0, nil
}

// publishStops publishes one stop per consumer on the channel, behind
// every job: each consumer ends on the first it receives, so each takes
// one. A failed Publish is tried again on a later tick (it may have
// committed anyway: a stop to spare, which stays queued).
func (r *runner) publishStops(ctx context.Context) {
	for len(r.stopIDs) < r.cfg.Consumers {
		id, err := r.sys.Publish(ctx, channelName(r.run), job{Stop: true})
		if err != nil {
			r.stopsFailed++
			r.log.Warn("publish stop", "err", err)
			return
		}
		r.stopIDs[id] = true
	}
	r.log.Info("queue drained; a stop published for each consumer", "executions", r.progress.lines, "kills", r.kills)
}

// publish publishes job i for every i from a few goroutines; a Publish
// that fails is tried again (it may have committed anyway: such a copy
// shows up as an unknown message, see Result).
func (r *runner) publish(ctx context.Context) {
	defer close(r.published)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range publishers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(r.pubIDs) {
					return
				}
				for ctx.Err() == nil {
					id, err := r.sys.Publish(ctx, channelName(r.run), job{N: i})
					if err == nil {
						r.pubIDs[i] = id
						break
					}
					r.pubRetries.Add(1)
					r.log.Warn("publish failed; trying again", "i", i, "err", err)
					t := time.NewTimer(100 * time.Millisecond)
					select {
					case <-ctx.Done():
					case <-t.C:
					}
					t.Stop()
				}
			}
		})
	}
	wg.Wait()
	r.log.Info("published", "messages", len(r.pubIDs), "retries", r.pubRetries.Load())
}

// startWorker starts a new generation of the slot's worker. Half of the
// restarts keep the previous node ID (the node takes its leases back at
// once), half take a new one (the old leases must expire first).
func (r *runner) startWorker(s *slot) error {
	s.gen++
	if s.nodeID == "" || r.rng.IntN(2) == 0 {
		s.nodeID = fmt.Sprintf("%s-w%d-%d", r.run, s.idx, s.gen)
	}
	cmd := exec.Command(r.cfg.WorkerCommand[0], r.cfg.WorkerCommand[1:]...)
	cmd.Env = append(os.Environ(), roleEnv+"=worker", storeEnv+"="+r.storeURL, logEnv+"="+r.effects,
		nodeEnv+"="+s.nodeID, runEnv+"="+r.run, leaseEnv+"="+r.cfg.LeaseTTL.String())
	errf, err := os.OpenFile(r.workerLog(s.idx), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("chaosrun: worker log: %w", err)
	}
	defer errf.Close() // the child has its own copy
	fmt.Fprintf(errf, "--- generation %d, node %s, %s\n", s.gen, s.nodeID, time.Now().Format(time.RFC3339Nano))
	cmd.Stderr = errf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("chaosrun: worker stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("chaosrun: worker stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaosrun: start worker: %w", err)
	}
	s.cmd, s.stdin, s.started = cmd, stdin, time.Now()
	s.alive, s.ready, s.killed, s.stopping, s.restartAt = true, false, false, false, time.Time{}
	ev := event{slot: s.idx, gen: s.gen}
	r.readers.Go(func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			ev.line = sc.Text()
			r.send(ev)
		}
		// Wait after the last read: it closes the pipe.
		ev.line, ev.exited, ev.err = "", true, cmd.Wait()
		r.send(ev)
	})
	return nil
}

func (r *runner) send(ev event) {
	select {
	case r.events <- ev:
	case <-r.quit:
	}
}

func (r *runner) workerLog(idx int) string {
	return filepath.Join(r.cfg.Dir, fmt.Sprintf("worker-%d.log", idx))
}

// stopWorkers asks every live worker to stop and waits until each has
// exited; workers still running after stopGrace are killed.
func (r *runner) stopWorkers() error {
	for _, s := range r.slots {
		s.restartAt = time.Time{}
		if s.alive && !s.killed {
			s.stopping = true
			if _, err := io.WriteString(s.stdin, "stop\n"); err != nil {
				r.log.Debug("write stop", "slot", s.idx, "err", err)
			}
		}
	}
	grace := time.NewTimer(stopGrace)
	defer grace.Stop()
	var err error
	for r.anyAlive() {
		select {
		case ev := <-r.events:
			if ev.exited && r.slots[ev.slot].gen == ev.gen && r.slots[ev.slot].killed {
				// Killed just before the end: not restarted.
				r.slots[ev.slot].alive = false
				continue
			}
			if herr := r.handle(ev); herr != nil {
				err = errors.Join(err, herr)
			}
		case <-grace.C:
			for _, s := range r.slots {
				if s.alive {
					err = errors.Join(err, fmt.Errorf("worker %d did not stop within %v", s.idx, stopGrace))
					_ = s.cmd.Process.Kill()
					s.killed, s.stopping = true, false
				}
			}
		}
	}
	return err
}

func (r *runner) anyAlive() bool {
	for _, s := range r.slots {
		if s.alive {
			return true
		}
	}
	return false
}

// reapAll kills whatever worker is left (after an error) and waits for
// every reader goroutine.
func (r *runner) reapAll() {
	for _, s := range r.slots {
		if s.alive {
			_ = s.cmd.Process.Kill()
			_ = s.stdin.Close()
		}
	}
	for r.anyAlive() {
		ev := <-r.events
		if ev.exited && r.slots[ev.slot].gen == ev.gen {
			r.slots[ev.slot].alive = false
		}
	}
	close(r.quit)
	r.readers.Wait()
}

// lineCounter follows the side-effect log: how many lines so far. It only
// paces the kills; the checks read the whole log afterwards.
type lineCounter struct {
	f     *os.File
	off   int64
	lines int
	buf   []byte
}

func (c *lineCounter) update() error {
	if c.buf == nil {
		c.buf = make([]byte, 64<<10)
	}
	for {
		n, err := c.f.ReadAt(c.buf, c.off)
		c.off += int64(n)
		for _, b := range c.buf[:n] {
			if b == '\n' {
				c.lines++
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && n < len(c.buf)) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("chaosrun: read side-effect log: %w", err)
		}
	}
}

// minLevel drops records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevel{Handler: h.Handler.WithAttrs(attrs), min: h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func isPostgres(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// storeLabel names a store in the table: "sqlite" or "postgres", with no
// credentials.
func storeLabel(s string) string {
	if isPostgres(s) {
		return "postgres"
	}
	return "sqlite"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
