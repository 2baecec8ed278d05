package actor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"sync"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/timers"
)

// Config configures a node. Store and Workflows are required; every other
// field has a documented default.
type Config struct {
	// Store holds all durable state. Required. The System does not close it.
	Store persistence.Store
	// Workflows are the workflows this node can run (see Register).
	Workflows []Definition
	// NodeID names this node in leases; it must be unique among live nodes.
	// Default: hostname-pid-random. A node restarted with the same NodeID
	// takes its instances back at once; with a new one it waits for the old
	// leases to expire (LeaseTTL).
	NodeID string
	// LeaseTTL is how long an activation's lease lasts without renewal.
	// Default 10s; renewed every LeaseTTL/3.
	LeaseTTL time.Duration
	// PassivateAfter stops activations parked this long; mail, a timer or a
	// cancel brings them back. Default 1 minute.
	PassivateAfter time.Duration
	// RecoveryInterval is the safety-net scan for instances that need an
	// activation and have none (e.g. their node died). Default LeaseTTL, with
	// ±20% jitter.
	RecoveryInterval time.Duration
	// MaxActivating bounds concurrent activation starts. Default 64.
	MaxActivating int
	// TimerHorizon is how far ahead timers are held in memory. Default 1 minute.
	TimerHorizon time.Duration
	// DurableBackoff is the shortest activity retry back-off that waits on a
	// durable timer (surviving restarts, holding no goroutine once
	// passivated) instead of sleeping in memory. Default 5s.
	DurableBackoff time.Duration
	// Codec encodes inputs, results and messages. Default JSON; values that
	// are proto.Message always use protobuf. It is recorded with each
	// instance, and an instance written with another codec stops with an
	// error instead of being misread.
	Codec Codec
	// Errors are the application errors that keep their identity through
	// history (see Sentinel and ErrorType): a workflow, and Await, can match
	// them with errors.Is / errors.As on the first run and after a restart.
	Errors []ErrorDef
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Hooks observes instances, activities, messages and timers. Default:
	// SlogHooks on Logger at Debug level.
	Hooks Hooks
}

// System is a running node. Create it with Start, end it with Stop.
type System struct {
	cfg    Config
	store  persistence.Store
	defs   map[string]Definition
	log    *slog.Logger
	codec  Codec
	actors *protoactor.ActorSystem
	timers *timers.Service

	ctx    context.Context // lives until Stop
	cancel context.CancelFunc
	bg     sync.WaitGroup // background loops
	runs   sync.WaitGroup // activation goroutines

	mu       sync.Mutex
	stopping bool
	acts     map[string]*activation
	starting map[string]bool // activation start in progress; value: wake arrived meanwhile
	waiters  map[string][]chan persistence.Instance
	queue    []string // instances waiting for an activator
	workers  int      // running activators
}

// Start validates cfg, recovers instances that were running, and starts the
// node's background work.
func Start(ctx context.Context, cfg Config) (*System, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: Config.Store is required", ErrInvalidInput)
	}
	defs := make(map[string]Definition, len(cfg.Workflows))
	for _, d := range cfg.Workflows {
		if d == nil || d.Name() == "" {
			return nil, fmt.Errorf("%w: workflow with an empty name", ErrInvalidInput)
		}
		if _, dup := defs[d.Name()]; dup {
			return nil, fmt.Errorf("%w: two workflows registered as %q", ErrInvalidInput, d.Name())
		}
		if err := d.restartPolicy().Validate(); err != nil {
			return nil, fmt.Errorf("%w: workflow %q: %v", ErrInvalidInput, d.Name(), err)
		}
		defs[d.Name()] = d
	}
	if cfg.NodeID == "" {
		host, _ := os.Hostname()
		cfg.NodeID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(4))
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.PassivateAfter <= 0 {
		cfg.PassivateAfter = time.Minute
	}
	if cfg.RecoveryInterval <= 0 {
		cfg.RecoveryInterval = cfg.LeaseTTL
	}
	if cfg.DurableBackoff <= 0 {
		cfg.DurableBackoff = 5 * time.Second
	}
	if cfg.MaxActivating <= 0 {
		cfg.MaxActivating = 64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Codec == nil {
		cfg.Codec = JSON{}
	}
	if cfg.Hooks == nil {
		cfg.Hooks = SlogHooks{Logger: cfg.Logger, Level: slog.LevelDebug}
	}
	s := &System{
		cfg: cfg, store: cfg.Store, defs: defs, log: cfg.Logger.With("node", cfg.NodeID), codec: cfg.Codec,
		acts: map[string]*activation{}, starting: map[string]bool{}, waiters: map[string][]chan persistence.Instance{},
	}
	s.actors = protoactor.NewActorSystem(protoactor.WithLoggerFactory(func(*protoactor.ActorSystem) *slog.Logger {
		return cfg.Logger.With("lib", "protoactor")
	}))
	svc, err := timers.New(timers.Config{Source: cfg.Store, Horizon: cfg.TimerHorizon, Logger: s.log,
		Fire: func(t persistence.Timer) { s.wake(t.Instance) }})
	if err != nil {
		return nil, err
	}
	s.timers = svc
	// Check the store answers before promising anything.
	if _, err := cfg.Store.List(ctx, persistence.ListFilter{Limit: 1}); err != nil {
		return nil, fmt.Errorf("norn: store not usable: %w", err)
	}
	// A node restarted under the same NodeID holds no activation yet: leases
	// in its name are left over from its previous life. Free them so that
	// recovery takes those instances back now (renewing them would keep
	// them stranded).
	if err := cfg.Store.ReleaseLeases(ctx, cfg.NodeID); err != nil {
		return nil, fmt.Errorf("norn: release leases left by an earlier %s: %w", cfg.NodeID, err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.goBG(func() {
		if err := svc.Run(s.ctx); err != nil {
			s.log.Error("timer service stopped", "err", err)
		}
	})
	s.goBG(s.renewLoop)
	s.goBG(s.recoveryLoop)
	if n, ok := cfg.Store.(persistence.Notifier); ok {
		s.goBG(func() {
			err := n.Listen(s.ctx, func(ids []string) {
				if ids == nil {
					go s.recoverOnce() // a gap: look for what we may have missed
					s.timers.Reload()
					return
				}
				for _, id := range ids {
					s.wake(id)
				}
			})
			if err != nil && s.ctx.Err() == nil {
				s.log.Error("store notifications stopped", "err", err)
			}
		})
	}
	return s, nil
}

// NodeID is this node's name in leases.
func (s *System) NodeID() string { return s.cfg.NodeID }

func (s *System) goBG(fn func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		fn()
	}()
}

// Stop stops every activation (they resume later from history, here or on
// another node), releases their leases and stops background work. It waits
// for activations to unwind until ctx ends.
func (s *System) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return nil
	}
	s.stopping = true
	acts := make([]*activation, 0, len(s.acts))
	for _, a := range s.acts {
		acts = append(acts, a)
	}
	s.mu.Unlock()
	for _, a := range acts {
		a.signal(sigStop)
	}
	done := make(chan struct{})
	go func() {
		s.runs.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("norn: stop: activations still running: %w", ctx.Err())
	}
	s.cancel()
	s.bg.Wait()
	if rerr := s.store.ReleaseLeases(context.Background(), s.cfg.NodeID); rerr != nil && !errors.Is(rerr, persistence.ErrStoreClosed) {
		err = errors.Join(err, fmt.Errorf("norn: release leases: %w", rerr))
	}
	s.actors.Shutdown()
	return err
}

func (s *System) renewLoop() {
	t := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			if err := s.store.RenewLeases(s.ctx, s.cfg.NodeID, s.cfg.LeaseTTL); err != nil && s.ctx.Err() == nil {
				s.log.Warn("lease renewal failed", "err", err)
			}
		}
	}
}

// recoveryLoop activates instances that need an activation and have none:
// at start (instances that were mid-run when the process died) and then as a
// slow, jittered safety net (instances whose owner died, wake-ups lost with a
// crashed process).
func (s *System) recoveryLoop() {
	for {
		s.recoverOnce()
		d := time.Duration(float64(s.cfg.RecoveryInterval) * (0.8 + 0.4*mrand.Float64()))
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

func (s *System) recoverOnce() {
	ids, err := s.store.Runnable(s.ctx, time.Now(), 10000)
	if err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("recovery scan failed", "err", err)
		}
		return
	}
	for _, id := range ids {
		s.wake(id)
	}
}

// wake makes sure the instance's activation looks at its mailbox, timers and
// cancel flag: it signals a live activation or starts one.
func (s *System) wake(id string) {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	if a, ok := s.acts[id]; ok {
		if a.passivating {
			a.rewake = true
		} else {
			// Deliver under s.mu, not through the shell's (asynchronous)
			// mailbox: passivate looks at wakeCh under s.mu, and a wake still
			// in flight when it looks would be lost with the activation.
			a.deliver(sigWake)
		}
		s.mu.Unlock()
		return
	}
	if _, ok := s.starting[id]; ok {
		s.starting[id] = true
		s.mu.Unlock()
		return
	}
	s.starting[id] = false
	s.queue = append(s.queue, id)
	if s.workers < s.cfg.MaxActivating {
		s.workers++
		s.runs.Add(1)
		go s.activator()
	}
	s.mu.Unlock()
}

// activator starts queued activations; at most MaxActivating run at once,
// so that waking 100,000 passivated instances does not start 100,000
// goroutines at the same moment.
func (s *System) activator() {
	defer s.runs.Done()
	for {
		s.mu.Lock()
		if len(s.queue) == 0 || s.stopping {
			for _, id := range s.queue {
				delete(s.starting, id)
			}
			s.queue = nil
			s.workers--
			s.mu.Unlock()
			return
		}
		id := s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()
		s.activate(id)
	}
}

// activate takes the lease and starts an activation that replays history.
func (s *System) activate(id string) {
	if s.ctx.Err() != nil {
		s.clearStarting(id)
		return
	}
	a, err := s.load(id)
	if err != nil {
		s.clearStarting(id)
		switch {
		case errors.Is(err, persistence.ErrLeaseHeld), errors.Is(err, persistence.ErrInstanceDone), errors.Is(err, persistence.ErrNotFound):
		case s.ctx.Err() != nil:
		default:
			// Most likely the store is unreachable: try again later, or the
			// instance would sit under our own lease with nobody running it.
			s.log.Warn("activation failed; retrying", "instance", id, "err", err)
			s.wakeLater(id, storeRetryDelay())
		}
		return
	}
	s.launch(a)
}

func (s *System) clearStarting(id string) {
	s.mu.Lock()
	delete(s.starting, id)
	s.mu.Unlock()
}

func (s *System) load(id string) (*activation, error) {
	// Look before taking the lease: with several nodes most wake-ups are for
	// instances another node holds, and a read is cheaper than a failed write.
	cur, err := s.store.Instance(s.ctx, id)
	if err != nil {
		return nil, err
	}
	if cur.Status.Terminal() {
		return nil, persistence.ErrInstanceDone
	}
	if cur.LeaseOwner != "" && cur.LeaseOwner != s.cfg.NodeID && time.Now().Before(cur.LeaseExpires) {
		return nil, persistence.ErrLeaseHeld
	}
	inst, err := s.store.AcquireLease(s.ctx, id, s.cfg.NodeID, s.cfg.LeaseTTL)
	if err != nil {
		return nil, err
	}
	def, ok := s.defs[inst.Workflow]
	if !ok {
		// Another node may run it; give the lease back.
		_, rerr := s.store.Apply(s.ctx, persistence.Step{Instance: id, Epoch: inst.LeaseEpoch, ReleaseLease: true})
		return nil, errors.Join(fmt.Errorf("%w: %q (instance %s)", ErrUnknownWorkflow, inst.Workflow, id), rerr)
	}
	hist, err := s.store.History(s.ctx, id, 0)
	if err != nil {
		return nil, err
	}
	s.hook(HookEvent{Kind: HookInstanceActivated, Instance: id, Workflow: def.Name()})
	return newActivation(s, def, inst, hist), nil
}

// launch registers a and starts its actor and workflow goroutine. The caller
// must have done s.runs.Add(1) for the start (wake/spawn); launch adds its own.
func (s *System) launch(a *activation) {
	// The actor exists before anyone can find the activation, so that
	// signal never sees a half-made one.
	a.pid = s.actors.Root.Spawn(protoactor.PropsFromProducer(func() protoactor.Actor { return &shell{a: a} }))
	s.mu.Lock()
	if s.stopping {
		delete(s.starting, a.id)
		s.mu.Unlock()
		s.actors.Root.Stop(a.pid)
		_, _ = s.store.Apply(context.Background(), persistence.Step{Instance: a.id, Epoch: a.epoch, ReleaseLease: true})
		return
	}
	delete(s.starting, a.id)
	s.acts[a.id] = a
	s.runs.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.runs.Done()
		a.run()
	}()
}

// ended is called by an activation's goroutine as it exits.
func (s *System) ended(a *activation, finished bool) {
	s.mu.Lock()
	if s.acts[a.id] == a {
		delete(s.acts, a.id)
	}
	rewake := a.rewake && !finished
	var ws []chan persistence.Instance
	if finished {
		ws = s.waiters[a.id]
		delete(s.waiters, a.id)
	}
	s.mu.Unlock()
	if a.pid != nil {
		s.actors.Root.Stop(a.pid)
	}
	for _, w := range ws {
		w <- a.final // buffered: the waiter may have gone
	}
	if rewake {
		s.wake(a.id)
	}
}

// wakeLater wakes id after d, unless the System stops first.
func (s *System) wakeLater(id string, d time.Duration) {
	s.goBG(func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-s.ctx.Done():
		case <-t.C:
			s.wake(id)
		}
	})
}

// afterCommit wakes the instances a committed step gave mail and hands its
// timers to the timer service.
func (s *System) afterCommit(self string, step *persistence.Step, res persistence.StepResult) {
	for _, t := range step.AddTimers {
		t.Instance = self
		s.timers.Schedule(t)
	}
	var last string
	for _, id := range res.Woken {
		if id == self || id == last {
			continue
		}
		last = id
		s.wake(id)
	}
}

// waitEnd returns a channel closed when a local activation of id finishes.
func (s *System) waitEnd(id string) chan persistence.Instance {
	c := make(chan persistence.Instance, 1)
	s.mu.Lock()
	s.waiters[id] = append(s.waiters[id], c)
	s.mu.Unlock()
	return c
}

func (s *System) dropWaiter(id string, c chan persistence.Instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.waiters[id]
	for i, w := range ws {
		if w == c {
			s.waiters[id] = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(s.waiters[id]) == 0 {
		delete(s.waiters, id)
	}
}

// newSortableID starts with the time so that instances created together sit
// together in the store's indexes (one page touched per batch, not one per
// instance), and ends with randomness so that nodes do not collide.
func newSortableID() string {
	return fmt.Sprintf("%011x", time.Now().UnixMilli()) + randomHex(6)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// shell is the protoactor actor of an activation: the activation's address
// for signals (wake, cancel, stop), which it hands to the workflow goroutine.
type shell struct{ a *activation }

func (sh *shell) Receive(c protoactor.Context) {
	if sig, ok := c.Message().(signal); ok {
		sh.a.deliver(sig)
	}
}

// encode turns v into its stored form with the node's codec.
func (s *System) encode(v any) ([]byte, error) { return encodeWith(s.codec, v) }
