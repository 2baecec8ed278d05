package actor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// A message published on this node while one of its consumers waits idle
// on the channel is handed to that consumer: the publish puts it straight
// into the consumer's mailbox and the consumer takes it without a claim or
// a mailbox read. These tests check that it happens, and land the events
// that can meet a hand-off (the consumer stopping, the node stopping, a
// mailbox read taking the message first, a publish whose answer is lost)
// between the pick of the consumer and the publish's commit, or between
// the commit and the hand-over.

// waitIdle waits until every consumer is parked, registered for a
// hand-off.
func waitIdle(t *testing.T, sys *actor.System, pids []actor.PID) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "consumers waiting", func() bool {
		for _, pid := range pids {
			if inspect(t, sys, pid).Status != persistence.StatusWaiting {
				return false
			}
		}
		return true
	})
}

// TestPublishHandsToIdleConsumer: messages published one at a time while
// a consumer waits are each handed to a consumer (the publish names it and
// Deliver reports one listener, not a queue), and the consumers take them
// without a claim or a mailbox read, once each; with the fetcher serving
// by claims (as on PostgreSQL) and by reads (SQLite), and on PostgreSQL.
func TestPublishHandsToIdleConsumer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		open   func(*testing.T) persistence.Store
		claims bool
		// looks the consumers may make anyway: PostgreSQL's listeners
		// rescan once they are connected (a notification gap), which
		// makes each live consumer look once per rescan, at moments the
		// test cannot see. Far fewer than the messages: a look for each
		// would mean the hand-offs spared no claim.
		rescan int
	}{
		{"sqlite,claims", func(t *testing.T) persistence.Store { return testutil.OpenSQLite(t, testutil.SQLitePath(t)) }, true, 0},
		{"sqlite,reads", func(t *testing.T) persistence.Store { return testutil.OpenSQLite(t, testutil.SQLitePath(t)) }, false, 0},
		{"postgres", func(t *testing.T) persistence.Store { return openPostgres(t, testutil.PostgresURL(t)) }, true, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const messages = 20
			base := tc.open(t)
			in := &testutil.InterceptStore{Store: base}
			var handTo, looks atomic.Int64
			in.BeforeApply = func(_ context.Context, step persistence.Step) {
				for _, m := range step.Send {
					if m.HandTo != "" {
						handTo.Add(1)
					}
				}
			}
			in.AfterClaimQueue = func(string, []string, persistence.QueueClaim, error) { looks.Add(1) }
			in.AfterMailbox = func(string, []persistence.Message, error) { looks.Add(1) }
			consumed := make(chan string, messages)
			sys := testutil.StartNode(t, actor.Config{Store: testutil.Notify(in, base), Workflows: actor.Register(queueConsumer),
				PassivateAfter: time.Hour, RecoveryInterval: time.Hour,
				Hooks: hookFunc(func(e actor.HookEvent) {
					if e.Kind == actor.HookMessageConsumed {
						consumed <- e.Ref
					}
				})})
			sys.FetchByClaims(tc.claims)
			ctx := testutil.Ctx(t, 2*time.Minute)
			pids := spawnConsumers(t, ctx, sys, 2)
			waitIdle(t, sys, pids) // reads mailboxes (Inspect): before the count starts
			looks0 := looks.Load()
			ids := map[string]bool{}
			for i := range messages {
				sent, err := sys.Deliver(ctx, actor.Outgoing{Channel: "jobs", Message: i})
				if err != nil {
					t.Fatal(err)
				}
				if sent.Listeners != 1 || sent.Queued {
					// Which side missed it: no consumer picked (none
					// registered idle), or the store declined the hand-off
					// (the consumer's lease, say, had run out in the store).
					t.Fatalf("message %d: %+v, want it handed to one consumer (%d of %d publishes named a consumer)",
						i, sent, handTo.Load(), i+1)
				}
				ids[sent.ID] = true
				// One at a time: the other consumer waits meanwhile.
				select {
				case ref := <-consumed:
					if ref != sent.ID {
						t.Fatalf("consumed %s, want %s", ref, sent.ID)
					}
				case <-ctx.Done():
					t.Fatalf("message %d never consumed", i)
				}
			}
			if n := looks.Load() - looks0; n > int64(tc.rescan) {
				t.Errorf("the consumers made %d claims or mailbox reads for %d handed messages; want at most %d", n, messages, tc.rescan)
			}
			if n := handTo.Load(); n != messages {
				t.Errorf("%d of %d publishes named a consumer", n, messages)
			}
			consumedOnce(t, sys, pids, ids)
		})
	}
}

// handHold is a store that holds the first publish naming a consumer
// before it is applied (held, then released by closing release), or runs
// after its commit and before its answer.
type handHold struct {
	*testutil.InterceptStore
	once    sync.Once
	to      chan string // the consumer named, once held
	release chan struct{}
}

func newHandHold(base persistence.Store, after bool) *handHold {
	h := &handHold{InterceptStore: &testutil.InterceptStore{Store: base}, to: make(chan string, 1), release: make(chan struct{})}
	hold := func(step persistence.Step) {
		for _, m := range step.Send {
			if m.HandTo != "" {
				h.once.Do(func() {
					h.to <- m.HandTo
					<-h.release
				})
			}
		}
	}
	if after {
		h.AfterApply = func(step persistence.Step, _ persistence.StepResult, _ error) { hold(step) }
	} else {
		h.BeforeApply = func(_ context.Context, step persistence.Step) { hold(step) }
	}
	return h
}

// raceEvent runs while a publish that named consumer is held; the
// function it returns runs once the publish has returned, and gives the
// system to check from (another node on the same store, after a stop).
type raceEvent func(e raceEnv) func() *actor.System

// raceEnv is what a raceEvent acts on.
type raceEnv struct {
	t          *testing.T
	ctx        context.Context
	sys        *actor.System
	consumer   string
	cfg        actor.Config
	passivated <-chan string // instances as they passivate
	// sawHanded counts the consumer's mailbox reads that returned a
	// message on "jobs" addressed to it (the handed one, committed).
	sawHanded *atomic.Int64
}

// TestHandOffRaces lands an event between the pick of an idle consumer
// and the publish's commit (before), or between the commit and the
// hand-over (after). Every message is consumed once, none waits, and no
// activation crashes over it.
func TestHandOffRaces(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		after     bool
		event     raceEvent
		passivate bool
	}{
		{"consumer stops before the commit", false, stopConsumer, false},
		{"consumer passivates before the commit", false, passivates, true},
		{"consumer passivates after the commit", true, passivates, true},
		{"node stops before the commit", false, stopNodeHeld, false},
		{"node stops after the commit", true, stopNodeHeld, false},
		{"mailbox read sees it first", true, readFirst, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := testutil.OpenSQLite(t, testutil.SQLitePath(t))
			h := newHandHold(base, tc.after)
			var sawHanded atomic.Int64
			var named atomic.Value // the consumer the held publish named
			h.AfterMailbox = func(id string, msgs []persistence.Message, _ error) {
				if c, _ := named.Load().(string); c == "" || id != c {
					return
				}
				for _, m := range msgs {
					if m.Channel == "jobs" && m.Target == id {
						sawHanded.Add(1)
						return
					}
				}
			}
			var restarts atomic.Int64
			var passivating atomic.Bool
			passivated := make(chan string, 16)
			cfg := actor.Config{Store: testutil.Notify(h, base), Workflows: actor.Register(queueConsumer), NodeID: "n1",
				PassivateAfter: time.Hour, RecoveryInterval: time.Hour,
				Hooks: hookFunc(func(e actor.HookEvent) {
					switch e.Kind {
					case actor.HookInstanceRestarted:
						restarts.Add(1)
					case actor.HookInstancePassivated:
						if passivating.Load() {
							passivated <- e.Instance
						}
					}
				})}
			if tc.passivate {
				// The consumers park for good first (so that one is
				// picked), then passivate once idle for this long.
				cfg.PassivateAfter = 300 * time.Millisecond
				passivating.Store(true)
			}
			sys := testutil.StartNode(t, cfg)
			ctx := testutil.Ctx(t, 2*time.Minute)
			pids := spawnConsumers(t, ctx, sys, 2)
			waitIdle(t, sys, pids)

			type result struct {
				id  string
				err error
			}
			done := make(chan result, 1)
			go func() {
				id, err := sys.Publish(ctx, "jobs", 1)
				done <- result{id, err}
			}()
			var consumer string
			select {
			case consumer = <-h.to:
			case <-ctx.Done():
				t.Fatal("no publish named a consumer")
			}
			named.Store(consumer)
			then := tc.event(raceEnv{t: t, ctx: ctx, sys: sys, consumer: consumer, cfg: cfg, passivated: passivated, sawHanded: &sawHanded})
			close(h.release)
			r := <-done
			if r.err != nil {
				t.Fatalf("publish: %v", r.err)
			}
			check := then()
			// One more message after the event, from the node that checks.
			id, err := check.Publish(ctx, "jobs", 2)
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]bool{r.id: true, id: true}
			consumedOnce(t, check, pids, ids)
			testutil.Eventually(t, 30*time.Second, "nothing waits", func() bool {
				return channelStat(t, check, "jobs").Waiting == 0
			})
			if n := restarts.Load(); n != 0 {
				t.Fatalf("%d restarts after a crash", n)
			}
		})
	}
}

// stopConsumer stops the consumer's activation, as a lost lease does,
// and waits for it to end: the hand-off's wake starts a new one, which
// finds the message in its mailbox. (Its lease stays with this node, so
// the store still takes the hand-off; a lease really lost to another node
// would make the publish queue the message.)
func stopConsumer(e raceEnv) func() *actor.System {
	if !e.sys.StopActivation(e.consumer) {
		e.t.Fatalf("%s has no live activation", e.consumer)
	}
	testutil.Eventually(e.t, 30*time.Second, "the activation ended", func() bool {
		return !inspect(e.t, e.sys, actor.PID(e.consumer)).Active
	})
	return func() *actor.System { return e.sys }
}

// passivates waits for the consumer picked to passivate.
func passivates(e raceEnv) func() *actor.System {
	for {
		select {
		case id := <-e.passivated:
			if id == e.consumer {
				return func() *actor.System { return e.sys }
			}
		case <-e.ctx.Done():
			e.t.Fatalf("%s never passivated", e.consumer)
		}
	}
}

// stopNodeHeld stops the node while the publish is held (Stop waits for
// the publish to return), then starts another on the same store.
func stopNodeHeld(e raceEnv) func() *actor.System {
	stopped := make(chan error, 1)
	go func() { stopped <- e.sys.Stop(e.ctx) }()
	testutil.Eventually(e.t, 30*time.Second, "the node stopping", e.sys.IsStopping)
	return func() *actor.System {
		if err := <-stopped; err != nil {
			e.t.Fatalf("stop: %v", err)
		}
		cfg := e.cfg
		cfg.NodeID, cfg.Hooks = "n2", nil
		return testutil.StartNode(e.t, cfg)
	}
}

// readFirst: a direct message wakes the consumer, whose read (SQLite's
// fetcher serves by reads) finds the handed message in its mailbox before
// the hand-over reaches it. The read must leave it (it is on its way to
// the consumer's hand slot, and taken from there once, when the publish
// returns): had the read taken it and committed, the hand-over would take
// it again.
func readFirst(e raceEnv) func() *actor.System {
	if err := e.sys.Send(e.ctx, actor.PID(e.consumer), "not for jobs"); err != nil {
		e.t.Fatal(err)
	}
	testutil.Eventually(e.t, 30*time.Second, "the consumer reads its mailbox and sees the handed message", func() bool {
		return e.sawHanded.Load() > 0
	})
	// A query is answered from what the consumer has committed: it
	// commits a take it left pending first.
	if _, err := e.sys.Query(e.ctx, actor.PID(e.consumer), "commit-first", nil); !errors.Is(err, actor.ErrUnknownQuery) {
		e.t.Fatalf("query: %v, want ErrUnknownQuery", err)
	}
	if n := len(receivedRefs(inspect(e.t, e.sys, actor.PID(e.consumer)).History)); n != 0 {
		e.t.Fatalf("the consumer took %d messages before the hand-off ended, want none", n)
	}
	return func() *actor.System { return e.sys }
}

// lostHand is a store whose first publish naming a consumer commits but
// answers with an error, as a connection lost after the commit would.
type lostHand struct {
	persistence.Store
	lost atomic.Bool
}

func (s *lostHand) Apply(ctx context.Context, step persistence.Step) (persistence.StepResult, error) {
	res, err := s.Store.Apply(ctx, step)
	if err == nil && len(res.Handed) > 0 && s.lost.CompareAndSwap(false, true) {
		return persistence.StepResult{}, errors.New("connection lost after the commit")
	}
	return res, err
}

// TestHandOffAnswerLost: a publish that handed its message but whose
// answer was lost leaves the message in the consumer's mailbox; the
// consumer, told its mailbox may hold one, takes it from there.
func TestHandOffAnswerLost(t *testing.T) {
	t.Parallel()
	base := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	st := &lostHand{Store: base}
	sys := testutil.StartNode(t, actor.Config{Store: testutil.Notify(st, base), Workflows: actor.Register(queueConsumer),
		PassivateAfter: time.Hour, RecoveryInterval: time.Hour})
	sys.FetchByClaims(true)
	ctx := testutil.Ctx(t, 2*time.Minute)
	pids := spawnConsumers(t, ctx, sys, 1)
	waitIdle(t, sys, pids)
	if _, err := sys.Deliver(ctx, actor.Outgoing{Channel: "jobs", Message: 1, ID: "lost-answer"}); err == nil {
		t.Fatal("the publish whose answer was lost succeeded")
	}
	if !st.lost.Load() {
		t.Fatal("the publish handed nothing: the test did not reach the hand-off")
	}
	consumedOnce(t, sys, pids, map[string]bool{"lost-answer": true})
}

func init() { registerChildRole("hand-off-node", handOffNode) }

// handOffMessages is how many messages TestHandOffKilled publishes.
const handOffMessages = 60

// handOffNode runs three queue consumers and publishes the test's messages
// one at a time, under their fixed IDs (a repeat is a duplicate), so that
// most are handed to an idle consumer; it says "PUB i handed=…" after
// each, then waits to be killed.
func handOffNode() int {
	ctx := context.Background()
	st, err := storeurl.Open(ctx, os.Getenv("NORN_CHILD_STORE"))
	if err != nil {
		return childFail("open store: %v", err)
	}
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(queueConsumer), NodeID: "n1",
		PassivateAfter: time.Hour})
	if err != nil {
		return childFail("start: %v", err)
	}
	for i := range 3 {
		if _, err := actor.Spawn(ctx, sys, queueConsumer, i, actor.WithID(fmt.Sprintf("consumer-%d", i))); err != nil && !errors.Is(err, actor.ErrIDConflict) {
			return childFail("spawn: %v", err)
		}
	}
	for i := range handOffMessages {
		sent, err := sys.Deliver(ctx, actor.Outgoing{Channel: "jobs", Message: i, ID: fmt.Sprintf("m-%02d", i)})
		if err != nil {
			return childFail("publish %d: %v", i, err)
		}
		childSay("PUB %d handed=%v", i, !sent.Queued && !sent.Duplicate)
	}
	select {}
}

// TestHandOffKilled: the node that publishes and hands the messages to its
// consumers is killed -9 at random points (a publish committed and not
// yet handed over, a take not yet committed, a hand-off under way), then
// started again on the same store; at the end every message has been
// consumed exactly once and none waits.
func TestHandOffKilled(t *testing.T) {
	t.Parallel()
	for name, url := range crashStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := url(t)
			handed := 0
			for _, at := range []int{3, 17, 29, 44, handOffMessages} {
				c := startChild(t, "hand-off-node", "NORN_CHILD_STORE="+u)
				for range at {
					if strings.HasSuffix(c.waitLine(t, "PUB ", time.Minute), "handed=true") {
						handed++
					}
				}
				c.kill9(t)
			}
			if handed == 0 {
				t.Fatal("no message was handed to a consumer: the test did not reach the hand-off")
			}
			t.Logf("%d publishes handed their message to a consumer", handed)

			ctx := testutil.Ctx(t, 2*time.Minute)
			st, err := storeurl.Open(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(queueConsumer),
				NodeID: "n1", PassivateAfter: time.Hour, RecoveryInterval: time.Hour})
			ids := map[string]bool{}
			for i := range handOffMessages {
				ids[fmt.Sprintf("m-%02d", i)] = true
			}
			var pids []actor.PID
			for i := range 3 {
				pids = append(pids, actor.PID(fmt.Sprintf("consumer-%d", i)))
			}
			consumedOnce(t, sys, pids, ids)
			testutil.Eventually(t, 30*time.Second, "nothing waits", func() bool {
				return channelStat(t, sys, "jobs").Waiting == 0
			})
		})
	}
}

// TestOverlappingPublishesHandOff: publishes under way at the same moment
// each hand their message to an idle consumer of their own (not only a
// publish alone on its node), and every message is consumed once.
func TestOverlappingPublishesHandOff(t *testing.T) {
	t.Parallel()
	const publishers = 4
	base := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	in := &testutil.InterceptStore{Store: base}
	var arrived, named atomic.Int64
	together := make(chan struct{})
	in.BeforeApply = func(_ context.Context, step persistence.Step) {
		if len(step.Send) != 1 || step.Send[0].Channel != "jobs" {
			return
		}
		if step.Send[0].HandTo != "" {
			named.Add(1)
		}
		// Hold each publish until all are under way.
		if arrived.Add(1) == publishers {
			close(together)
		}
		<-together
	}
	sys := testutil.StartNode(t, actor.Config{Store: testutil.Notify(in, base), Workflows: actor.Register(queueConsumer),
		PassivateAfter: time.Hour, RecoveryInterval: time.Hour})
	ctx := testutil.Ctx(t, 2*time.Minute)
	pids := spawnConsumers(t, ctx, sys, 2*publishers)
	waitIdle(t, sys, pids)
	ids := make(chan string, publishers)
	var wg sync.WaitGroup
	for i := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent, err := sys.Deliver(ctx, actor.Outgoing{Channel: "jobs", Message: i})
			if err != nil {
				t.Error(err)
				return
			}
			if sent.Listeners != 1 || sent.Queued {
				t.Errorf("message %d: %+v, want it handed to one consumer", i, sent)
			}
			ids <- sent.ID
		}()
	}
	wg.Wait()
	close(ids)
	if n := named.Load(); n != publishers {
		t.Fatalf("%d of %d overlapping publishes named a consumer", n, publishers)
	}
	want := map[string]bool{}
	for id := range ids {
		want[id] = true
	}
	consumedOnce(t, sys, pids, want)
}
