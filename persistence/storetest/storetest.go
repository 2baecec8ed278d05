// Package storetest is the conformance suite every persistence driver must
// pass: it checks persistence.Step's specification (each combination of
// Step fields the runtime uses has a case) and the other Store methods,
// including that a method a driver does not support refuses with
// persistence.ErrUnsupported. A driver's test calls Run with a function that opens a fresh, empty
// store (and RunShared with one that opens two stores on one database, for
// drivers that several processes may share):
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) persistence.Store {
//			st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "n.db"), sqlite.Options{})
//			if err != nil { t.Fatal(err) }
//			t.Cleanup(func() { st.Close() })
//			return st
//		})
//	}
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// Factory opens a fresh, empty store for one test; it registers its own
// cleanup. The suite's cases run in parallel, so it is called concurrently.
type Factory func(t *testing.T) persistence.Store

// Run runs the whole suite against stores made by open.
func Run(t *testing.T, open Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, st persistence.Store)
	}{
		{"CreateIsIdempotent", testCreate},
		{"StepErrors", testStepErrors},
		{"StepIsAtomic", testAtomic},
		{"Leases", testLeases},
		{"TakeLease", testTakeLease},
		{"SendByPID", testSend},
		{"Broadcast", testBroadcast},
		{"Competing", testCompeting},
		{"ManySubscribers", testManySubscribers},
		{"ModeConflict", testModeConflict},
		{"SystemChannels", testSystemChannels},
		{"TerminalReleases", testTerminal},
		{"Timers", testTimers},
		{"Runnable", testRunnable},
		{"Buckets", testBuckets},
		{"BucketsAfterRelease", testBucketsAfterRelease},
		{"ReleaseFences", testReleaseFences},
		{"ConcurrentRelease", testConcurrentRelease},
		{"TimerBuckets", testTimerBuckets},
		{"CreateLeaseTTL", testCreateLeaseTTL},
		{"CreateMany", testCreateMany},
		{"CreateManyLeases", testCreateManyLeases},
		{"CreateManyRace", testCreateManyRace},
		{"CreateManyValidation", testCreateManyValidation},
		{"Cancel", testCancel},
		{"ResetHistory", testReset},
		{"ListAndStats", testList},
		{"CountInstances", testCountInstances},
		{"ObserveCommits", testObserveCommits},
		{"ListInstances", testListInstances},
		{"ListWhileChanging", testListWhileChanging},
		{"HistoryRangeAndTimers", testHistoryRangeAndTimers},
		{"ConcurrentSteps", testConcurrentSteps},
		{"CompetingRace", testCompetingRace},
		{"CompetingQueues", testCompetingQueues},
		{"Claim", testClaim},
		{"ClaimQueue", testClaimQueue},
		{"ClaimQueueRace", testClaimQueueRace},
		{"HandTo", testHandTo},
		{"Load", testLoad},
		{"Snapshot", testSnapshot},
		{"LoadsTogether", testLoadsTogether},
		{"EventDigest", testDigest},
		{"MessageType", testMessageType},
		{"Dedupe", testDedupe},
		{"DedupeRace", testDedupeRace},
		{"RestartLog", testRestartLog},
		{"PruneQueue", testPruneQueue},
		{"Validation", testValidation},
		{"OutboxEmit", testOutboxEmit},
		{"OutboxClaim", testOutboxClaim},
		{"OutboxList", testOutboxList},
		{"OutboxRace", testOutboxRace},
		{"OutboxRelease", testOutboxRelease},
		{"OutboxPrune", testOutboxPrune},
		{"Purge", testPurge},
		{"PurgeRows", testPurgeRows},
		{"PurgeParent", testPurgeParent},
		{"PurgeValidation", testPurgeValidation},
		{"PurgeRace", testPurgeRace},
		{"OptionalMethods", testOptional},
		{"ApplyTx", testApplyTx},
		// The combinations of Step fields the runtime uses (combos.go).
		{"StepSpawnUnleased", testSpawnUnleased},
		{"StepTakeLeaseOnly", testTakeLeaseOnly},
		{"StepWorkflow", testWorkflowStep},
		{"StepSubscribeAndPublish", testSubscribeAndPublish},
		{"StepEnd", testEndStep},
		{"StepCompensating", testCompensating},
		{"StepContinueAsNew", testContinueAsNew},
		{"StepShutdownRelease", testShutdownRelease},
		{"StepReopen", testReopen},
		{"StepWaits", testWaits},
		{"StepPublishRun", testPublishRun},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Each case has its own store: they run side by side.
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

// SharedFactory opens two stores on one fresh, empty database, as two
// processes would; it registers their cleanup.
type SharedFactory func(t *testing.T) (persistence.Store, persistence.Store)

// RunShared runs the tests of what several processes sharing one database
// must agree on, against store pairs made by open.
func RunShared(t *testing.T, open SharedFactory) {
	t.Run("DedupeAcrossStores", func(t *testing.T) {
		a, b := open(t)
		dedupeRace(t, []persistence.Store{a, b}, 5, 16)
	})
	t.Run("OutboxClaimAcrossStores", func(t *testing.T) {
		a, b := open(t)
		outboxRace(t, []persistence.Store{a, b}, 200, 8)
	})
	t.Run("PurgeAcrossStores", func(t *testing.T) {
		a, b := open(t)
		purgeRace(t, []persistence.Store{a, b}, 60)
	})
	t.Run("ReleaseAcrossStores", func(t *testing.T) {
		a, b := open(t)
		concurrentRelease(t, a, b)
	})
}

const owner = "node-a"

func ctx() context.Context { return context.Background() }

// create makes a running instance leased by owner with epoch 1 and one event.
func create(t *testing.T, st persistence.Store, id string) {
	t.Helper()
	res, err := st.Apply(ctx(), persistence.Step{
		Create: &persistence.Instance{ID: id, Workflow: "wf", Input: []byte(`"in"`), LeaseOwner: owner, LeaseEpoch: 1,
			LeaseExpires: time.Now().Add(time.Minute)},
		History: []persistence.Event{{Seq: 0, Kind: "started", Name: "wf", Payload: []byte(`"in"`)}},
	})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	if res.Existing != nil {
		t.Fatalf("create %s: unexpectedly exists", id)
	}
}

func apply(t *testing.T, st persistence.Store, s persistence.Step) persistence.StepResult {
	t.Helper()
	res, err := st.Apply(ctx(), s)
	if err != nil {
		t.Fatalf("apply %+v: %v", s, err)
	}
	return res
}

func wantErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want %v", err, want)
	}
}

// afterExpiry calls try until a lease runs out on the store's clock: until
// then try is refused with ErrLeaseHeld, having written nothing. It returns
// try's first other outcome.
func afterExpiry(try func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := try()
		if !errors.Is(err, persistence.ErrLeaseHeld) || time.Now().After(deadline) {
			return err
		}
	}
}

func ev(seq int64, kind string) persistence.Event {
	return persistence.Event{Seq: seq, Kind: kind, Name: kind, Payload: []byte(fmt.Sprintf(`{"n":%d}`, seq))}
}

func mailboxSeqs(t *testing.T, st persistence.Store, id string) []persistence.Message {
	t.Helper()
	ms, err := st.Mailbox(ctx(), id, 0)
	if err != nil {
		t.Fatalf("mailbox %s: %v", id, err)
	}
	return ms
}

func testCreate(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	res, err := st.Apply(ctx(), persistence.Step{
		Create:  &persistence.Instance{ID: "a", Workflow: "other", LeaseOwner: "x", LeaseEpoch: 1},
		History: []persistence.Event{ev(0, "started")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Existing == nil || res.Existing.Workflow != "wf" {
		t.Fatalf("second create: Existing = %+v, want the first instance", res.Existing)
	}
	in, err := st.Instance(ctx(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if in.Status != persistence.StatusRunning || in.Workflow != "wf" || string(in.Input) != `"in"` || in.HistoryLen != 1 ||
		in.LeaseOwner != owner || in.LeaseEpoch != 1 {
		t.Fatalf("instance = %+v", in)
	}
	h, err := st.History(ctx(), "a", 0)
	if err != nil || len(h) != 1 || h[0].Kind != "started" {
		t.Fatalf("history = %+v, %v", h, err)
	}
	_, err = st.Instance(ctx(), "nope")
	wantErr(t, err, persistence.ErrNotFound)
	_, err = st.Apply(ctx(), persistence.Step{Create: &persistence.Instance{ID: ""}})
	wantErr(t, err, persistence.ErrInvalidRecord)
}

func testStepErrors(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	_, err := st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 2, History: []persistence.Event{ev(1, "x")}})
	wantErr(t, err, persistence.ErrFenced)
	_, err = st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(5, "x")}})
	wantErr(t, err, persistence.ErrHistoryGap)
	_, err = st.Apply(ctx(), persistence.Step{Instance: "zz", Epoch: 1, History: []persistence.Event{ev(0, "x")}})
	wantErr(t, err, persistence.ErrNotFound)
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "x"), ev(2, "y")}})
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(3, "done")},
		Status: persistence.StatusCompleted, Output: []byte(`42`)})
	_, err = st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(4, "x")}})
	wantErr(t, err, persistence.ErrInstanceDone)
	in, _ := st.Instance(ctx(), "a")
	if in.Status != persistence.StatusCompleted || string(in.Output) != "42" || in.HistoryLen != 4 || in.LeaseOwner != "" {
		t.Fatalf("finished instance = %+v", in)
	}
	h, _ := st.History(ctx(), "a", 2)
	if len(h) != 2 || h[0].Seq != 2 || h[1].Kind != "done" || string(h[0].Payload) != `{"n":2}` {
		t.Fatalf("history from 2 = %+v", h)
	}
}

func testAtomic(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	_, err := st.Apply(ctx(), persistence.Step{
		Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "received")},
		Consume:   []int64{999999},
		AddTimers: []persistence.Timer{{ID: "t", Due: time.Now()}},
		Send:      []persistence.NewMessage{{ID: "m1", Channel: "c"}},
	})
	wantErr(t, err, persistence.ErrMessageGone)
	in, _ := st.Instance(ctx(), "a")
	if in.HistoryLen != 1 {
		t.Fatalf("history length after failed step = %d, want 1", in.HistoryLen)
	}
	h, _ := st.History(ctx(), "a", 0)
	if len(h) != 1 {
		t.Fatalf("history after failed step = %+v", h)
	}
	if ts, _ := st.DueTimers(ctx(), time.Now().Add(time.Hour), nil, 0); len(ts) != 0 {
		t.Fatalf("timers after failed step = %+v", ts)
	}
	if stats, _ := st.ChannelStats(ctx()); len(stats) != 0 {
		t.Fatalf("channels after failed step = %+v", stats)
	}
}

func testLeases(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	_, err := st.AcquireLease(ctx(), "a", "node-b", time.Second)
	wantErr(t, err, persistence.ErrLeaseHeld)
	// The holder may take it again (e.g. after a restart with the same ID).
	in, err := st.AcquireLease(ctx(), "a", owner, 50*time.Millisecond)
	if err != nil || in.LeaseEpoch != 2 || in.LeaseOwner != owner {
		t.Fatalf("re-acquire = %+v, %v", in, err)
	}
	err = afterExpiry(func() (err error) {
		in, err = st.AcquireLease(ctx(), "a", "node-b", time.Minute)
		return err
	})
	if err != nil || in.LeaseEpoch != 3 || in.LeaseOwner != "node-b" {
		t.Fatalf("take over expired lease = %+v, %v", in, err)
	}
	_, err = st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 2, History: []persistence.Event{ev(1, "x")}})
	wantErr(t, err, persistence.ErrFenced)
	apply(t, st, persistence.Step{Instance: "a", Epoch: 3, History: []persistence.Event{ev(1, "x")}})

	before, _ := st.Instance(ctx(), "a")
	renewed, err := st.RenewLeases(ctx(), "node-b", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := st.Instance(ctx(), "a")
	if !after.LeaseExpires.After(before.LeaseExpires) {
		t.Fatalf("renew did not extend: %v -> %v", before.LeaseExpires, after.LeaseExpires)
	}
	// The renewal names what it renewed: an activation can tell that its
	// lease was taken.
	if len(renewed) != 1 || renewed[0] != "a" {
		t.Fatalf("renew returned %v, want [a]", renewed)
	}
	if renewed, err := st.RenewLeases(ctx(), owner, time.Hour); err != nil || len(renewed) != 0 {
		t.Fatalf("renew by the former holder = %v, %v; want none", renewed, err)
	}
	// Releasing fences the holder (epoch 4), acquiring takes epoch 5.
	if err := st.ReleaseLeases(ctx(), "node-b"); err != nil {
		t.Fatal(err)
	}
	in, err = st.AcquireLease(ctx(), "a", "node-c", time.Minute)
	if err != nil || in.LeaseEpoch != 5 {
		t.Fatalf("acquire released lease = %+v, %v", in, err)
	}
	_, err = st.AcquireLease(ctx(), "nope", owner, time.Minute)
	wantErr(t, err, persistence.ErrNotFound)

	// Passivate: release in a step, status waiting; acquiring makes it running.
	apply(t, st, persistence.Step{Instance: "a", Epoch: 5, Status: persistence.StatusWaiting, ReleaseLease: true})
	in, _ = st.Instance(ctx(), "a")
	if in.Status != persistence.StatusWaiting || in.LeaseOwner != "" {
		t.Fatalf("passivated = %+v", in)
	}
	in, err = st.AcquireLease(ctx(), "a", owner, time.Minute)
	if err != nil || in.Status != persistence.StatusRunning || in.LeaseEpoch != 6 {
		t.Fatalf("reactivated = %+v, %v", in, err)
	}
	apply(t, st, persistence.Step{Instance: "a", Epoch: 6, Status: persistence.StatusFailed, Error: "boom"})
	_, err = st.AcquireLease(ctx(), "a", owner, time.Minute)
	wantErr(t, err, persistence.ErrInstanceDone)
}

func testSend(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	create(t, st, "b")
	_, err := st.Apply(ctx(), persistence.Step{Send: []persistence.NewMessage{{ID: "m0", Target: "nope", MustDeliver: true}}})
	wantErr(t, err, persistence.ErrNotFound)
	res := apply(t, st, persistence.Step{Send: []persistence.NewMessage{
		{ID: "m1", Target: "a", Sender: "b", Payload: []byte(`1`), Metadata: map[string]string{"k": "v"}, MustDeliver: true},
		{ID: "m2", Target: "a", Channel: "side", Payload: []byte(`2`)},
		{ID: "m3", Target: "b", Payload: []byte(`3`)},
	}})
	sort.Strings(res.Woken)
	if fmt.Sprint(res.Woken) != "[a a b]" && fmt.Sprint(res.Woken) != "[a b]" {
		t.Fatalf("woken = %v", res.Woken)
	}
	ms := mailboxSeqs(t, st, "a")
	if len(ms) != 2 || ms[0].ID != "m1" || ms[1].ID != "m2" || ms[0].Seq >= ms[1].Seq || ms[0].Sender != "b" ||
		ms[0].Metadata["k"] != "v" || string(ms[1].Payload) != "2" || ms[1].Channel != "side" || ms[0].Target != "a" ||
		ms[0].PublishedAt.IsZero() {
		t.Fatalf("mailbox a = %+v", ms)
	}
	// Consume m2 first (selective receive), then m1.
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Consume: []int64{ms[1].Seq}, History: []persistence.Event{ev(1, "received")}})
	_, err = st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 1, Consume: []int64{ms[1].Seq}, History: []persistence.Event{ev(2, "received")}})
	wantErr(t, err, persistence.ErrMessageGone)
	if left := mailboxSeqs(t, st, "a"); len(left) != 1 || left[0].ID != "m1" {
		t.Fatalf("mailbox a after consume = %+v", left)
	}
	// Mail to an ended instance: MustDeliver fails, otherwise dropped.
	apply(t, st, persistence.Step{Instance: "b", Epoch: 1, Status: persistence.StatusCompleted, History: []persistence.Event{ev(1, "done")}})
	_, err = st.Apply(ctx(), persistence.Step{Send: []persistence.NewMessage{{ID: "m4", Target: "b", MustDeliver: true}}})
	wantErr(t, err, persistence.ErrInstanceDone)
	res = apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "m5", Target: "b"}}})
	if len(res.Woken) != 0 || len(mailboxSeqs(t, st, "b")) != 0 {
		t.Fatalf("mail to ended instance kept: woken %v", res.Woken)
	}
}

func testBroadcast(t *testing.T, st persistence.Store) {
	for _, id := range []string{"a", "b", "late"} {
		create(t, st, id)
	}
	for _, id := range []string{"a", "b"} {
		apply(t, st, persistence.Step{Instance: id, Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "news", Mode: persistence.Broadcast}}})
	}
	res := apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "n1", Channel: "news", Payload: []byte(`"x"`)}}})
	sort.Strings(res.Woken)
	if fmt.Sprint(res.Woken) != "[a b]" || len(res.Queued) != 0 {
		t.Fatalf("woken = %v, queued %+v", res.Woken, res.Queued)
	}
	apply(t, st, persistence.Step{Instance: "late", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "news", Mode: persistence.Broadcast}}})
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "n2", Channel: "news", Payload: []byte(`"y"`)}}})
	for id, want := range map[string]string{"a": "[n1 n2]", "b": "[n1 n2]", "late": "[n2]"} {
		var got []string
		for _, m := range mailboxSeqs(t, st, id) {
			got = append(got, m.ID)
		}
		if fmt.Sprint(got) != want {
			t.Fatalf("mailbox %s = %v, want %s", id, got, want)
		}
	}
	// a consuming its copy leaves b's.
	ms := mailboxSeqs(t, st, "a")
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Consume: []int64{ms[0].Seq}})
	if len(mailboxSeqs(t, st, "b")) != 2 {
		t.Fatal("consuming a broadcast copy removed another subscriber's copy")
	}
	apply(t, st, persistence.Step{Instance: "b", Epoch: 1, Unsubscribe: []string{"news"}})
	res = apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "n3", Channel: "news"}}})
	for _, w := range res.Woken {
		if w == "b" {
			t.Fatal("unsubscribed instance still woken")
		}
	}
	if len(mailboxSeqs(t, st, "b")) != 2 {
		t.Fatal("unsubscribed instance still receives")
	}
}

func testCompeting(t *testing.T, st persistence.Store) {
	create(t, st, "w1")
	create(t, st, "w2")
	// Published before anyone subscribes: kept in the queue.
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "j1", Channel: "jobs"}, {ID: "j2", Channel: "jobs"}}})
	for _, id := range []string{"w1", "w2"} {
		apply(t, st, persistence.Step{Instance: id, Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "jobs", Mode: persistence.Competing}}})
	}
	res := apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "j3", Channel: "jobs"}}})
	if len(res.Woken) != 2 {
		t.Fatalf("competing publish woke %v, want both subscribers", res.Woken)
	}
	if q := res.Queued; len(q) != 1 || q[0].Channel != "jobs" || len(q[0].Subscribers) != 2 {
		t.Fatalf("competing publish queued %+v, want one message on jobs for both subscribers", q)
	}
	m1, m2 := mailboxSeqs(t, st, "w1"), mailboxSeqs(t, st, "w2")
	if len(m1) != 3 || len(m2) != 3 || m1[0].ID != "j1" || m1[2].ID != "j3" || m1[0].Seq != m2[0].Seq || m1[0].Target != "" {
		t.Fatalf("queues: w1 %+v, w2 %+v", m1, m2)
	}
	apply(t, st, persistence.Step{Instance: "w1", Epoch: 1, Consume: []int64{m1[0].Seq}, History: []persistence.Event{ev(1, "received")}})
	_, err := st.Apply(ctx(), persistence.Step{Instance: "w2", Epoch: 1, Consume: []int64{m2[0].Seq}, History: []persistence.Event{ev(1, "received")}})
	wantErr(t, err, persistence.ErrMessageGone)
	if got := mailboxSeqs(t, st, "w2"); len(got) != 2 || got[0].ID != "j2" {
		t.Fatalf("w2 after w1 took j1: %+v", got)
	}
	// An instance not subscribed does not see the queue.
	create(t, st, "x")
	if len(mailboxSeqs(t, st, "x")) != 0 {
		t.Fatal("unsubscribed instance sees a competing queue")
	}
}

func testModeConflict(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	create(t, st, "b")
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "c", Mode: persistence.Broadcast}}})
	_, err := st.Apply(ctx(), persistence.Step{Instance: "b", Epoch: 1, History: []persistence.Event{ev(1, "sub")},
		Subscribe: []persistence.Subscription{{Channel: "c", Mode: persistence.Competing}}})
	wantErr(t, err, persistence.ErrChannelMode)
	var mc *persistence.ModeConflictError
	if !errors.As(err, &mc) || mc.Existing != persistence.Broadcast || mc.Requested != persistence.Competing {
		t.Fatalf("error = %#v", err)
	}
	if in, _ := st.Instance(ctx(), "b"); in.HistoryLen != 1 {
		t.Fatal("failed subscribe step left history")
	}
	_, err = st.Apply(ctx(), persistence.Step{Instance: "b", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "d", Mode: "bogus"}}})
	wantErr(t, err, persistence.ErrInvalidRecord)
	// Re-subscribing in the same mode is fine; once the only subscriber ends the lock is gone.
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "c", Mode: persistence.Broadcast}}})
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Status: persistence.StatusCompleted, History: []persistence.Event{ev(1, "done")}})
	apply(t, st, persistence.Step{Instance: "b", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "c", Mode: persistence.Competing}}})
	// Direct sends on a competing channel conflict too.
	_, err = st.Apply(ctx(), persistence.Step{Send: []persistence.NewMessage{{ID: "d1", Channel: "c", Target: "b"}}})
	wantErr(t, err, persistence.ErrChannelMode)
	// So does a publish on a channel with a direct subscriber, and it
	// leaves nothing behind: no copy, no queued message.
	create(t, st, "e")
	apply(t, st, persistence.Step{Instance: "e", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "calls", Mode: persistence.Direct}}})
	_, err = st.Apply(ctx(), persistence.Step{Send: []persistence.NewMessage{{ID: "p1", Channel: "calls"}}})
	wantErr(t, err, persistence.ErrChannelMode)
	if !errors.As(err, &mc) || mc.Existing != persistence.Direct || mc.Requested != persistence.Broadcast {
		t.Fatalf("publish on a direct channel: error = %#v", err)
	}
	stats, _ := st.ChannelStats(ctx())
	for _, c := range stats {
		if c.Channel == "calls" && c.Waiting != 0 {
			t.Fatalf("a refused publish left %d messages", c.Waiting)
		}
	}
	if ms := mailboxSeqs(t, st, "e"); len(ms) != 0 {
		t.Fatalf("a refused publish left mail: %+v", ms)
	}
}

func testSystemChannels(t *testing.T, st persistence.Store) {
	create(t, st, "w")
	// Nobody listens: dropped, not queued.
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "d0", Channel: "$down:x"}}})
	if stats, _ := st.ChannelStats(ctx()); len(stats) != 0 {
		t.Fatalf("a system-channel message without subscribers was kept: %+v", stats)
	}
	apply(t, st, persistence.Step{Instance: "w", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "$down:x", Mode: persistence.Broadcast}}})
	res := apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "d1", Channel: "$down:x"}}})
	if ms := mailboxSeqs(t, st, "w"); len(ms) != 1 || ms[0].ID != "d1" || len(res.Woken) != 1 {
		t.Fatalf("broadcast on a system channel: mailbox %+v, woken %v", ms, res.Woken)
	}
}

func testTerminal(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1,
		Subscribe: []persistence.Subscription{{Channel: "jobs", Mode: persistence.Competing}, {Channel: "news", Mode: persistence.Broadcast}},
		AddTimers: []persistence.Timer{{ID: "t1", Due: time.Now().Add(time.Hour)}}})
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "m1", Target: "a"}, {ID: "q1", Channel: "jobs"}}})
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Status: persistence.StatusCancelled, Error: "stop",
		History: []persistence.Event{ev(1, "cancelled")}})
	if subs, _ := st.Subscriptions(ctx(), "a"); len(subs) != 0 {
		t.Fatalf("subscriptions kept: %+v", subs)
	}
	if ts, _ := st.DueTimers(ctx(), time.Now().Add(2*time.Hour), nil, 0); len(ts) != 0 {
		t.Fatalf("timers kept: %+v", ts)
	}
	create(t, st, "b")
	apply(t, st, persistence.Step{Instance: "b", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "jobs", Mode: persistence.Competing}}})
	if ms := mailboxSeqs(t, st, "b"); len(ms) != 1 || ms[0].ID != "q1" {
		t.Fatalf("competing queue message lost when a subscriber ended: %+v", ms)
	}
	in, _ := st.Instance(ctx(), "a")
	if in.Status != persistence.StatusCancelled || in.Error != "stop" || in.LeaseOwner != "" {
		t.Fatalf("cancelled instance = %+v", in)
	}
	// Subscribed in the step that creates it (with its first event), a
	// timer in a later step that only appends history, ended by a third:
	// both are gone, and each step found the history length it expected.
	apply(t, st, persistence.Step{Create: &persistence.Instance{ID: "c", Workflow: "wf", LeaseOwner: "n", LeaseEpoch: 1},
		History:   []persistence.Event{ev(0, "started")},
		Subscribe: []persistence.Subscription{{Channel: "other", Mode: persistence.Broadcast}}})
	apply(t, st, persistence.Step{Instance: "c", Epoch: 1, History: []persistence.Event{ev(1, "sleep")},
		AddTimers: []persistence.Timer{{ID: "t2", Due: time.Now().Add(time.Hour)}}})
	apply(t, st, persistence.Step{Instance: "c", Epoch: 1, Status: persistence.StatusCompleted, History: []persistence.Event{ev(2, "completed")}})
	if in, _ := st.Instance(ctx(), "c"); in.HistoryLen != 3 {
		t.Fatalf("history length = %d, want 3", in.HistoryLen)
	}
	if subs, _ := st.Subscriptions(ctx(), "c"); len(subs) != 0 {
		t.Fatalf("subscription of the create step kept: %+v", subs)
	}
	if ts, _ := st.DueTimers(ctx(), time.Now().Add(2*time.Hour), nil, 0); len(ts) != 0 {
		t.Fatalf("timer of a history-only step kept: %+v", ts)
	}
}

func testTimers(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	create(t, st, "b")
	now := time.Now()
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, AddTimers: []persistence.Timer{{ID: "late", Due: now.Add(time.Hour)}, {ID: "soon", Due: now.Add(time.Second)}}})
	apply(t, st, persistence.Step{Instance: "b", Epoch: 1, AddTimers: []persistence.Timer{{ID: "mid", Due: now.Add(time.Minute)}}})
	ts, err := st.DueTimers(ctx(), now.Add(2*time.Minute), nil, 0)
	if err != nil || len(ts) != 2 || ts[0].ID != "soon" || ts[0].Instance != "a" || ts[1].ID != "mid" {
		t.Fatalf("due timers = %+v, %v", ts, err)
	}
	if !ts[0].Due.Equal(now.Add(time.Second)) && ts[0].Due.Sub(now.Add(time.Second)).Abs() > time.Microsecond {
		t.Fatalf("due time changed: %v vs %v", ts[0].Due, now.Add(time.Second))
	}
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, FireTimers: []string{"soon"}, History: []persistence.Event{ev(1, "timer_fired")}})
	_, err = st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 1, FireTimers: []string{"soon"}, History: []persistence.Event{ev(2, "timer_fired")}})
	wantErr(t, err, persistence.ErrTimerGone)
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, CancelTimers: []string{"late", "never-existed"}})
	ts, _ = st.DueTimers(ctx(), now.Add(48*time.Hour), nil, 0)
	if len(ts) != 1 || ts[0].ID != "mid" {
		t.Fatalf("timers left = %+v", ts)
	}
	// Fencing applies to firing too.
	_, err = st.Apply(ctx(), persistence.Step{Instance: "b", Epoch: 7, FireTimers: []string{"mid"}})
	wantErr(t, err, persistence.ErrFenced)
}

func testRunnable(t *testing.T, st persistence.Store) {
	for _, id := range []string{"leased", "free", "idle", "mail", "queue", "cancel", "done"} {
		create(t, st, id)
	}
	// A lease that has run out: the instance is runnable again.
	apply(t, st, persistence.Step{Create: &persistence.Instance{ID: "expired", Workflow: "wf", LeaseOwner: "node-gone", LeaseEpoch: 1,
		LeaseExpires: time.Now().Add(-time.Minute)}, History: []persistence.Event{ev(0, "started")}})
	// Parked (waiting) by a node whose lease then ran out: runnable, as
	// only a live activation resumes what it held.
	apply(t, st, persistence.Step{Create: &persistence.Instance{ID: "parked-gone", Workflow: "wf", Status: persistence.StatusWaiting,
		LeaseOwner: "node-gone", LeaseEpoch: 1, LeaseExpires: time.Now().Add(-time.Minute)}, History: []persistence.Event{ev(0, "started")}})
	apply(t, st, persistence.Step{Instance: "queue", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "jobs", Mode: persistence.Competing}}})
	for _, id := range []string{"free", "idle", "mail", "queue", "cancel"} {
		step := persistence.Step{Instance: id, Epoch: 1, ReleaseLease: true}
		if id != "free" {
			step.Status = persistence.StatusWaiting
		}
		apply(t, st, step)
	}
	apply(t, st, persistence.Step{Instance: "done", Epoch: 1, Status: persistence.StatusCompleted})
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "m", Target: "mail"}, {ID: "j", Channel: "jobs"}}})
	if err := st.RequestCancel(ctx(), "cancel", "why"); err != nil {
		t.Fatal(err)
	}
	ids, err := st.Runnable(ctx(), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(ids)
	if fmt.Sprint(ids) != "[cancel expired free mail parked-gone queue]" {
		t.Fatalf("runnable = %v, want [cancel expired free mail parked-gone queue]", ids)
	}
	if ids, err := st.Runnable(ctx(), nil, 2); err != nil || len(ids) != 2 {
		t.Fatalf("runnable with limit 2 = %v, %v", ids, err)
	}
}

func testCancel(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	if err := st.RequestCancel(ctx(), "a", "customer asked"); err != nil {
		t.Fatal(err)
	}
	if err := st.RequestCancel(ctx(), "a", "second reason"); err != nil {
		t.Fatal(err)
	}
	in, _ := st.Instance(ctx(), "a")
	if in.CancelReason != "customer asked" {
		t.Fatalf("cancel reason = %q", in.CancelReason)
	}
	wantErr(t, st.RequestCancel(ctx(), "nope", "x"), persistence.ErrNotFound)
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Status: persistence.StatusCancelled})
	wantErr(t, st.RequestCancel(ctx(), "a", "x"), persistence.ErrInstanceDone)
}

func testReset(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "x"), ev(2, "y")}})
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "keep", Target: "a"}}})
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, ResetHistory: true, History: []persistence.Event{ev(0, "started")}})
	in, _ := st.Instance(ctx(), "a")
	h, _ := st.History(ctx(), "a", 0)
	if in.Run != 1 || in.HistoryLen != 1 || len(h) != 1 || h[0].Kind != "started" {
		t.Fatalf("after reset: %+v, history %+v", in, h)
	}
	if ms := mailboxSeqs(t, st, "a"); len(ms) != 1 || ms[0].ID != "keep" {
		t.Fatalf("mailbox after reset = %+v", ms)
	}
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "z")}})
}

func testList(t *testing.T, st persistence.Store) {
	for _, id := range []string{"c", "a", "b"} {
		create(t, st, id)
	}
	apply(t, st, persistence.Step{Instance: "b", Epoch: 1, Status: persistence.StatusCompleted})
	all, err := st.List(ctx(), persistence.ListFilter{})
	if err != nil || len(all) != 3 || all[0].ID != "a" || all[2].ID != "c" {
		t.Fatalf("list = %+v, %v", all, err)
	}
	run, _ := st.List(ctx(), persistence.ListFilter{Status: []persistence.Status{persistence.StatusRunning}})
	if len(run) != 2 {
		t.Fatalf("running = %+v", run)
	}
	page, _ := st.List(ctx(), persistence.ListFilter{After: "a", Limit: 1})
	if len(page) != 1 || page[0].ID != "b" {
		t.Fatalf("page = %+v", page)
	}
	if none, _ := st.List(ctx(), persistence.ListFilter{Workflow: "other"}); len(none) != 0 {
		t.Fatalf("workflow filter = %+v", none)
	}
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "jobs", Mode: persistence.Competing}}})
	apply(t, st, persistence.Step{Instance: "c", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "jobs", Mode: persistence.Competing}}})
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "1", Channel: "jobs"}, {ID: "2", Channel: "jobs"}, {ID: "3", Channel: "orphan"}}})
	stats, err := st.ChannelStats(ctx())
	if err != nil {
		t.Fatal(err)
	}
	got := statsString(t, stats)
	if got != "[{jobs competing 2 2} {orphan  0 1}]" {
		t.Fatalf("channel stats = %s", got)
	}
}

func testConcurrentSteps(t *testing.T, st persistence.Store) {
	const workers, steps = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			id := fmt.Sprintf("i%d", w)
			if _, err := st.Apply(ctx(), persistence.Step{Create: &persistence.Instance{ID: id, Workflow: "wf", LeaseOwner: owner, LeaseEpoch: 1},
				History: []persistence.Event{ev(0, "started")}}); err != nil {
				errs <- err
				return
			}
			for i := 1; i <= steps; i++ {
				if _, err := st.Apply(ctx(), persistence.Step{Instance: id, Epoch: 1, History: []persistence.Event{ev(int64(i), "step")},
					Send: []persistence.NewMessage{{ID: fmt.Sprintf("%s-%d", id, i), Target: fmt.Sprintf("i%d", (w+1)%workers)}}}); err != nil {
					errs <- fmt.Errorf("%s step %d: %w", id, i, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := 0; w < workers; w++ {
		id := fmt.Sprintf("i%d", w)
		h, _ := st.History(ctx(), id, 0)
		if len(h) != steps+1 {
			t.Fatalf("%s history = %d events, want %d", id, len(h), steps+1)
		}
		for i, e := range h {
			if e.Seq != int64(i) {
				t.Fatalf("%s history seq %d at %d", id, e.Seq, i)
			}
		}
	}
}

// testCompetingQueues: an instance consuming three channels (and with mail
// of its own) reads them merged in arrival order, a limited read returns
// the first messages of the merge however long the queues, and only the
// channels it consumes competitively are in it.
func testCompetingQueues(t *testing.T, st persistence.Store) {
	create(t, st, "m")
	create(t, st, "other")
	for _, ch := range []string{"q1", "q2", "q3"} {
		apply(t, st, persistence.Step{Instance: "m", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: ch, Mode: persistence.Competing}}})
	}
	apply(t, st, persistence.Step{Instance: "other", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "q4", Mode: persistence.Competing}}})
	var want []string
	for i := range 60 {
		ch := []string{"q1", "q2", "q3", "q4"}[i%4]
		m := persistence.NewMessage{ID: fmt.Sprintf("%s-%d", ch, i), Channel: ch}
		if i%10 == 9 {
			m = persistence.NewMessage{ID: fmt.Sprintf("direct-%d", i), Target: "m"}
		}
		apply(t, st, persistence.Step{Send: []persistence.NewMessage{m}})
		if m.Channel != "q4" {
			want = append(want, m.ID)
		}
	}
	for _, limit := range []int{1, 5, 17, 1000} {
		ms, err := st.Mailbox(ctx(), "m", limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for i, m := range ms {
			if i > 0 && m.Seq <= ms[i-1].Seq {
				t.Fatalf("limit %d: mailbox out of order at %d: %+v", limit, i, ms)
			}
			got = append(got, m.ID)
		}
		w := want[:min(limit, len(want))]
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Fatalf("limit %d: mailbox = %v, want %v", limit, got, w)
		}
	}
	// With one competing channel left, the read is the same merge.
	apply(t, st, persistence.Step{Instance: "m", Epoch: 1, Unsubscribe: []string{"q2", "q3"}})
	ms := mailboxSeqs(t, st, "m")
	for _, m := range ms {
		if m.Channel == "q2" || m.Channel == "q3" {
			t.Fatalf("mailbox after unsubscribing still has %s", m.ID)
		}
	}
	if len(ms) != 15+6 { // q1 minus the direct ones in its slots, plus 6 direct
		var ids []string
		for _, m := range ms {
			ids = append(ids, m.ID)
		}
		t.Fatalf("mailbox with one queue = %v", ids)
	}
}

func testCompetingRace(t *testing.T, st persistence.Store) {
	const consumers, msgs = 4, 60
	for c := 0; c < consumers; c++ {
		id := fmt.Sprintf("c%d", c)
		create(t, st, id)
		apply(t, st, persistence.Step{Instance: id, Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "q", Mode: persistence.Competing}}})
	}
	for i := 0; i < msgs; i++ {
		apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: fmt.Sprintf("m%d", i), Channel: "q"}}})
	}
	var mu sync.Mutex
	got := map[string]string{}
	var wg sync.WaitGroup
	for c := 0; c < consumers; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			id := fmt.Sprintf("c%d", c)
			seq := int64(1)
			for {
				ms, err := st.Mailbox(ctx(), id, 5)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ms) == 0 {
					return
				}
				m := ms[c%len(ms)]
				_, err = st.Apply(ctx(), persistence.Step{Instance: id, Epoch: 1, Consume: []int64{m.Seq},
					History: []persistence.Event{{Seq: seq, Kind: "received", Ref: m.ID}}})
				if errors.Is(err, persistence.ErrMessageGone) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				seq++
				mu.Lock()
				if prev, dup := got[m.ID]; dup {
					t.Errorf("message %s consumed by %s and %s", m.ID, prev, id)
				}
				got[m.ID] = id
				mu.Unlock()
			}
		}(c)
	}
	wg.Wait()
	if len(got) != msgs {
		t.Fatalf("consumed %d distinct messages, want %d", len(got), msgs)
	}
	// History agrees with the consumption map.
	total := 0
	for c := 0; c < consumers; c++ {
		h, _ := st.History(ctx(), fmt.Sprintf("c%d", c), 1)
		total += len(h)
	}
	if total != msgs {
		t.Fatalf("received events = %d, want %d", total, msgs)
	}
}
