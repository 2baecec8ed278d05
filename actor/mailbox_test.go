package actor_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// Mailbox semantics (issue 3), checked against real SQLite files and, where it
// matters, from the store's history rather than from what workflows return.

// TestCompetingExactlyOnce: 8 competing consumers, 2,000 messages (a soak,
// NORN_TEST_SOAK=1: 10,000) published from 4 goroutines; the store's
// histories show every published message consumed by exactly one consumer,
// none lost, none left.
func TestCompetingExactlyOnce(t *testing.T) {
	const consumers, publishers = 8, 4
	total := testutil.Soak(t, 2000, 10000)
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	consumer := actor.Workflow("consumer", func(ctx *actor.Context, _ int) (int, error) {
		if err := ctx.Subscribe("work", mailbox.Competing); err != nil {
			return 0, err
		}
		n := 0
		for {
			if _, err := actor.Receive[int](ctx, mailbox.OnChannel("work")); err != nil {
				return n, err // cancelled at the end
			}
			n++
		}
	})
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(consumer)})
	ctx := testutil.Ctx(t, 20*time.Minute)
	var pids []actor.PID
	for i := 0; i < consumers; i++ {
		pid, err := actor.Spawn(ctx, sys, consumer, i)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	testutil.Eventually(t, 30*time.Second, "all consumers subscribed", func() bool {
		s := channelStat(t, sys, "work")
		return s.Subscribers == consumers && s.Mode == mailbox.Competing
	})

	start := time.Now()
	ids := make([][]string, publishers)
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for p := 0; p < publishers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < total/publishers; i++ {
				id, err := sys.Publish(ctx, "work", p*total+i)
				if err != nil {
					errs <- err
					return
				}
				ids[p] = append(ids[p], id)
			}
		}(p)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	publishedIn := time.Since(start)
	published := map[string]bool{}
	for _, l := range ids {
		for _, id := range l {
			if published[id] {
				t.Fatalf("Publish returned message ID %s twice", id)
			}
			published[id] = true
		}
	}
	if len(published) != total {
		t.Fatalf("published %d distinct IDs, want %d", len(published), total)
	}

	// Drained: nothing waits on the channel any more.
	testutil.Eventually(t, 15*time.Minute, "channel drained", func() bool {
		return channelStat(t, sys, "work").Waiting == 0
	})
	t.Logf("published %d messages in %v, all consumed after %v", total, publishedIn.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	for _, pid := range pids {
		if err := sys.Cancel(ctx, pid, "drained"); err != nil {
			t.Fatal(err)
		}
	}
	for _, pid := range pids {
		if _, err := actor.Await(ctx, sys, consumer, pid); !errors.Is(err, actor.ErrCancelled) {
			t.Fatalf("consumer %s: %v, want cancelled", pid, err)
		}
	}

	// From the store: each message was received once, by one consumer.
	seen := map[string]actor.PID{}
	var per []int
	for _, pid := range pids {
		n := 0
		for _, e := range inspect(t, sys, pid).History {
			if e.Kind != "received" {
				continue
			}
			if !published[e.Ref] {
				t.Fatalf("%s received %s, which was never published", pid, e.Ref)
			}
			if other, dup := seen[e.Ref]; dup {
				t.Fatalf("message %s consumed twice: by %s and %s", e.Ref, other, pid)
			}
			seen[e.Ref] = pid
			n++
		}
		per = append(per, n)
	}
	if len(seen) != total {
		t.Fatalf("%d of %d messages consumed; lost %d", len(seen), total, total-len(seen))
	}
	if s := channelStat(t, sys, "work"); s.Waiting != 0 || s.Subscribers != 0 {
		t.Fatalf("after the consumers ended the channel still has %+v", s)
	}
	t.Logf("messages per consumer: %v", per)
}

// TestBroadcastSubscribers: every current subscriber gets each broadcast
// message; a late subscriber gets only messages published after it subscribed.
func TestBroadcastSubscribers(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	sub := actor.Workflow("bsub", func(ctx *actor.Context, _ int) ([]string, error) {
		if err := ctx.Subscribe("news", mailbox.Broadcast); err != nil {
			return nil, err
		}
		var got []string
		for {
			m, err := actor.Receive[string](ctx, mailbox.OnChannel("news"))
			if err != nil {
				return got, err
			}
			if m.Value == "end" {
				return got, nil
			}
			got = append(got, m.Value)
		}
	})
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(sub)})
	ctx := testutil.Ctx(t, 60*time.Second)
	spawnSubscribed := func(n int) []actor.PID {
		var out []actor.PID
		for i := 0; i < n; i++ {
			pid, err := actor.Spawn(ctx, sys, sub, i)
			if err != nil {
				t.Fatal(err)
			}
			waitSubscribed(t, sys, pid, "news")
			out = append(out, pid)
		}
		return out
	}
	early := spawnSubscribed(3)
	publish := func(vals ...string) []string {
		var ids []string
		for _, v := range vals {
			id, err := sys.Publish(ctx, "news", v)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	ids := publish("m1", "m2")
	late := spawnSubscribed(1)[0]
	ids = append(ids, publish("m3", "m4", "end")...)

	for _, pid := range early {
		got, err := actor.Await(ctx, sys, sub, pid)
		if err != nil || fmt.Sprint(got) != "[m1 m2 m3 m4]" {
			t.Fatalf("early subscriber %s got %v, %v; want [m1 m2 m3 m4]", pid, got, err)
		}
		if refs := receivedRefs(inspect(t, sys, pid).History); !slices.Equal(refs, ids) {
			t.Fatalf("early subscriber %s history received %v, want %v", pid, refs, ids)
		}
	}
	got, err := actor.Await(ctx, sys, sub, late)
	if err != nil || fmt.Sprint(got) != "[m3 m4]" {
		t.Fatalf("late subscriber got %v, %v; want [m3 m4]", got, err)
	}
	if refs := receivedRefs(inspect(t, sys, late).History); !slices.Equal(refs, ids[2:]) {
		t.Fatalf("late subscriber history received %v, want %v", refs, ids[2:])
	}
}

// TestChannelModeConflict: subscribing in another mode than the channel's
// subscribers fails with ErrChannelModeConflict naming both modes; sending or
// publishing against the channel's mode fails the same way.
func TestChannelModeConflict(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	type res struct {
		Is  bool
		Msg string
	}
	holder := actor.Workflow("holder", func(ctx *actor.Context, mode string) (int, error) {
		if err := ctx.Subscribe("jobs-"+mode, actor.Mode(mode)); err != nil {
			return 0, err
		}
		_, err := actor.Receive[int](ctx, mailbox.OnChannel("never"))
		return 0, err
	})
	type ask struct{ Channel, Mode string }
	challenger := actor.Workflow("challenger", func(ctx *actor.Context, in ask) (res, error) {
		err := ctx.Subscribe(in.Channel, actor.Mode(in.Mode))
		if err == nil {
			return res{}, errors.New("subscribe succeeded")
		}
		return res{Is: errors.Is(err, actor.ErrChannelModeConflict), Msg: err.Error()}, nil
	})
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(holder, challenger)})
	ctx := testutil.Ctx(t, 60*time.Second)
	for _, tc := range []struct{ have, want mailbox.Mode }{
		{mailbox.Competing, mailbox.Broadcast},
		{mailbox.Broadcast, mailbox.Direct},
		{mailbox.Direct, mailbox.Competing},
	} {
		h, err := actor.Spawn(ctx, sys, holder, string(tc.have))
		if err != nil {
			t.Fatal(err)
		}
		channel := "jobs-" + string(tc.have)
		waitSubscribed(t, sys, h, channel)
		c, err := actor.Spawn(ctx, sys, challenger, ask{channel, string(tc.want)})
		if err != nil {
			t.Fatal(err)
		}
		r, err := actor.Await(ctx, sys, challenger, c)
		if err != nil {
			t.Fatalf("%s vs %s: %v", tc.have, tc.want, err)
		}
		if !r.Is || !strings.Contains(r.Msg, string(tc.have)) || !strings.Contains(r.Msg, string(tc.want)) || !strings.Contains(r.Msg, channel) {
			t.Fatalf("%s vs %s: error %q (errors.Is ErrChannelModeConflict: %v); want it to name the channel and both modes", tc.have, tc.want, r.Msg, r.Is)
		}
		if subs := inspect(t, sys, c).Subscriptions; len(subs) != 0 {
			t.Fatalf("failed subscribe left subscriptions %v", subs)
		}
		// From outside: sending against the channel's mode.
		switch tc.have {
		case mailbox.Competing, mailbox.Broadcast:
			err = sys.SendOn(ctx, channel, h, 1)
		case mailbox.Direct:
			_, err = sys.Publish(ctx, channel, 1)
		}
		if !errors.Is(err, actor.ErrChannelModeConflict) || !strings.Contains(err.Error(), string(tc.have)) {
			t.Fatalf("send against a %s channel: %v", tc.have, err)
		}
		if err := sys.Cancel(ctx, h, "done"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDirectIsolation: SendOn(channel, A, m) reaches only A, even when B is
// subscribed and receiving on the same channel.
func TestDirectIsolation(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	wf := actor.Workflow("dm", func(ctx *actor.Context, _ int) ([]string, error) {
		if err := ctx.Subscribe("dm", mailbox.Direct); err != nil {
			return nil, err
		}
		var got []string
		for {
			m, err := actor.Receive[string](ctx, mailbox.OnChannel("dm"))
			if err != nil {
				return got, err
			}
			if m.Value == "end" {
				return got, nil
			}
			got = append(got, m.Value)
		}
	})
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 60*time.Second)
	a, _ := actor.Spawn(ctx, sys, wf, 1)
	b, _ := actor.Spawn(ctx, sys, wf, 2)
	waitSubscribed(t, sys, a, "dm")
	waitSubscribed(t, sys, b, "dm")
	// All of A's mail arrives before B's "end", so if B could see it, B would
	// have taken it first (arrival order).
	for i := 0; i < 5; i++ {
		if err := sys.SendOn(ctx, "dm", a, fmt.Sprintf("a%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sys.SendOn(ctx, "dm", b, "b0"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []actor.PID{b, a} {
		if err := sys.SendOn(ctx, "dm", p, "end"); err != nil {
			t.Fatal(err)
		}
	}
	gotB, err := actor.Await(ctx, sys, wf, b)
	if err != nil || fmt.Sprint(gotB) != "[b0]" {
		t.Fatalf("B got %v, %v; want [b0]", gotB, err)
	}
	gotA, err := actor.Await(ctx, sys, wf, a)
	if err != nil || fmt.Sprint(gotA) != "[a0 a1 a2 a3 a4]" {
		t.Fatalf("A got %v, %v; want [a0 a1 a2 a3 a4]", gotA, err)
	}
	if n := len(receivedRefs(inspect(t, sys, b).History)); n != 2 {
		t.Fatalf("B's history has %d received events, want 2", n)
	}
}

// TestSendBeforeReceive: messages sent before the addressee calls Receive
// wait for it, in order.
func TestSendBeforeReceive(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	g := newGate("hold")
	wf := actor.Workflow("late-reader", func(ctx *actor.Context, _ int) ([]int, error) {
		if _, err := g.act.Run(ctx, 0); err != nil {
			return nil, err
		}
		var got []int
		for i := 0; i < 3; i++ {
			m, err := actor.Receive[int](ctx)
			if err != nil {
				return got, err
			}
			got = append(got, m.Value)
		}
		return got, nil
	})
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 60*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, 0)
	if err != nil {
		t.Fatal(err)
	}
	g.waitEntered(t)
	for i := 1; i <= 3; i++ {
		if err := sys.Send(ctx, pid, i*10); err != nil {
			t.Fatal(err)
		}
	}
	if d := inspect(t, sys, pid).MailboxDepth; d != 3 {
		t.Fatalf("mailbox depth before Receive = %d, want 3", d)
	}
	g.open()
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil || fmt.Sprint(got) != "[10 20 30]" {
		t.Fatalf("got %v, %v; want [10 20 30]", got, err)
	}
}

// TestSelectiveReceiveOrder: a filtered Receive skips non-matching messages,
// which stay in order and are taken later in arrival order.
func TestSelectiveReceiveOrder(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	g := newGate("hold")
	wf := actor.Workflow("selective", func(ctx *actor.Context, _ int) ([]string, error) {
		if _, err := g.act.Run(ctx, 0); err != nil {
			return nil, err
		}
		var got []string
		take := func(f ...mailbox.Filter) error {
			m, err := actor.Receive[string](ctx, f...)
			if err == nil {
				got = append(got, m.Value)
			}
			return err
		}
		steps := [][]mailbox.Filter{
			{mailbox.OnChannel("b")},
			{mailbox.OnChannel("")}, // plain sends by PID
			{mailbox.Match(func(m mailbox.Message) bool { return string(m.Payload) == `"a3"` })},
			{}, {}, {}, {},
		}
		for _, f := range steps {
			if err := take(f...); err != nil {
				return got, err
			}
		}
		return got, nil
	})
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 60*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 0)
	g.waitEntered(t)
	for _, m := range []struct{ ch, v string }{{"a", "a1"}, {"b", "b1"}, {"a", "a2"}, {"", "c1"}, {"b", "b2"}, {"a", "a3"}, {"a", "a4"}} {
		var err error
		if m.ch == "" {
			err = sys.Send(ctx, pid, m.v)
		} else {
			err = sys.SendOn(ctx, m.ch, pid, m.v)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	g.open()
	got, err := actor.Await(ctx, sys, wf, pid)
	// b1 (first on b), c1 (first plain), a3 (predicate), then the rest in arrival order.
	if want := "[b1 c1 a3 a1 a2 b2 a4]"; err != nil || fmt.Sprint(got) != want {
		t.Fatalf("got %v, %v; want %s", got, err, want)
	}
}

// TestLostWakeupRace: a sender commits a message at random tiny offsets from
// the moment the receiver finds its mailbox empty and parks (or passivates),
// over many iterations. Every message must be received: the workflows must
// finish although no safety net could rescue them (the recovery scan is
// effectively off and, without unrelated mail, nothing else wakes them), so a
// lost wake-up stalls the receiver until the deadline.
func TestLostWakeupRace(t *testing.T) {
	for _, tc := range []struct {
		name string
		wakeRace
	}{
		// Parked activations wait for the wake-up.
		{"parked", wakeRace{passivate: time.Hour, iters: 60, maxOffset: 3 * time.Millisecond}},
		// Unrelated mail also wakes the receivers, which scan, find no match
		// and park again: more scan-then-park windows.
		{"parked-noise", wakeRace{passivate: time.Hour, iters: 40, maxOffset: 3 * time.Millisecond, noise: true}},
		// Activations passivate 10 ms (the minimum) after parking, so
		// wake-ups also race passivation and re-activation.
		{"passivating", wakeRace{passivate: 10 * time.Millisecond, iters: 80, maxOffset: 20 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) { lostWakeupRace(t, tc.wakeRace) })
	}
}

type wakeRace struct {
	passivate time.Duration // Config.PassivateAfter
	iters     int           // messages per receiver, one at a time
	maxOffset time.Duration // each send waits 0..maxOffset after the previous ack
	noise     bool          // also send unrelated mail to the receivers
}

func lostWakeupRace(t *testing.T, wr wakeRace) {
	const receivers = 4
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	var acks sync.Map // instance ID -> chan int
	ack := actor.Activity("ack", func(ctx context.Context, i int) (int, error) {
		info, _ := actor.Info(ctx)
		c, _ := acks.Load(info.InstanceID)
		select {
		case c.(chan int) <- i:
		default: // a re-run after a restart; the first run was counted
		}
		return i, nil
	})
	wf := actor.Workflow("pingee", func(ctx *actor.Context, n int) (int, error) {
		for i := 0; i < n; i++ {
			want := i
			m, err := actor.Receive[int](ctx, mailbox.OnChannel("ping"),
				mailbox.Match(func(m mailbox.Message) bool { return string(m.Payload) == fmt.Sprint(want) }))
			if err != nil {
				return i, err
			}
			if _, err := ack.Run(ctx, m.Value); err != nil {
				return i, err
			}
		}
		return n, nil
	})
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf),
		PassivateAfter: wr.passivate, RecoveryInterval: time.Hour})
	// A failed iteration cancels ctx, so that the test ends at once.
	ctx, cancel := context.WithCancel(testutil.Ctx(t, 3*time.Minute))
	defer cancel()

	var wg sync.WaitGroup
	stopNoise := make(chan struct{})
	failures := make(chan string, receivers)
	var pids []actor.PID
	for r := 0; r < receivers; r++ {
		id := fmt.Sprintf("pingee-%d", r)
		c := make(chan int, 1)
		acks.Store(id, c)
		pid, err := actor.Spawn(ctx, sys, wf, wr.iters, actor.WithID(id))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 1))
			for i := 0; i < wr.iters; i++ {
				if i > 0 {
					select {
					case got := <-c:
						if got != i-1 {
							failures <- fmt.Sprintf("%s acked %d, want %d", pid, got, i-1)
							cancel()
							return
						}
					case <-time.After(15 * time.Second):
						info, _ := sys.Inspect(ctx, pid)
						h := info.History
						if len(h) > 3 {
							h = h[len(h)-3:]
						}
						failures <- fmt.Sprintf("%s never received message %d (lost wake-up?): status %s, lease %q, active here %v, mailbox %d, last events %s",
							pid, i-1, info.Status, info.Node, info.Active, info.MailboxDepth, kindsOf(h))
						cancel()
						return
					}
				}
				// Land the commit anywhere from "before the scan" to "well after
				// parking": the ack's own commit and the next scan take about a
				// millisecond or two.
				spin(time.Duration(rng.Int64N(int64(wr.maxOffset))))
				if err := sys.SendOn(ctx, "ping", pid, i); err != nil {
					failures <- err.Error()
					cancel()
					return
				}
			}
		}(uint64(r))
	}
	// Unrelated mail: wakes the receivers, which scan, find no match and park
	// again; it stays in their mailboxes.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if !wr.noise {
			return
		}
		rng := rand.New(rand.NewPCG(99, 2))
		for n := 0; ; n++ {
			select {
			case <-stopNoise:
				return
			case <-time.After(time.Duration(rng.IntN(5000)) * time.Microsecond):
			}
			_ = sys.SendOn(ctx, "noise", pids[rng.IntN(len(pids))], n)
		}
	}()
	for _, pid := range pids {
		got, err := actor.Await(ctx, sys, wf, pid)
		if err != nil || got != wr.iters {
			close(stopNoise)
			wg.Wait()
			close(failures)
			for f := range failures {
				t.Error(f)
			}
			t.Fatalf("%s = %d, %v; want %d", pid, got, err, wr.iters)
		}
	}
	close(stopNoise)
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Fatal(f)
	}
	for _, pid := range pids {
		h := inspect(t, sys, pid).History
		if n := len(receivedRefs(h)); n != wr.iters {
			t.Fatalf("%s history has %d received events, want %d", pid, n, wr.iters)
		}
	}
}

// spin waits about d without parking the goroutine for short d, so offsets
// below the timer granularity are really exercised.
func spin(d time.Duration) {
	if d > 500*time.Microsecond {
		time.Sleep(d)
		return
	}
	end := time.Now().Add(d)
	for time.Now().Before(end) {
	}
}

// TestReceiveReplayAfterRestart: a workflow that has received some messages
// is stopped while parked; a new System on the same file replays the same
// messages in the same order and receives the rest; each message appears in
// history exactly once.
func TestReceiveReplayAfterRestart(t *testing.T) {
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	wf := actor.Workflow("collector", func(ctx *actor.Context, n int) ([]string, error) {
		var got []string
		for i := 0; i < n; i++ {
			m, err := actor.Receive[string](ctx)
			if err != nil {
				return got, err
			}
			got = append(got, m.Value)
		}
		return got, nil
	})
	cfg := actor.Config{Store: st, Workflows: actor.Register(wf), NodeID: "first"}
	sys := testutil.StartNode(t, cfg)
	ctx := testutil.Ctx(t, 60*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, 6)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"m1", "m2", "m3"} {
		if err := sys.Send(ctx, pid, v); err != nil {
			t.Fatal(err)
		}
	}
	// Parked in the 4th Receive: the first three are committed.
	waitHistory(t, sys, pid, "3 messages received", func(h []actor.HistoryEvent) bool { return len(receivedRefs(h)) == 3 })
	before := receivedRefs(inspect(t, sys, pid).History)

	cfg.NodeID = "second"
	sys, _ = restartNode(t, sys, st, path, cfg)
	for _, v := range []string{"m4", "m5", "m6"} {
		if err := sys.Send(ctx, pid, v); err != nil {
			t.Fatal(err)
		}
	}
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil || fmt.Sprint(got) != "[m1 m2 m3 m4 m5 m6]" {
		t.Fatalf("got %v, %v; want [m1 m2 m3 m4 m5 m6]", got, err)
	}
	after := receivedRefs(inspect(t, sys, pid).History)
	if len(after) != 6 || !slices.Equal(after[:3], before) {
		t.Fatalf("received events before restart %v, after %v", before, after)
	}
	if dup := duplicates(after); len(dup) > 0 {
		t.Fatalf("messages received twice: %v", dup)
	}
}

// TestDecodeErrorRecorded: a payload that does not decode as T gives a
// *DecodeError naming the message ID and type; the message is consumed and
// recorded, and after a restart replay gives the same error.
func TestDecodeErrorRecorded(t *testing.T) {
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	type out struct {
		MessageID, Type, Raw, Err string
		Value                     int
	}
	wf := actor.Workflow("strict", func(ctx *actor.Context, _ int) (out, error) {
		_, err := actor.Receive[int](ctx, mailbox.OnChannel(""))
		var de *actor.DecodeError
		if !errors.As(err, &de) {
			return out{}, fmt.Errorf("want a DecodeError, got %v", err)
		}
		// Park so that the test can restart the node; the result is computed
		// after the restart, from replay.
		next, err := actor.Receive[int](ctx, mailbox.OnChannel("next"))
		if err != nil {
			return out{}, err
		}
		return out{MessageID: de.MessageID, Type: de.Type, Raw: string(de.Message), Err: de.Error(), Value: next.Value}, nil
	})
	cfg := actor.Config{Store: st, Workflows: actor.Register(wf)}
	sys := testutil.StartNode(t, cfg)
	ctx := testutil.Ctx(t, 60*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 0)
	// Named int but not one: Receive[int] takes it and fails to decode (a
	// message of another type, or one without a type that does not decode,
	// would stay in the mailbox).
	if _, err := sys.Deliver(ctx, actor.Outgoing{Target: pid, Payload: []byte(`"not a number"`), Type: "int"}); err != nil {
		t.Fatal(err)
	}
	waitHistory(t, sys, pid, "bad message consumed", func(h []actor.HistoryEvent) bool { return len(receivedRefs(h)) == 1 })
	info := inspect(t, sys, pid)
	ref := receivedRefs(info.History)[0]
	if info.MailboxDepth != 0 {
		t.Fatalf("undecodable message still in the mailbox (depth %d)", info.MailboxDepth)
	}
	sys, _ = restartNode(t, sys, st, path, cfg)
	if err := sys.SendOn(ctx, "next", pid, 7); err != nil {
		t.Fatal(err)
	}
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil {
		t.Fatal(err)
	}
	if got.MessageID != ref || got.Type != "int" || got.Raw != `"not a number"` || got.Value != 7 ||
		!strings.Contains(got.Err, ref) || !strings.Contains(got.Err, "int") {
		t.Fatalf("after replay: %+v; want message %s, type int", got, ref)
	}
	if refs := receivedRefs(inspect(t, sys, pid).History); len(refs) != 2 || refs[0] != ref {
		t.Fatalf("received events %v", refs)
	}
}

// TestSendToUnknownPID: ctx.Send to a PID that does not exist fails with
// ErrNotFound, and replay after a restart returns the same error.
func TestSendToUnknownPID(t *testing.T) {
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	type out struct {
		NotFound bool
		Err      string
	}
	wf := actor.Workflow("sender", func(ctx *actor.Context, _ int) (out, error) {
		err := ctx.Send("no-such-instance", "hello")
		if _, rerr := actor.Receive[int](ctx, mailbox.OnChannel("next")); rerr != nil {
			return out{}, rerr
		}
		if err == nil {
			return out{}, nil
		}
		return out{NotFound: errors.Is(err, actor.ErrNotFound), Err: err.Error()}, nil
	})
	cfg := actor.Config{Store: st, Workflows: actor.Register(wf)}
	sys := testutil.StartNode(t, cfg)
	ctx := testutil.Ctx(t, 60*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 0)
	var first string
	waitHistory(t, sys, pid, "send recorded", func(h []actor.HistoryEvent) bool {
		for _, e := range h {
			if e.Kind == "sent" {
				first = e.Error
				return true
			}
		}
		return false
	})
	if first == "" {
		t.Fatal("the failed send is recorded without its error")
	}
	sys, _ = restartNode(t, sys, st, path, cfg)
	if err := sys.SendOn(ctx, "next", pid, 1); err != nil {
		t.Fatal(err)
	}
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil {
		t.Fatal(err)
	}
	if !got.NotFound || !strings.Contains(got.Err, "no-such-instance") {
		t.Fatalf("replayed send error = %+v; want ErrNotFound naming the PID", got)
	}
	sent := 0
	for _, e := range inspect(t, sys, pid).History {
		if e.Kind == "sent" {
			sent++
		}
	}
	if sent != 1 {
		t.Fatalf("%d sent events, want 1", sent)
	}
}

// TestMailboxInspectAndStats: Inspect reports mailbox depth and
// subscriptions; ChannelStats reports waiting messages and subscribers.
func TestMailboxInspectAndStats(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	wf := actor.Workflow("hoarder", func(ctx *actor.Context, _ int) (int, error) {
		if err := ctx.Subscribe("news", mailbox.Broadcast); err != nil {
			return 0, err
		}
		if err := ctx.Subscribe("jobs", mailbox.Competing); err != nil {
			return 0, err
		}
		_, err := actor.Receive[int](ctx, mailbox.OnChannel("never"))
		return 0, err
	})
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 60*time.Second)
	p1, _ := actor.Spawn(ctx, sys, wf, 1)
	p2, _ := actor.Spawn(ctx, sys, wf, 2)
	for _, p := range []actor.PID{p1, p2} {
		waitSubscribed(t, sys, p, "jobs")
	}
	for i := 0; i < 3; i++ {
		if _, err := sys.Publish(ctx, "news", i); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		if _, err := sys.Publish(ctx, "jobs", i); err != nil {
			t.Fatal(err)
		}
	}
	if err := sys.Send(ctx, p1, "direct"); err != nil {
		t.Fatal(err)
	}
	info := inspect(t, sys, p1)
	// 3 broadcast copies + 2 competing messages it could take + 1 direct.
	if info.MailboxDepth != 6 {
		t.Fatalf("p1 mailbox depth = %d, want 6", info.MailboxDepth)
	}
	if fmt.Sprint(subsOf(info.Subscriptions)) != "[jobs:competing news:broadcast]" {
		t.Fatalf("p1 subscriptions = %v", info.Subscriptions)
	}
	if d := inspect(t, sys, p2).MailboxDepth; d != 5 {
		t.Fatalf("p2 mailbox depth = %d, want 5", d)
	}
	news, jobs := channelStat(t, sys, "news"), channelStat(t, sys, "jobs")
	if news.Mode != mailbox.Broadcast || news.Subscribers != 2 || news.Waiting != 6 {
		t.Fatalf("news stats = %+v; want broadcast, 2 subscribers, 6 waiting copies", news)
	}
	if jobs.Mode != mailbox.Competing || jobs.Subscribers != 2 || jobs.Waiting != 2 {
		t.Fatalf("jobs stats = %+v; want competing, 2 subscribers, 2 waiting", jobs)
	}
	for _, p := range []actor.PID{p1, p2} {
		if err := sys.Cancel(ctx, p, "done"); err != nil {
			t.Fatal(err)
		}
		if _, err := actor.Await(ctx, sys, wf, p); !errors.Is(err, actor.ErrCancelled) {
			t.Fatal(err)
		}
	}
	// Ended instances drop their subscriptions and copies; the competing
	// queue keeps its messages for future consumers.
	news, jobs = channelStat(t, sys, "news"), channelStat(t, sys, "jobs")
	if news.Subscribers != 0 || news.Waiting != 0 || jobs.Subscribers != 0 || jobs.Waiting != 2 {
		t.Fatalf("after the end: news %+v, jobs %+v", news, jobs)
	}
}

// ---- helpers shared by the mailbox and timer tests ----

// gate is an activity that blocks until the test opens it.
type gate struct {
	ch      chan struct{}
	entered chan struct{}
	once    sync.Once
	act     *actor.ActivityDef[int, int]
}

func newGate(name string) *gate {
	g := &gate{ch: make(chan struct{}), entered: make(chan struct{}, 100)}
	g.act = actor.Activity(name, func(ctx context.Context, n int) (int, error) {
		g.entered <- struct{}{}
		select {
		case <-g.ch:
			return n, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	return g
}

func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("workflow never reached the gate")
	}
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

func inspect(t *testing.T, sys *actor.System, pid actor.PID) actor.InstanceInfo {
	t.Helper()
	info, err := sys.Inspect(context.Background(), pid)
	if err != nil {
		t.Fatalf("inspect %s: %v", pid, err)
	}
	return info
}

// waitHistory waits until the stored history of pid satisfies cond.
func waitHistory(t *testing.T, sys *actor.System, pid actor.PID, what string, cond func([]actor.HistoryEvent) bool) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, string(pid)+": "+what, func() bool { return cond(inspect(t, sys, pid).History) })
}

func waitSubscribed(t *testing.T, sys *actor.System, pid actor.PID, channel string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, string(pid)+" subscribed to "+channel, func() bool {
		for _, s := range inspect(t, sys, pid).Subscriptions {
			if s.Channel == channel {
				return true
			}
		}
		return false
	})
}

func channelStat(t *testing.T, sys *actor.System, channel string) actor.ChannelStat {
	t.Helper()
	stats, err := sys.ChannelStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		if s.Channel == channel {
			return s
		}
	}
	return actor.ChannelStat{Channel: channel}
}

func subsOf(subs []actor.Subscription) []string {
	var out []string
	for _, s := range subs {
		out = append(out, s.Channel+":"+string(s.Mode))
	}
	return out
}

// receivedRefs lists the message IDs of the received events, in order.
func receivedRefs(h []actor.HistoryEvent) []string {
	var out []string
	for _, e := range h {
		if e.Kind == "received" {
			out = append(out, e.Ref)
		}
	}
	return out
}

func countKind(h []actor.HistoryEvent, kind actor.EventKind) int {
	n := 0
	for _, e := range h {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

func duplicates(ss []string) []string {
	seen := map[string]bool{}
	var dup []string
	for _, s := range ss {
		if seen[s] {
			dup = append(dup, s)
		}
		seen[s] = true
	}
	return dup
}

// stopNode stops sys and fails the test if it does not stop cleanly.
func stopNode(t *testing.T, sys *actor.System) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sys.Stop(ctx); err != nil {
		t.Fatalf("stop node: %v", err)
	}
}

// restartNode stops sys, closes its store and starts a new System (cfg, with
// cfg.Store replaced) on a new store over the same file, as a restarted
// process would.
func restartNode(t *testing.T, sys *actor.System, st *sqlite.Store, path string, cfg actor.Config) (*actor.System, *sqlite.Store) {
	t.Helper()
	stopNode(t, sys)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st2 := testutil.OpenSQLite(t, path)
	cfg.Store = st2
	return testutil.StartNode(t, cfg), st2
}
