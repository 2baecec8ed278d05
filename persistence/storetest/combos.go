package storetest

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// The combinations of Step fields the actor runtime builds (see the Step
// documentation's list), each applied as the runtime applies it, with what
// every concern of it must have done.

// instance reads id or fails the test.
func instance(t *testing.T, st persistence.Store, id string) persistence.Instance {
	t.Helper()
	in, err := st.Instance(ctx(), id)
	if err != nil {
		t.Fatalf("instance %s: %v", id, err)
	}
	return in
}

// msgIDs lists the IDs of id's mailbox, in order.
func msgIDs(t *testing.T, st persistence.Store, id string) string {
	t.Helper()
	var out []string
	for _, m := range mailboxSeqs(t, st, id) {
		out = append(out, m.ID)
	}
	return fmt.Sprint(out)
}

// timerIDs lists id's timers, earliest first.
func timerIDs(t *testing.T, st persistence.Store, id string) string {
	t.Helper()
	ts, err := st.Timers(ctx(), id)
	if err != nil {
		t.Fatalf("timers %s: %v", id, err)
	}
	var out []string
	for _, tm := range ts {
		out = append(out, tm.ID)
	}
	return fmt.Sprint(out)
}

// woken is res.Woken sorted, as text.
func woken(res persistence.StepResult) string {
	w := slices.Clone(res.Woken)
	sort.Strings(w)
	return fmt.Sprint(w)
}

// testSpawnUnleased: a spawn for an instance another node owns creates it
// without a lease (Create with History); it is runnable, and the node that
// wakes it takes the lease with its first step, at epoch 0.
func testSpawnUnleased(t *testing.T, st persistence.Store) {
	res := apply(t, st, persistence.Step{Create: &persistence.Instance{ID: "a", Workflow: "wf", Input: []byte("1")},
		History: []persistence.Event{ev(0, "started")}})
	if res.Existing != nil {
		t.Fatalf("Existing = %+v", res.Existing)
	}
	in := instance(t, st, "a")
	if in.Status != persistence.StatusRunning || in.LeaseOwner != "" || in.LeaseEpoch != 0 || in.HistoryLen != 1 {
		t.Fatalf("spawned without a lease: %+v", in)
	}
	if ids, err := st.Runnable(ctx(), nil, 0); err != nil || fmt.Sprint(ids) != "[a]" {
		t.Fatalf("runnable = %v, %v; want [a]", ids, err)
	}
	apply(t, st, persistence.Step{Instance: "a", Epoch: 0, TakeLease: "node-b", LeaseTTL: time.Minute,
		History: []persistence.Event{ev(1, "x")}})
	if in := instance(t, st, "a"); in.LeaseOwner != "node-b" || in.LeaseEpoch != 1 || in.HistoryLen != 2 {
		t.Fatalf("taken: %+v", in)
	}
	// A second spawn of the ID applies nothing, not even its sends.
	res = apply(t, st, persistence.Step{Create: &persistence.Instance{ID: "a", Workflow: "wf"},
		History: []persistence.Event{ev(0, "started")}, Send: []persistence.NewMessage{{ID: "m", Target: "a"}}})
	if res.Existing == nil || res.Existing.HistoryLen != 2 || len(res.Woken) != 0 {
		t.Fatalf("second spawn: %+v", res)
	}
	if got := msgIDs(t, st, "a"); got != "[]" {
		t.Fatalf("mailbox after a second spawn = %s", got)
	}
}

// testTakeLeaseOnly: an activation that must hold the lease before it runs
// anything outside the store commits a step with only TakeLease; a restart
// counted by a woken activation takes the lease with IncRestarts and
// RestartLog.
func testTakeLeaseOnly(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Status: persistence.StatusWaiting, ReleaseLease: true})
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, TakeLease: "node-b", LeaseTTL: time.Minute})
	in := instance(t, st, "a")
	if in.Status != persistence.StatusRunning || in.LeaseOwner != "node-b" || in.LeaseEpoch != 2 || in.HistoryLen != 1 {
		t.Fatalf("after a lease-only step: %+v", in)
	}
	_, err := st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 1, TakeLease: "node-c", LeaseTTL: time.Minute})
	wantErr(t, err, persistence.ErrFenced)

	create(t, st, "b")
	apply(t, st, persistence.Step{Instance: "b", Epoch: 1, Status: persistence.StatusWaiting, ReleaseLease: true})
	log := []time.Time{time.Unix(1_700_000_000, 0)}
	apply(t, st, persistence.Step{Instance: "b", Epoch: 1, TakeLease: "node-b", LeaseTTL: time.Minute, IncRestarts: true, RestartLog: log})
	in = instance(t, st, "b")
	if in.LeaseOwner != "node-b" || in.LeaseEpoch != 2 || in.Restarts != 1 || !timesEqual(in.RecentRestarts, log) ||
		in.Status != persistence.StatusRunning {
		t.Fatalf("after a restart that took the lease: %+v", in)
	}
}

// testWorkflowStep: one step of a running workflow with everything it may
// have pending: history, a consumed message, a claimed one, a direct send
// and a publish, a subscription, timers cancelled, fired, added and moved,
// and an outgoing event.
func testWorkflowStep(t *testing.T, st persistence.Store) {
	for _, id := range []string{"a", "peer", "fan"} {
		create(t, st, id)
	}
	now := time.Now()
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "jobs", Mode: persistence.Competing}},
		AddTimers: []persistence.Timer{{ID: "fire", Due: now}, {ID: "drop", Due: now.Add(time.Hour)}, {ID: "move", Due: now.Add(time.Hour)}}})
	apply(t, st, persistence.Step{Instance: "fan", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "news", Mode: persistence.Broadcast}}})
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "direct", Target: "a"}, {ID: "job", Channel: "jobs"}}})
	var direct, job int64
	for _, m := range mailboxSeqs(t, st, "a") {
		switch m.ID {
		case "direct":
			direct = m.Seq
		case "job":
			job = m.Seq
		}
	}
	res := apply(t, st, persistence.Step{Instance: "a", Epoch: 1,
		History:      []persistence.Event{ev(1, "received"), ev(2, "timer_fired")},
		Consume:      []int64{direct},
		Claim:        []int64{job},
		Send:         []persistence.NewMessage{{ID: "to-peer", Target: "peer"}, {ID: "news-1", Channel: "news"}},
		Subscribe:    []persistence.Subscription{{Channel: "replies", Mode: persistence.Direct}},
		CancelTimers: []string{"drop", "move"},
		FireTimers:   []string{"fire"},
		AddTimers:    []persistence.Timer{{ID: "move", Due: now.Add(2 * time.Hour)}, {ID: "new", Due: now.Add(time.Minute)}},
		Emit:         []persistence.OutboxEvent{{ID: "ev-1", Instance: "a", Type: "done", Data: []byte("{}")}},
	})
	if fmt.Sprint(res.Claimed) != fmt.Sprint([]int64{job}) {
		t.Fatalf("claimed = %v, want [%d]", res.Claimed, job)
	}
	if got := woken(res); got != "[fan peer]" {
		t.Fatalf("woken = %s, want [fan peer]", got)
	}
	if in := instance(t, st, "a"); in.HistoryLen != 3 || in.LeaseOwner != owner || in.LeaseEpoch != 1 {
		t.Fatalf("instance = %+v", in)
	}
	if got := msgIDs(t, st, "a"); got != "[job]" {
		t.Fatalf("mailbox a = %s, want the claimed message only", got)
	}
	if got := msgIDs(t, st, "peer"); got != "[to-peer]" {
		t.Fatalf("mailbox peer = %s", got)
	}
	if got := msgIDs(t, st, "fan"); got != "[news-1]" {
		t.Fatalf("mailbox fan = %s", got)
	}
	if got := timerIDs(t, st, "a"); got != "[new move]" {
		t.Fatalf("timers = %s, want [new move] (cancelled, then added again)", got)
	}
	subs, _ := st.Subscriptions(ctx(), "a")
	if len(subs) != 2 {
		t.Fatalf("subscriptions = %+v", subs)
	}
	if _, err := st.ListOutbox(ctx(), "", "", 0); err == nil {
		if recs := listOutbox(t, st, ""); len(recs) != 1 || recs[0].ID != "ev-1" {
			t.Fatalf("outbox = %+v", recs)
		}
	}
	// The same step again fails at its first concern (the history position)
	// and writes nothing.
	_, err := st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "received")},
		Consume: []int64{direct}, Send: []persistence.NewMessage{{ID: "to-peer-2", Target: "peer"}}})
	wantErr(t, err, persistence.ErrHistoryGap)
	if got := msgIDs(t, st, "peer"); got != "[to-peer]" {
		t.Fatalf("mailbox peer after a failed step = %s", got)
	}
}

// testSubscribeAndPublish: a step's sends see its own subscriptions.
func testSubscribeAndPublish(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	res := apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "x")},
		Subscribe: []persistence.Subscription{{Channel: "news", Mode: persistence.Broadcast}},
		Send:      []persistence.NewMessage{{ID: "n1", Channel: "news"}}})
	if got := woken(res); got != "[a]" {
		t.Fatalf("woken = %s, want [a]", got)
	}
	if got := msgIDs(t, st, "a"); got != "[n1]" {
		t.Fatalf("mailbox = %s, want its own broadcast", got)
	}
	// Unsubscribed and published in one step: no copy.
	res = apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Unsubscribe: []string{"news"},
		Send: []persistence.NewMessage{{ID: "n2", Channel: "news"}}})
	if len(res.Woken) != 0 {
		t.Fatalf("woken = %v after unsubscribing", res.Woken)
	}
	if got := msgIDs(t, st, "a"); got != "[n1]" {
		t.Fatalf("mailbox = %s", got)
	}
}

// testEndStep: the step that ends a workflow records its last event, sets
// the status with output and error, sends Down to its monitors (a system
// channel, dropped without subscribers) and to its parent, and may take
// the lease, consume and add timers as it goes; the end then drops its
// subscriptions, timers (the new ones too) and mail (what it sent itself
// too), gives back what it claimed, and releases the lease.
func testEndStep(t *testing.T, st persistence.Store) {
	for _, id := range []string{"parent", "a", "other"} {
		create(t, st, id)
	}
	monitor := persistence.SystemChannelPrefix + "monitor:a"
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "jobs", Mode: persistence.Competing}}})
	apply(t, st, persistence.Step{Instance: "other", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "jobs", Mode: persistence.Competing}}})
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "m", Target: "a"}, {ID: "job", Channel: "jobs"}, {ID: "left", Target: "a"}}})
	var m, job int64
	for _, msg := range mailboxSeqs(t, st, "a") {
		switch msg.ID {
		case "m":
			m = msg.Seq
		case "job":
			job = msg.Seq
		}
	}
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "received")}, Claim: []int64{job}})
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Status: persistence.StatusWaiting, ReleaseLease: true})

	res := apply(t, st, persistence.Step{Instance: "a", Epoch: 1, TakeLease: "node-b", LeaseTTL: time.Minute,
		History:   []persistence.Event{ev(2, "received"), ev(3, "failed")},
		Consume:   []int64{m},
		AddTimers: []persistence.Timer{{ID: "late", Due: time.Now().Add(time.Hour)}},
		Status:    persistence.StatusFailed, Output: []byte(`"out"`), Error: "boom",
		Send: []persistence.NewMessage{{ID: "down-m", Channel: monitor, Sender: "a"},
			{ID: "down-p", Channel: persistence.SystemChannelPrefix + "down", Target: "parent", Sender: "a"},
			{ID: "self", Target: "a"}}})
	in := instance(t, st, "a")
	if in.Status != persistence.StatusFailed || string(in.Output) != `"out"` || in.Error != "boom" || in.LeaseOwner != "" ||
		in.LeaseEpoch != 2 || in.HistoryLen != 4 {
		t.Fatalf("ended instance = %+v", in)
	}
	if got := msgIDs(t, st, "parent"); got != "[down-p]" {
		t.Fatalf("parent's mailbox = %s", got)
	}
	if got := msgIDs(t, st, "a"); got != "[]" {
		t.Fatalf("ended instance's mailbox = %s", got)
	}
	if got := timerIDs(t, st, "a"); got != "[]" {
		t.Fatalf("ended instance's timers = %s", got)
	}
	if subs, _ := st.Subscriptions(ctx(), "a"); len(subs) != 0 {
		t.Fatalf("ended instance's subscriptions = %+v", subs)
	}
	// The claimed message is back in the queue, for the other consumer.
	if got := msgIDs(t, st, "other"); got != "[job]" {
		t.Fatalf("other consumer's mailbox = %s, want the given-back message", got)
	}
	if len(res.Queued) != 1 || res.Queued[0].Channel != "jobs" || fmt.Sprint(res.Queued[0].Subscribers) != "[other]" {
		t.Fatalf("queued = %+v", res.Queued)
	}
	// Not a: the message it sent itself found it ended (the status is
	// written before the sends) and was dropped.
	if got := woken(res); got != "[other parent]" {
		t.Fatalf("woken = %s, want [other parent]", got)
	}
	for _, c := range channelStats(t, st) {
		if c.Channel == monitor {
			t.Fatalf("the Down to a monitor channel without subscribers was kept: %+v", c)
		}
	}
}

// channelStats reads every channel's summary.
func channelStats(t *testing.T, st persistence.Store) []persistence.ChannelStat {
	t.Helper()
	cs, err := st.ChannelStats(ctx())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// testCompensating: the compensating status keeps the lease, the output
// and the subscriptions.
func testCompensating(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "c", Mode: persistence.Direct}}})
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "compensating")},
		Status: persistence.StatusCompensating})
	in := instance(t, st, "a")
	if in.Status != persistence.StatusCompensating || in.LeaseOwner != owner || in.Output != nil || in.HistoryLen != 2 {
		t.Fatalf("compensating: %+v", in)
	}
	if subs, _ := st.Subscriptions(ctx(), "a"); len(subs) != 1 {
		t.Fatalf("subscriptions = %+v", subs)
	}
}

// testContinueAsNew: a new run starts with what else was pending (a
// consumed message, a send), here by an activation that took the lease
// with it.
func testContinueAsNew(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	create(t, st, "b")
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "x"), ev(2, "y")}})
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "m", Target: "a"}}})
	m := mailboxSeqs(t, st, "a")[0].Seq
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Status: persistence.StatusWaiting, ReleaseLease: true})
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, TakeLease: "node-b", LeaseTTL: time.Minute, ResetHistory: true,
		History: []persistence.Event{ev(0, "started")}, Consume: []int64{m}, Send: []persistence.NewMessage{{ID: "hi", Target: "b"}}})
	in := instance(t, st, "a")
	if in.Run != 1 || in.HistoryLen != 1 || in.LeaseOwner != "node-b" || in.LeaseEpoch != 2 || in.Status != persistence.StatusRunning {
		t.Fatalf("new run: %+v", in)
	}
	if h, _ := st.History(ctx(), "a", 0); len(h) != 1 || h[0].Kind != "started" {
		t.Fatalf("history = %+v", h)
	}
	if got := msgIDs(t, st, "a"); got != "[]" {
		t.Fatalf("mailbox a = %s", got)
	}
	if got := msgIDs(t, st, "b"); got != "[hi]" {
		t.Fatalf("mailbox b = %s", got)
	}
}

// testShutdownRelease: at shutdown an activation releases its lease and
// nothing else; the epoch stays, so the next taker fences nobody it need
// not, and the instance is runnable.
func testShutdownRelease(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, ReleaseLease: true})
	in := instance(t, st, "a")
	if in.LeaseOwner != "" || in.LeaseEpoch != 1 || in.Status != persistence.StatusRunning || in.HistoryLen != 1 {
		t.Fatalf("released: %+v", in)
	}
	if ids, err := st.Runnable(ctx(), nil, 0); err != nil || fmt.Sprint(ids) != "[a]" {
		t.Fatalf("runnable = %v, %v", ids, err)
	}
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, TakeLease: "node-b", LeaseTTL: time.Minute})
	if in := instance(t, st, "a"); in.LeaseOwner != "node-b" || in.LeaseEpoch != 2 {
		t.Fatalf("taken after release: %+v", in)
	}
}

// testReopen: a step with Reopen starts a new run of an ended instance (a
// reset, a retry, a restart): history replaced, status running, output,
// error and cancel request cleared, the lease free, the timers and
// subscriptions it brings in place, and the instance runnable again. It
// applies to ended instances only, and once per end (the epoch fences a
// second one).
func testReopen(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "x"), ev(2, "y")}})
	reopen := persistence.Step{Instance: "a", Epoch: 1, Reopen: true, ResetHistory: true, Status: persistence.StatusRunning,
		History:   []persistence.Event{ev(0, "started"), ev(1, "x")},
		AddTimers: []persistence.Timer{{ID: "t1", Due: time.Now().Add(time.Hour)}},
		Subscribe: []persistence.Subscription{{Channel: "news", Mode: persistence.Broadcast}}}
	_, err := st.Apply(ctx(), reopen)
	wantErr(t, err, persistence.ErrInstanceLive)
	if in := instance(t, st, "a"); in.HistoryLen != 3 || in.Run != 0 {
		t.Fatalf("a refused reopen changed the instance: %+v", in)
	}

	if err := st.RequestCancel(ctx(), "a", "customer asked"); err != nil {
		t.Fatal(err)
	}
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Status: persistence.StatusFailed, Error: "boom", Output: []byte("out"),
		History: []persistence.Event{ev(3, "failed")}})
	apply(t, st, reopen)
	in := instance(t, st, "a")
	if in.Status != persistence.StatusRunning || in.Error != "" || in.Output != nil || in.CancelReason != "" ||
		in.LeaseOwner != "" || in.HistoryLen != 2 || in.Run != 1 {
		t.Fatalf("reopened instance = %+v", in)
	}
	h, err := st.History(ctx(), "a", 0)
	if err != nil || len(h) != 2 || h[1].Kind != "x" {
		t.Fatalf("history after reopen = %+v, %v", h, err)
	}
	if got := timerIDs(t, st, "a"); got != "[t1]" {
		t.Fatalf("timers after reopen = %s", got)
	}
	if subs, _ := st.Subscriptions(ctx(), "a"); len(subs) != 1 || subs[0].Channel != "news" {
		t.Fatalf("subscriptions after reopen = %+v", subs)
	}
	if ids, err := st.Runnable(ctx(), nil, 0); err != nil || !slices.Contains(ids, "a") {
		t.Fatalf("runnable = %v, %v; want a", ids, err)
	}
	// The new run goes on as any: a node takes the lease with its step.
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, TakeLease: "node-b", LeaseTTL: time.Minute, History: []persistence.Event{ev(2, "z")}})
	apply(t, st, persistence.Step{Instance: "a", Epoch: 2, Status: persistence.StatusCompleted, History: []persistence.Event{ev(3, "completed")}})
	// A second reopen of the first end is fenced: the epoch moved on.
	_, err = st.Apply(ctx(), reopen)
	wantErr(t, err, persistence.ErrFenced)
	if in := instance(t, st, "a"); in.Status != persistence.StatusCompleted || in.Run != 1 {
		t.Fatalf("a fenced reopen changed the instance: %+v", in)
	}
	// A reopen needs a new run to start.
	bad := reopen
	bad.Epoch, bad.ResetHistory = 2, false
	_, err = st.Apply(ctx(), bad)
	wantErr(t, err, persistence.ErrInvalidRecord)
}

// testWaits: a step's Waits replaces what the row says the instance is
// parked on, on the append-only path and the full update alike; a step
// without SetWaits keeps it; the end clears it.
func testWaits(t *testing.T, st persistence.Store) {
	create(t, st, "w")
	apply(t, st, persistence.Step{Instance: "w", Epoch: 1, History: []persistence.Event{ev(1, "x")},
		Waits: []byte(`{"a":1}`), SetWaits: true})
	if in := instance(t, st, "w"); string(in.Waits) != `{"a":1}` {
		t.Fatalf("after an append with waits: %q", in.Waits)
	}
	apply(t, st, persistence.Step{Instance: "w", Epoch: 1, Status: persistence.StatusWaiting, Waits: []byte(`{"b":2}`), SetWaits: true})
	apply(t, st, persistence.Step{Instance: "w", Epoch: 1, History: []persistence.Event{ev(2, "y")}})
	if in := instance(t, st, "w"); string(in.Waits) != `{"b":2}` || in.Status != persistence.StatusWaiting {
		t.Fatalf("after an update with waits and an append without: %q %s", in.Waits, in.Status)
	}
	// Only waits: the row changes, nothing else.
	apply(t, st, persistence.Step{Instance: "w", Epoch: 1, Waits: []byte(`{"c":3}`), SetWaits: true})
	if in := instance(t, st, "w"); string(in.Waits) != `{"c":3}` || in.HistoryLen != 3 {
		t.Fatalf("after a waits-only step: %q, history %d", in.Waits, in.HistoryLen)
	}
	apply(t, st, persistence.Step{Instance: "w", Epoch: 1, Status: persistence.StatusCompleted, History: []persistence.Event{ev(3, "completed")}})
	if in := instance(t, st, "w"); len(in.Waits) != 0 {
		t.Fatalf("an ended instance still says it waits: %q", in.Waits)
	}
}

// testPublishRun: a step publishing many messages on one channel (as
// PublishBatch does) copies each to every broadcast subscriber in order,
// queues them on a channel without broadcast subscribers, drops them on a
// system channel nobody listens to, and skips a Dedupe ID used before.
func testPublishRun(t *testing.T, st persistence.Store) {
	for _, id := range []string{"r1", "r2", "q1"} {
		create(t, st, id)
	}
	for _, id := range []string{"r1", "r2"} {
		apply(t, st, persistence.Step{Instance: id, Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "news", Mode: persistence.Broadcast}}})
	}
	apply(t, st, persistence.Step{Instance: "q1", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "jobs", Mode: persistence.Competing}}})
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "used", Channel: "elsewhere", Dedupe: true}}})
	var send []persistence.NewMessage
	for i := range 6 {
		send = append(send, persistence.NewMessage{ID: fmt.Sprintf("n%d", i), Channel: "news", Type: "t", Payload: []byte{byte(i)},
			Metadata: map[string]string{"i": fmt.Sprint(i)}})
	}
	send[2].ID, send[2].Dedupe = "used", true
	send[3].Dedupe = true
	for i := range 5 {
		send = append(send, persistence.NewMessage{ID: fmt.Sprintf("j%d", i), Channel: "jobs", Type: "job"})
	}
	for i := range 4 {
		send = append(send, persistence.NewMessage{ID: fmt.Sprintf("s%d", i), Channel: "$nobody"})
	}
	res := apply(t, st, persistence.Step{Send: send})
	if fmt.Sprint(res.Duplicates) != "[used]" {
		t.Fatalf("duplicates = %v, want [used]", res.Duplicates)
	}
	for _, id := range []string{"r1", "r2"} {
		if got := msgIDs(t, st, id); got != "[n0 n1 n3 n4 n5]" {
			t.Fatalf("mailbox of %s = %s, want the broadcasts in order", id, got)
		}
	}
	msgs, err := st.Mailbox(ctx(), "r1", 0)
	if err != nil || msgs[1].Metadata["i"] != "1" || string(msgs[1].Payload) != "\x01" || msgs[1].Type != "t" || msgs[1].Target != "r1" {
		t.Fatalf("a copy = %+v, %v", msgs[1], err)
	}
	if got := msgIDs(t, st, "q1"); got != "[j0 j1 j2 j3 j4]" {
		t.Fatalf("queue seen by q1 = %s, want the jobs in order", got)
	}
	queued := 0
	for _, q := range res.Queued {
		if q.Channel == "jobs" && fmt.Sprint(q.Subscribers) == "[q1]" {
			queued++
		}
	}
	if queued != 5 {
		t.Fatalf("queued = %+v, want the five jobs with their subscriber", res.Queued)
	}
	// Sent again with the same IDs: the Dedupe ones are skipped, the
	// others copied again.
	res = apply(t, st, persistence.Step{Send: send[:6]})
	if fmt.Sprint(res.Duplicates) != "[used n3]" {
		t.Fatalf("second run duplicates = %v", res.Duplicates)
	}
}
