package actor_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// A message published on a competing channel wakes one parked consumer, not
// all of them. These tests land a publish at each point where that wake can
// be lost and check, from the store, that the message is still consumed,
// once. Nothing polls: RecoveryInterval and PassivateAfter are an hour
// unless the test is about passivation, so a lost wake leaves the message
// waiting and the test fails on its deadline.

// queueConsumer subscribes to channel "jobs" competitively and receives
// for ever (until cancelled).
var queueConsumer = actor.Workflow("queue-consumer", func(ctx *actor.Context, _ int) (int, error) {
	if err := ctx.Subscribe("jobs", mailbox.Competing); err != nil {
		return 0, err
	}
	for n := 0; ; n++ {
		if _, err := actor.Receive[int](ctx, mailbox.OnChannel("jobs")); err != nil {
			return n, err
		}
	}
})

// parkCounter counts, per instance, the parks after a mailbox read found
// nothing.
type parkCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (p *parkCounter) inc(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == nil {
		p.n = map[string]int{}
	}
	p.n[id]++
	return p.n[id]
}

func (p *parkCounter) get(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[id]
}

// spawnConsumers starts n queue consumers and waits until each has
// subscribed.
func spawnConsumers(t *testing.T, ctx context.Context, sys *actor.System, n int) []actor.PID {
	t.Helper()
	var pids []actor.PID
	for i := range n {
		pid, err := actor.Spawn(ctx, sys, queueConsumer, i, actor.WithID(fmt.Sprintf("consumer-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	testutil.Eventually(t, 30*time.Second, "consumers subscribed", func() bool {
		return channelStat(t, sys, "jobs").Subscribers == n
	})
	return pids
}

// consumedOnce checks from the store that every message in ids was
// received exactly once by the consumers, and nothing else.
func consumedOnce(t *testing.T, sys *actor.System, pids []actor.PID, ids map[string]bool) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("%d messages consumed", len(ids)), func() bool {
		n := 0
		for _, pid := range pids {
			n += len(receivedRefs(inspect(t, sys, pid).History))
		}
		return n >= len(ids)
	})
	seen := map[string]actor.PID{}
	for _, pid := range pids {
		for _, ref := range receivedRefs(inspect(t, sys, pid).History) {
			if !ids[ref] {
				t.Fatalf("%s received %s, which was not published", pid, ref)
			}
			if other, dup := seen[ref]; dup {
				t.Fatalf("message %s consumed by %s and %s", ref, other, pid)
			}
			seen[ref] = pid
		}
	}
	if len(seen) != len(ids) {
		t.Fatalf("%d of %d messages consumed", len(seen), len(ids))
	}
}

// TestQueuedPublishBetweenCheckAndPark: a publish committed after a
// consumer read its mailbox and found nothing, or decided it need not look
// (no message was left for busy consumers since it last waited), but
// before it parks, still wakes it (or another consumer), or is handed to
// it: the consumer registers before it reads. The fetcher serves the
// consumers by claims (as on a store with several writers), or by mailbox
// reads but on a backlog (SQLite's way); with batch > 1 the publishes come
// in batches, so that a backlog builds and claims and reads meet; with
// hand they are single Publish calls, which hand the message to a
// registered consumer.
func TestQueuedPublishBetweenCheckAndPark(t *testing.T) {
	for _, tc := range []struct {
		consumers, batch int
		claims, hand     bool
	}{{1, 1, true, false}, {3, 1, true, false}, {1, 1, false, false}, {3, 1, false, false}, {3, 3, false, false},
		{1, 1, true, true}, {3, 1, true, true}, {3, 1, false, true},
		// More consumers than a queued message names (the rest are found
		// by the router's own list).
		{persistence.MaxQueuedSubscribers + 8, 3, false, false}, {persistence.MaxQueuedSubscribers + 8, 1, true, false}} {
		t.Run(fmt.Sprintf("consumers=%d,batch=%d,claims=%v,hand=%v", tc.consumers, tc.batch, tc.claims, tc.hand), func(t *testing.T) {
			consumers := tc.consumers
			messages := 20 * tc.batch
			base := testutil.OpenSQLite(t, testutil.SQLitePath(t))
			in := &testutil.InterceptStore{Store: base}
			var sys *actor.System
			var mu sync.Mutex
			ids := map[string]bool{}
			var fired, published atomic.Int64
			ctx := testutil.Ctx(t, 2*time.Minute)
			// Every read of a consumer that found nothing (its mailbox,
			// or the fetcher's claim for it) publishes one message as the
			// read returns, before the consumer looks at what it read and
			// parks, and so does every park in a receive, until all are
			// out.
			emptyRead := func(consumer string, found int, rerr error) {
				if found > 0 || rerr != nil || !strings.HasPrefix(consumer, "consumer-") {
					return
				}
				k := int(fired.Add(1))
				if k > messages/tc.batch {
					return
				}
				var outs []actor.Outgoing
				for i := range tc.batch {
					outs = append(outs, actor.Outgoing{Channel: "jobs", Message: k*tc.batch + i})
				}
				var got []string
				var err error
				if tc.hand {
					var id string
					id, err = sys.Publish(ctx, "jobs", k)
					got = []string{id}
				} else {
					got, err = sys.PublishBatch(ctx, outs)
				}
				if err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				mu.Lock()
				for _, id := range got {
					ids[id] = true
				}
				mu.Unlock()
				published.Add(int64(len(got)))
			}
			in.AfterMailbox = func(consumer string, msgs []persistence.Message, rerr error) { emptyRead(consumer, len(msgs), rerr) }
			in.AfterClaimQueue = func(_ string, consumers []string, qc persistence.QueueClaim, rerr error) {
				emptyRead(consumers[0], len(qc.Messages), rerr)
			}
			parks := actor.WatchParks(nil)
			parks.OnPark(func(id string) { emptyRead(id, 0, nil) })
			sys = testutil.StartNode(t, actor.Config{Store: testutil.Notify(in, base), Workflows: actor.Register(queueConsumer),
				PassivateAfter: time.Hour, RecoveryInterval: time.Hour, Hooks: parks})
			sys.FetchByClaims(tc.claims)
			pids := spawnConsumers(t, ctx, sys, consumers)
			// Wait for the publishes to return, not only to start: a
			// consumer may take a message before its publisher records it.
			testutil.Eventually(t, 30*time.Second, "all messages published", func() bool { return published.Load() == int64(messages) })
			mu.Lock()
			defer mu.Unlock()
			consumedOnce(t, sys, pids, ids)
		})
	}
}

// TestQueuedWakePassedOn: the consumer a message woke stops before it reads
// its mailbox again; the wake goes to the other consumer, which takes the
// message.
//
// Consumer x is woken by a direct message its receive (on "jobs") does not
// take, and its read is held as it returns; a publish then finds x waiting
// (it registers before it reads) and y passivated, so it wakes x alone.
// x is stopped before its read returns: the message's wake must reach y.
func TestQueuedWakePassedOn(t *testing.T) {
	base := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	in := &testutil.InterceptStore{Store: base}
	passivated := make(chan string, 16)
	var armed atomic.Pointer[string] // x, once it is to be held
	inRead, release := make(chan struct{}), make(chan struct{})
	in.AfterMailbox = func(id string, _ []persistence.Message, _ error) {
		if x := armed.Load(); x != nil && id == *x && armed.CompareAndSwap(x, nil) {
			close(inRead)
			<-release
		}
	}
	sys := testutil.StartNode(t, actor.Config{Store: testutil.Notify(in, base), Workflows: actor.Register(queueConsumer),
		PassivateAfter: 20 * time.Millisecond, RecoveryInterval: time.Hour,
		Hooks: hookFunc(func(e actor.HookEvent) {
			if e.Kind == actor.HookInstancePassivated {
				passivated <- e.Instance
			}
		})})
	ctx := testutil.Ctx(t, 2*time.Minute)
	pids := spawnConsumers(t, ctx, sys, 2)
	for gone := map[string]bool{}; len(gone) < 2; {
		select {
		case id := <-passivated:
			gone[id] = true
		case <-ctx.Done():
			t.Fatal("the consumers never passivated")
		}
	}
	x, y := pids[0], pids[1]
	xs := string(x)
	armed.Store(&xs)
	if err := sys.Send(ctx, x, 0); err != nil { // not on "jobs": wakes x, is not taken
		t.Fatal(err)
	}
	select {
	case <-inRead:
	case <-ctx.Done():
		t.Fatal("x never read its mailbox")
	}
	id, err := sys.Publish(ctx, "jobs", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !sys.StopActivation(string(x)) {
		t.Fatalf("woken consumer %s has no activation to stop", x)
	}
	close(release)
	testutil.Eventually(t, 30*time.Second, "message consumed", func() bool {
		return channelStat(t, sys, "jobs").Waiting == 0
	})
	if refs := receivedRefs(inspect(t, sys, x).History); len(refs) != 0 {
		t.Fatalf("the stopped consumer %s received %v", x, refs)
	}
	if refs := receivedRefs(inspect(t, sys, y).History); len(refs) != 1 || refs[0] != id {
		t.Fatalf("the other consumer %s received %v, want [%s]", y, refs, id)
	}
}

// TestQueuedPublishDuringStart: consumers that passivated are woken by a
// publish; while an activation starts, more messages are published. They
// are all taken, once each, on both stores (the woken node hears of the
// later messages through its own commits on SQLite, through LISTEN on
// PostgreSQL), by one consumer alone or by several.
func TestQueuedPublishDuringStart(t *testing.T) {
	for _, store := range []string{"sqlite", "postgres"} {
		for _, consumers := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/consumers=%d", store, consumers), func(t *testing.T) {
				var base persistence.Store
				if store == "sqlite" {
					base = testutil.OpenSQLite(t, testutil.SQLitePath(t))
				} else {
					base = openPostgres(t, testutil.PostgresURL(t))
				}
				testQueuedPublishDuringStart(t, base, consumers)
			})
		}
	}
}

func testQueuedPublishDuringStart(t *testing.T, base persistence.Store, consumers int) {
	const rounds = 5
	in := &testutil.InterceptStore{Store: base}
	var launching atomic.Pointer[func()]
	// hooking is held (read) while a hook runs onLaunch, so that the test
	// can stop the publishes and wait for those under way.
	var hooking sync.RWMutex
	var mu sync.Mutex
	live := map[string]bool{} // consumers with an activation
	in.AfterHistoryRange = func(id string, from int64, _ []persistence.Event, err error) {
		// A spawn launches its activation without reading history: each
		// read from the start is a passivated consumer coming back, which
		// has loaded its instance and is about to start.
		if from != 0 || err != nil {
			return
		}
		mu.Lock()
		live[id] = true
		mu.Unlock()
		hooking.RLock()
		defer hooking.RUnlock()
		if fn := launching.Load(); fn != nil {
			(*fn)()
		}
	}
	sys := testutil.StartNode(t, actor.Config{Store: testutil.Notify(in, base), Workflows: actor.Register(queueConsumer),
		PassivateAfter: 10 * time.Millisecond, RecoveryInterval: time.Hour,
		Hooks: hookFunc(func(e actor.HookEvent) {
			if e.Kind == actor.HookInstancePassivated {
				mu.Lock()
				delete(live, e.Instance)
				mu.Unlock()
			}
		})})
	ctx := testutil.Ctx(t, 2*time.Minute)
	ids := map[string]bool{}
	publish := func(v int) {
		id, err := sys.Publish(ctx, "jobs", v)
		if err != nil {
			t.Errorf("publish: %v", err)
			return
		}
		mu.Lock()
		ids[id] = true
		mu.Unlock()
	}
	var launches atomic.Int64
	onLaunch := func() {
		n := launches.Add(1)
		publish(int(1000 + n))
		publish(int(2000 + n))
	}
	mu.Lock()
	for i := range consumers {
		live[fmt.Sprintf("consumer-%d", i)] = true // spawned below, live until they passivate
	}
	mu.Unlock()
	pids := spawnConsumers(t, ctx, sys, consumers)
	launching.Store(&onLaunch)
	for r := range rounds {
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("round %d: every consumer passivated", r), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(live) == 0
		})
		before := launches.Load()
		publish(r)
		testutil.Eventually(t, 30*time.Second, "queue drained", func() bool {
			return channelStat(t, sys, "jobs").Waiting == 0
		})
		if launches.Load() == before {
			t.Fatalf("round %d: the publish woke no passivated consumer", r)
		}
	}
	// No more publishes from starting consumers (one could still wake
	// another): what was published is what must be consumed, and none
	// runs once the test is over and its context gone.
	hooking.Lock()
	launching.Store(nil)
	hooking.Unlock()
	mu.Lock()
	published := maps.Clone(ids)
	mu.Unlock()
	if want := rounds + 2*int(launches.Load()); len(published) != want {
		t.Fatalf("published %d messages, want %d", len(published), want)
	}
	consumedOnce(t, sys, pids, published)
}

// TestQueuedPublishDuringStop: messages published while the node stops
// are consumed, once, by the node that comes after it on the same store;
// with more consumers than a queued message names too.
func TestQueuedPublishDuringStop(t *testing.T) {
	for _, consumers := range []int{4, persistence.MaxQueuedSubscribers + 8} {
		t.Run(fmt.Sprintf("consumers=%d", consumers), func(t *testing.T) { testQueuedPublishDuringStop(t, consumers) })
	}
}

func testQueuedPublishDuringStop(t *testing.T, consumers int) {
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	cfg := actor.Config{Store: st, Workflows: actor.Register(queueConsumer), NodeID: "n1",
		PassivateAfter: time.Hour, RecoveryInterval: time.Hour}
	sys := testutil.StartNode(t, cfg)
	ctx := testutil.Ctx(t, 2*time.Minute)
	pids := spawnConsumers(t, ctx, sys, consumers)

	var mu sync.Mutex
	ids := map[string]bool{}
	var published atomic.Int64
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id, err := sys.Publish(ctx, "jobs", p*100000+i)
				if errors.Is(err, actor.ErrStopped) {
					return
				}
				if err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				mu.Lock()
				ids[id] = true
				mu.Unlock()
				published.Add(1)
			}
		}()
	}
	testutil.Eventually(t, 30*time.Second, "publishing under way", func() bool { return published.Load() >= 50 })
	if err := sys.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	cfg.NodeID = "n2"
	sys2 := testutil.StartNode(t, cfg)
	mu.Lock()
	defer mu.Unlock()
	consumedOnce(t, sys2, pids, ids)
	if s := channelStat(t, sys2, "jobs"); s.Waiting != 0 {
		t.Fatalf("after the restart %d messages still wait", s.Waiting)
	}
}

// unansweredClaims is a store whose ClaimQueue commits but, for the first
// few claims that moved messages, answers with an error, as a connection
// lost after the commit would.
type unansweredClaims struct {
	persistence.Store
	left atomic.Int64 // claims still to answer with an error
	lost atomic.Int64 // messages moved by those claims
}

func (s *unansweredClaims) ClaimQueue(ctx context.Context, owner, channel string, types, consumers []string) (persistence.QueueClaim, error) {
	qc, err := s.Store.ClaimQueue(ctx, owner, channel, types, consumers)
	if err == nil && len(qc.Messages) > 0 && s.left.Add(-1) >= 0 {
		s.lost.Add(int64(len(qc.Messages)))
		return persistence.QueueClaim{}, errors.New("connection lost after the commit")
	}
	return qc, err
}

// TestFetchedClaimUnanswered: messages the fetcher claimed for a consumer
// whose answer was lost wait in the consumer's mailbox, and the consumer
// takes them from there: every message is consumed once, none waits.
func TestFetchedClaimUnanswered(t *testing.T) {
	t.Parallel()
	const messages = 60
	base := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	st := &unansweredClaims{Store: base}
	st.left.Store(5)
	sys := testutil.StartNode(t, actor.Config{Store: testutil.Notify(st, base), Workflows: actor.Register(queueConsumer),
		PassivateAfter: time.Hour, RecoveryInterval: time.Hour})
	sys.FetchByClaims(true)
	ctx := testutil.Ctx(t, 2*time.Minute)
	pids := spawnConsumers(t, ctx, sys, 3)
	ids := map[string]bool{}
	// In batches: a single Publish would be handed to an idle consumer,
	// with no claim.
	for i := 0; i < messages; i += 5 {
		var outs []actor.Outgoing
		for j := range 5 {
			outs = append(outs, actor.Outgoing{Channel: "jobs", Message: i + j})
		}
		got, err := sys.PublishBatch(ctx, outs)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range got {
			ids[id] = true
		}
	}
	consumedOnce(t, sys, pids, ids)
	if st.lost.Load() == 0 {
		t.Fatal("no claim's answer was lost: the test did not exercise the fetcher")
	}
	if s := channelStat(t, sys, "jobs"); s.Waiting != 0 {
		t.Fatalf("%d messages still waiting", s.Waiting)
	}
}

// TestFetchReadsWithoutBacklog: on a single-writer store (SQLite) a
// consumer that takes messages as they come, one at a time, is served by
// mailbox reads whose consume claims the message in the same write: no
// ClaimQueue, which would be a turn of the writer of its own, and one
// consuming write per message.
func TestFetchReadsWithoutBacklog(t *testing.T) {
	t.Parallel()
	const messages = 10
	base := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	in := &testutil.InterceptStore{Store: base}
	var claims, writes atomic.Int64
	var stepsMu sync.Mutex
	var steps []string
	in.AfterClaimQueue = func(string, []string, persistence.QueueClaim, error) { claims.Add(1) }
	in.AfterApply = func(step persistence.Step, _ persistence.StepResult, err error) {
		if step.Instance == "consumer-0" && len(step.Consume) > 0 && err == nil {
			writes.Add(1)
			stepsMu.Lock()
			steps = append(steps, fmt.Sprintf("%+v", step))
			stepsMu.Unlock()
		}
	}
	sys := testutil.StartNode(t, actor.Config{Store: testutil.Notify(in, base), Workflows: actor.Register(queueConsumer),
		PassivateAfter: time.Hour, RecoveryInterval: time.Hour})
	ctx := testutil.Ctx(t, 2*time.Minute)
	pids := spawnConsumers(t, ctx, sys, 1)
	testutil.Eventually(t, 30*time.Second, "the consumer waiting", func() bool {
		return inspect(t, sys, pids[0]).Status == persistence.StatusWaiting
	})
	w0 := writes.Load()
	ids := map[string]bool{}
	for i := range messages {
		id, err := sys.Publish(ctx, "jobs", i)
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("message %d consumed", i), func() bool {
			return len(receivedRefs(inspect(t, sys, pids[0]).History)) == i+1
		})
	}
	consumedOnce(t, sys, pids, ids)
	if n := claims.Load(); n != 0 {
		t.Errorf("%d claims ahead of consumes; want none", n)
	}
	if n := writes.Load() - w0; n != messages {
		stepsMu.Lock()
		t.Errorf("the consumer consumed in %d writes for %d messages:\n%s", n, messages, strings.Join(steps, "\n"))
		stepsMu.Unlock()
	}
}

// TestFetchClaimWaitsForReads: on a single-writer store, once a backlog
// is seen the next ask is served by a claim, which must not run beside a
// consumer's mailbox read under way (it could move the message that
// consumer is about to take): the ask waits, and the read's end hands it
// the lead. Consumer x's read is held as it returns; y reads, takes a
// message, sees more and asks again, and must wait; x is then stopped
// and its read ends, so that no later ask of x's can serve y: the read's
// end must. Every message is consumed once.
func TestFetchClaimWaitsForReads(t *testing.T) {
	t.Parallel()
	const messages = 4
	base := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	in := &testutil.InterceptStore{Store: base}
	var armed atomic.Bool
	var held atomic.Pointer[string]
	inRead, release := make(chan struct{}), make(chan struct{})
	in.AfterMailbox = func(id string, msgs []persistence.Message, _ error) {
		if len(msgs) > 0 && armed.CompareAndSwap(true, false) {
			held.Store(&id)
			close(inRead)
			<-release
		}
	}
	var claims atomic.Int64
	in.AfterClaimQueue = func(string, []string, persistence.QueueClaim, error) { claims.Add(1) }
	sys := testutil.StartNode(t, actor.Config{Store: testutil.Notify(in, base), Workflows: actor.Register(queueConsumer),
		PassivateAfter: time.Hour, RecoveryInterval: time.Hour})
	ctx := testutil.Ctx(t, 2*time.Minute)
	pids := spawnConsumers(t, ctx, sys, 2)
	testutil.Eventually(t, 30*time.Second, "both consumers waiting", func() bool {
		return inspect(t, sys, pids[0]).Status == persistence.StatusWaiting && inspect(t, sys, pids[1]).Status == persistence.StatusWaiting
	})
	armed.Store(true)
	var outs []actor.Outgoing
	for i := range messages {
		outs = append(outs, actor.Outgoing{Channel: "jobs", Message: i})
	}
	got, err := sys.PublishBatch(ctx, outs)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, id := range got {
		ids[id] = true
	}
	select {
	case <-inRead:
	case <-ctx.Done():
		t.Fatal("no consumer read the published messages")
	}
	x := actor.PID(*held.Load())
	y := pids[0]
	if y == x {
		y = pids[1]
	}
	testutil.Eventually(t, 30*time.Second, "the other consumer waiting for the read to end", func() bool {
		return sys.FetchWaiting("jobs") == 1 && len(receivedRefs(inspect(t, sys, y).History)) == 1
	})
	if n := claims.Load(); n != 0 {
		t.Fatalf("%d claims while a read was under way", n)
	}
	if !sys.StopActivation(string(x)) {
		t.Fatalf("%s has no live activation", x)
	}
	close(release)
	consumedOnce(t, sys, pids, ids)
	if claims.Load() == 0 {
		t.Fatal("no claim after the backlog: the test did not reach the wait")
	}
}

// takeOneConsumer takes one message from the competing channel "jobs",
// then sleeps: it stays subscribed, but waits for nothing the queue has.
var takeOneConsumer = actor.Workflow("take-one", func(ctx *actor.Context, _ int) (int, error) {
	if err := ctx.Subscribe("jobs", mailbox.Competing); err != nil {
		return 0, err
	}
	m, err := actor.Receive[int](ctx, mailbox.OnChannel("jobs"))
	if err != nil {
		return 0, err
	}
	return m.Value, ctx.Sleep(time.Hour)
})

// TestQueuedMessagesReachConsumersTheyDoNotName: the store names a bounded
// number of a channel's competing subscribers with each queued message
// (persistence.MaxQueuedSubscribers). A batch on a channel with more
// consumers than that names the same ones for every message; each consumer
// takes one message and then sleeps, so the named ones are soon all busy,
// and the rest of the batch must reach the consumers waiting on this node
// that no message named. Nothing polls, so a message no one is woken for
// waits, and the test fails on its deadline.
func TestQueuedMessagesReachConsumersTheyDoNotName(t *testing.T) {
	const n = 2*persistence.MaxQueuedSubscribers + 8
	for _, store := range batchStores {
		t.Run(store.name, func(t *testing.T) {
			sys := testutil.StartNode(t, actor.Config{Store: store.open(t), Workflows: actor.Register(takeOneConsumer),
				PassivateAfter: time.Hour, RecoveryInterval: time.Hour})
			ctx := testutil.Ctx(t, 2*time.Minute)
			var pids []actor.PID
			for i := range n {
				pid, err := actor.Spawn(ctx, sys, takeOneConsumer, i)
				if err != nil {
					t.Fatal(err)
				}
				pids = append(pids, pid)
			}
			testutil.Eventually(t, 30*time.Second, "consumers subscribed", func() bool {
				return channelStat(t, sys, "jobs").Subscribers == n
			})
			batch := make([]actor.Outgoing, n)
			for i := range batch {
				batch[i] = actor.Outgoing{Channel: "jobs", Message: i}
			}
			sent, err := sys.PublishBatch(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]bool{}
			for _, id := range sent {
				ids[id] = true
			}
			consumedOnce(t, sys, pids, ids)
		})
	}
}
