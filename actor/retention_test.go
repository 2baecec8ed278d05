package actor_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
)

// queueStat is the ChannelStats entry of one channel (zero if it has none).
func queueStat(t *testing.T, sys *actor.System, channel string) actor.ChannelStat {
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

// TestQueueRetentionLateConsumer: a message published on a channel without
// subscribers waits in its queue, shows in ChannelStats with its publish
// time, and goes to a competing subscriber that arrives later.
func TestQueueRetentionLateConsumer(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	worker := actor.Workflow("late-worker", func(ctx *actor.Context, _ int) (string, error) {
		if err := ctx.Subscribe("jobs", mailbox.Competing); err != nil {
			return "", err
		}
		r, err := actor.Receive[string](ctx, mailbox.OnChannel("jobs"))
		return r.Value, err
	})
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(worker)})
	ctx := testutil.Ctx(t, 60*time.Second)

	before := time.Now()
	if _, err := sys.Publish(ctx, "jobs", "job-1"); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	jobs := queueStat(t, sys, "jobs")
	if jobs.Waiting != 1 || jobs.Subscribers != 0 || jobs.Oldest.Before(before) || jobs.Oldest.After(after) {
		t.Fatalf("jobs = %+v; want 1 waiting, no subscribers, oldest between %v and %v", jobs, before, after)
	}

	pid, err := actor.Spawn(ctx, sys, worker, 1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := actor.Await(ctx, sys, worker, pid)
	if err != nil || got != "job-1" {
		t.Fatalf("late competing subscriber got %q, %v; want job-1", got, err)
	}
	if jobs := queueStat(t, sys, "jobs"); jobs.Waiting != 0 || !jobs.Oldest.IsZero() {
		t.Fatalf("jobs after consumption = %+v; want nothing waiting, zero Oldest", jobs)
	}
}

// TestQueueRetentionPrunes: a queued message nobody consumes is deleted
// once older than Config.QueueRetention; a broadcast subscriber that came
// after it was published never receives it.
func TestQueueRetentionPrunes(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	listener := actor.Workflow("late-listener", func(ctx *actor.Context, _ int) (string, error) {
		if err := ctx.Subscribe("orphan", mailbox.Broadcast); err != nil {
			return "", err
		}
		r, err := actor.Receive[string](ctx, mailbox.OnChannel("orphan"))
		return r.Value, err
	})
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(listener),
		QueueRetention: time.Second, RecoveryInterval: 20 * time.Millisecond})
	ctx := testutil.Ctx(t, 60*time.Second)

	if _, err := sys.Publish(ctx, "orphan", "stale"); err != nil {
		t.Fatal(err)
	}
	if s := queueStat(t, sys, "orphan"); s.Waiting != 1 || s.Oldest.IsZero() {
		t.Fatalf("orphan = %+v; want 1 waiting with its publish time", s)
	}
	pid, err := actor.Spawn(ctx, sys, listener, 1)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "listener subscribed", func() bool {
		s := queueStat(t, sys, "orphan")
		return s.Subscribers == 1 && s.Mode == mailbox.Broadcast
	})
	info, err := sys.Inspect(ctx, pid)
	if err != nil || info.MailboxDepth != 0 {
		t.Fatalf("late broadcast subscriber: mailbox depth %d, %v; want 0 (it subscribed after the publish)", info.MailboxDepth, err)
	}

	testutil.Eventually(t, 30*time.Second, "the stale queued message pruned", func() bool {
		return queueStat(t, sys, "orphan").Waiting == 0
	})
	if s := queueStat(t, sys, "orphan"); !s.Oldest.IsZero() || s.Subscribers != 1 {
		t.Fatalf("orphan after prune = %+v; want zero Oldest, the listener still subscribed", s)
	}

	// What is published now reaches the subscriber, as usual.
	if _, err := sys.Publish(ctx, "orphan", "fresh"); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, sys, listener, pid); err != nil || got != "fresh" {
		t.Fatalf("listener got %q, %v; want fresh", got, err)
	}
}

// TestQueueRetentionDefault: without QueueRetention the node prunes, from
// its start on, the queued messages published more than 7 days ago.
func TestQueueRetentionDefault(t *testing.T) {
	st := &testutil.InterceptStore{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t))}
	pruned := make(chan time.Time, 1)
	st.BeforePruneQueue = func(before time.Time) {
		select {
		case pruned <- before:
		default:
		}
	}
	const week = 7 * 24 * time.Hour
	t0 := time.Now()
	testutil.StartNode(t, actor.Config{Store: st})
	var before time.Time
	select {
	case before = <-pruned:
	case <-time.After(30 * time.Second):
		t.Fatal("the queue was never pruned")
	}
	if t1 := time.Now(); before.Before(t0.Add(-week)) || before.After(t1.Add(-week)) {
		t.Fatalf("pruned before %v; want between %v and %v", before, t0.Add(-week), t1.Add(-week))
	}
}

// TestQueueRetentionValidated: a retention below a second is rejected.
func TestQueueRetentionValidated(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	_, err := actor.Start(context.Background(), actor.Config{Store: st, QueueRetention: 500 * time.Millisecond, Logger: testutil.Logger()})
	if !errors.Is(err, actor.ErrInvalidInput) || !strings.Contains(err.Error(), "Config.QueueRetention") {
		t.Fatalf("Start with QueueRetention 500ms: %v; want ErrInvalidInput naming the field", err)
	}
}
