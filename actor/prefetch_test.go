package actor_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// prefetcher takes one job with Prefetch(4) and waits for a plain "go"
// before it ends: the three it claimed ahead sit in its mailbox meanwhile.
var prefetcher = actor.Workflow("prefetcher", func(ctx *actor.Context, _ int) (int, error) {
	if err := ctx.Subscribe("jobs", mailbox.Competing, mailbox.Prefetch(4)); err != nil {
		return 0, err
	}
	m, err := actor.Receive[int](ctx, mailbox.OnChannel("jobs"))
	if err != nil {
		return 0, err
	}
	if _, err := actor.Receive[string](ctx, mailbox.OnChannel("")); err != nil {
		return 0, err
	}
	return m.Value, nil
})

// watcher subscribes to jobs but takes none: its mailbox lists what
// waits in the queue, not what another consumer claimed.
var watcher = actor.Workflow("watcher", func(ctx *actor.Context, _ int) (int, error) {
	if err := ctx.Subscribe("jobs", mailbox.Competing); err != nil {
		return 0, err
	}
	_, err := actor.Receive[string](ctx, mailbox.OnChannel(""))
	return 0, err
})

// collector takes n jobs, one at a time, and returns them.
var collector = actor.Workflow("collector", func(ctx *actor.Context, in struct{ N, Prefetch int }) ([]int, error) {
	if err := ctx.Subscribe("jobs", mailbox.Competing, mailbox.Prefetch(in.Prefetch)); err != nil {
		return nil, err
	}
	var got []int
	for range in.N {
		m, err := actor.Receive[int](ctx, mailbox.OnChannel("jobs"))
		if err != nil {
			return nil, err
		}
		got = append(got, m.Value)
	}
	return got, nil
})

// TestPrefetchClaimsAheadAndGivesBack: a consumer with Prefetch(4) claims
// three jobs ahead with its first; they wait in its mailbox, not in the
// queue, and go back to the queue when it ends, where another consumer
// takes them: every job is received once.
func TestPrefetchClaimsAheadAndGivesBack(t *testing.T) {
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)),
		Workflows: actor.Register(prefetcher, collector, watcher), RecoveryInterval: time.Hour, PassivateAfter: time.Hour})
	ctx := testutil.Ctx(t, 60*time.Second)
	for i := range 10 {
		if _, err := sys.Publish(ctx, "jobs", i); err != nil {
			t.Fatal(err)
		}
	}
	wpid, err := actor.Spawn(ctx, sys, watcher, 0)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := actor.Spawn(ctx, sys, prefetcher, 0)
	if err != nil {
		t.Fatal(err)
	}
	jobsIn := func(pid actor.PID) []int64 {
		ms, err := sys.Mailbox(ctx, pid, 100)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, m := range ms {
			if m.Channel == "jobs" {
				seqs = append(seqs, m.Seq)
			}
		}
		return seqs
	}
	// One received, three claimed ahead: six left in the queue.
	testutil.Eventually(t, 30*time.Second, "three jobs claimed ahead", func() bool { return len(jobsIn(wpid)) == 6 })
	if n := len(jobsIn(pid)); n != 9 {
		t.Fatalf("the prefetcher's mailbox holds %d jobs, want the 3 it claimed and the 6 queued", n)
	}
	if err := sys.Send(ctx, pid, "go"); err != nil {
		t.Fatal(err)
	}
	first, err := actor.Await(ctx, sys, prefetcher, pid)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(jobsIn(wpid)); n != 9 {
		t.Fatalf("%d jobs in the queue after the prefetcher ended, want 9", n)
	}
	// The rest, including the three given back, go to a plain consumer.
	cpid, err := actor.Spawn(ctx, sys, collector, struct{ N, Prefetch int }{9, 0})
	if err != nil {
		t.Fatal(err)
	}
	rest, err := actor.Await(ctx, sys, collector, cpid)
	if err != nil {
		t.Fatal(err)
	}
	all := append([]int{first}, rest...)
	slices.Sort(all)
	if got := fmt.Sprint(all); got != "[0 1 2 3 4 5 6 7 8 9]" {
		t.Fatalf("jobs received %s, want each of 0..9 once", got)
	}
}

// TestPrefetchAcrossRestart: consumers with Prefetch(8) share 200 jobs;
// the node is stopped while they run (claims ahead in their mailboxes) and
// started again on the same file: every job is received exactly once.
func TestPrefetchAcrossRestart(t *testing.T) {
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	consumed := make(chan struct{}, 1000)
	cfg := actor.Config{Store: st, Workflows: actor.Register(collector), RecoveryInterval: time.Hour, PassivateAfter: time.Hour,
		Hooks: hookFunc(func(e actor.HookEvent) {
			if e.Kind == actor.HookMessageConsumed {
				select {
				case consumed <- struct{}{}:
				default: // after the restart nobody counts
				}
			}
		})}
	sys := testutil.StartNode(t, cfg)
	ctx := testutil.Ctx(t, 60*time.Second)
	const consumers, per = 4, 50
	var pids []actor.PID
	for range consumers {
		pid, err := actor.Spawn(ctx, sys, collector, struct{ N, Prefetch int }{per, 8})
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	for i := range consumers * per {
		if _, err := sys.Publish(ctx, "jobs", i); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		<-consumed
	}
	sys, _ = restartNode(t, sys, st, path, cfg)
	var all []int
	for _, pid := range pids {
		got, err := actor.Await(ctx, sys, collector, pid)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, got...)
	}
	slices.Sort(all)
	for i, v := range all {
		if v != i {
			t.Fatalf("jobs received %v, want each of 0..%d once", all, consumers*per-1)
		}
	}
	if len(all) != consumers*per {
		t.Fatalf("%d jobs received, want %d", len(all), consumers*per)
	}
}

// TestPrefetchOptionChecked: Prefetch outside 1..MaxPrefetch, or on a mode
// other than competing, is refused with ErrInvalidInput.
func TestPrefetchOptionChecked(t *testing.T) {
	wf := actor.Workflow("bad-prefetch", func(ctx *actor.Context, in struct {
		Mode mailbox.Mode
		N    int
	}) (string, error) {
		err := ctx.Subscribe(fmt.Sprintf("chan-%s-%d", in.Mode, in.N), in.Mode, mailbox.Prefetch(in.N))
		if err == nil {
			return "ok", nil
		}
		if !errors.Is(err, actor.ErrInvalidInput) {
			return "", err
		}
		return "invalid", nil
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	for _, tc := range []struct {
		mode mailbox.Mode
		n    int
		want string
	}{
		{mailbox.Competing, 8, "ok"}, {mailbox.Competing, mailbox.MaxPrefetch + 1, "invalid"}, {mailbox.Competing, -1, "invalid"},
		{mailbox.Broadcast, 8, "invalid"}, {mailbox.Broadcast, 1, "ok"},
	} {
		pid, err := actor.Spawn(ctx, sys, wf, struct {
			Mode mailbox.Mode
			N    int
		}{tc.mode, tc.n}, actor.WithID(fmt.Sprintf("bad-prefetch-%s-%d", tc.mode, tc.n)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := actor.Await(ctx, sys, wf, pid)
		if err != nil || got != tc.want {
			t.Fatalf("%s prefetch %d: %q, %v; want %q", tc.mode, tc.n, got, err, tc.want)
		}
	}
}

// TestPrefetchedTakenByCatchAll: messages claimed ahead and then taken by a
// receive without a channel filter (from the store) are not served again
// from the prefetched ones: five receives get five different jobs, with no
// crash on the way.
func TestPrefetchedTakenByCatchAll(t *testing.T) {
	wf := actor.Workflow("prefetch-catchall", func(ctx *actor.Context, _ int) ([]int, error) {
		if err := ctx.Subscribe("jobs", mailbox.Competing, mailbox.Prefetch(4)); err != nil {
			return nil, err
		}
		var got []int
		for i := range 5 {
			var filters []mailbox.Filter
			if i == 0 || i == 4 {
				filters = append(filters, mailbox.OnChannel("jobs"))
			}
			m, err := actor.Receive[int](ctx, filters...)
			if err != nil {
				return nil, err
			}
			got = append(got, m.Value)
		}
		return got, nil
	})
	var restarts atomic.Int32
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf),
		Hooks: hookFunc(func(e actor.HookEvent) {
			if e.Kind == actor.HookInstanceRestarted {
				restarts.Add(1)
			}
		})})
	ctx := testutil.Ctx(t, 60*time.Second)
	for i := range 6 {
		if _, err := sys.Publish(ctx, "jobs", i); err != nil {
			t.Fatal(err)
		}
	}
	pid, err := actor.Spawn(ctx, sys, wf, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, v := range got {
		seen[v] = true
	}
	if len(got) != 5 || len(seen) != 5 || restarts.Load() != 0 {
		t.Fatalf("received %v with %d restarts, want 5 different jobs and none", got, restarts.Load())
	}
}

// TestPrefetchedReceiveSeesLinkedFailure: a consumer that holds prefetched
// jobs and has a linked child learns of the child's failure at its next
// receive, as one without prefetch does, instead of working through the
// jobs it holds first.
func TestPrefetchedReceiveSeesLinkedFailure(t *testing.T) {
	var sys *actor.System
	failOnGo := actor.Workflow("fail-on-go", func(ctx *actor.Context, _ int) (int, error) {
		if _, err := actor.Receive[string](ctx); err != nil {
			return 0, err
		}
		return 0, errors.New("child broke")
	})
	// failChild has the child fail and returns once it has, while the
	// consumer waits for this activity.
	failChild := actor.Activity("fail-child", func(ctx context.Context, child string) (int, error) {
		if err := sys.Send(ctx, actor.PID(child), "go"); err != nil {
			return 0, err
		}
		inst, err := sys.AwaitDone(ctx, actor.PID(child))
		if err != nil {
			return 0, err
		}
		if inst.Status != persistence.StatusFailed {
			return 0, fmt.Errorf("child %s", inst.Status)
		}
		return 0, nil
	})
	consumer := actor.Workflow("linked-consumer", func(ctx *actor.Context, _ int) (int, error) {
		if err := ctx.Subscribe("jobs", mailbox.Competing, mailbox.Prefetch(8)); err != nil {
			return 0, err
		}
		child, err := actor.SpawnChild(ctx, failOnGo, 0)
		if err != nil {
			return 0, err
		}
		if _, err := actor.Receive[int](ctx, mailbox.OnChannel("jobs")); err != nil { // claims all 8
			return 0, err
		}
		if _, err := failChild.Run(ctx, string(child)); err != nil {
			return 0, err
		}
		for n := 1; ; n++ {
			if _, err := actor.Receive[int](ctx, mailbox.OnChannel("jobs")); err != nil {
				return n, err
			}
		}
	})
	sys = testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)),
		Workflows:        actor.Register(failOnGo, consumer),
		RecoveryInterval: time.Hour, PassivateAfter: time.Hour})
	ctx := testutil.Ctx(t, 30*time.Second)
	for i := range 8 {
		if _, err := sys.Publish(ctx, "jobs", i); err != nil {
			t.Fatal(err)
		}
	}
	pid, err := actor.Spawn(ctx, sys, consumer, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = actor.Await(ctx, sys, consumer, pid)
	var we *actor.WorkflowError
	if !errors.As(err, &we) || !strings.Contains(we.Message, "child broke") {
		t.Fatalf("consumer with a failed linked child: %v", err)
	}
	info, err := sys.Inspect(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	jobs := 0
	for _, e := range info.History {
		if e.Kind == actor.EventReceived && strings.Contains(string(e.Payload), `"Channel":"jobs"`) {
			jobs++
		}
	}
	if jobs != 1 {
		t.Fatalf("the consumer took %d jobs, want 1: the failure must end it at its first receive after it", jobs)
	}
}
