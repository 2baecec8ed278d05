package storetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/nornlabs/norn/persistence"
)

// testManySubscribers: a message queued on a channel with more competing
// subscribers than persistence.MaxQueuedSubscribers names that many of
// them, distinct, every one a subscriber, and Woken lists the same ones;
// the list moves on, so that consecutive publishes name every subscriber
// in turn; up to the bound every subscriber is named; a message given back
// to the queue is bounded alike; a broadcast still wakes every subscriber.
func testManySubscribers(t *testing.T, st persistence.Store) {
	const consumers, listeners, few = 3 * persistence.MaxQueuedSubscribers, persistence.MaxQueuedSubscribers + 8, 5
	subscribe := func(prefix string, n int, channel string, mode persistence.Mode) []string {
		ids := make([]string, n)
		for i := range n {
			ids[i] = fmt.Sprintf("%s%03d", prefix, i)
			create(t, st, ids[i])
			apply(t, st, persistence.Step{Instance: ids[i], Epoch: 1, Subscribe: []persistence.Subscription{{Channel: channel, Mode: mode}}})
		}
		return ids
	}
	jobs := subscribe("c", consumers, "jobs", persistence.Competing)
	news := subscribe("b", listeners, "news", persistence.Broadcast)
	small := subscribe("s", few, "small", persistence.Competing)

	// checkQueued checks q names a bounded sample of the subscribers all,
	// and returns it.
	checkQueued := func(what string, q persistence.QueuedMessage, all []string, want int) []string {
		t.Helper()
		got := slices.Clone(q.Subscribers)
		slices.Sort(got)
		if len(got) != want || len(slices.Compact(slices.Clone(got))) != want {
			t.Fatalf("%s named %d subscribers %v, want %d distinct", what, len(q.Subscribers), q.Subscribers, want)
		}
		for _, id := range got {
			if !slices.Contains(all, id) {
				t.Fatalf("%s named %s, not a subscriber", what, id)
			}
		}
		return got
	}
	named := map[string]bool{}
	for i := range consumers / persistence.MaxQueuedSubscribers {
		res := apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: fmt.Sprintf("j%d", i), Channel: "jobs", Type: "job"}}})
		if len(res.Queued) != 1 {
			t.Fatalf("publish on jobs queued %+v, want one message", res.Queued)
		}
		got := checkQueued("publish on jobs", res.Queued[0], jobs, persistence.MaxQueuedSubscribers)
		woken := slices.Sorted(slices.Values(res.Woken))
		if !slices.Equal(woken, got) {
			t.Fatalf("publish on jobs woke %v, want the %d it names", res.Woken, len(got))
		}
		for _, id := range got {
			named[id] = true
		}
	}
	if len(named) != consumers {
		t.Fatalf("%d publishes named %d of %d consumers, want each in turn", consumers/persistence.MaxQueuedSubscribers, len(named), consumers)
	}

	// A run of messages on the channel in one step.
	var run []persistence.NewMessage
	for i := range 8 {
		run = append(run, persistence.NewMessage{ID: fmt.Sprintf("r%d", i), Channel: "jobs", Type: "job"})
	}
	res := apply(t, st, persistence.Step{Send: run})
	if len(res.Queued) != len(run) {
		t.Fatalf("a run of %d queued %d messages", len(run), len(res.Queued))
	}
	var runNamed []string
	for _, q := range res.Queued {
		runNamed = append(runNamed, checkQueued("a run on jobs", q, jobs, persistence.MaxQueuedSubscribers)...)
	}
	// Woken may list a subscriber once per message or once per run.
	woken := slices.Compact(slices.Sorted(slices.Values(res.Woken)))
	if runNamed = slices.Compact(slices.Sorted(slices.Values(runNamed))); !slices.Equal(woken, runNamed) {
		t.Fatalf("a run on jobs woke %v, want the %v its messages name", woken, runNamed)
	}

	// Up to the bound, every subscriber.
	res = apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "s0", Channel: "small"}}})
	if len(res.Queued) != 1 || !slices.Equal(checkQueued("publish on small", res.Queued[0], small, few), small) {
		t.Fatalf("publish on small queued %+v, want every subscriber %v", res.Queued, small)
	}

	// A claimed message given back names a bound sample of the others.
	claimer := jobs[0]
	head := mailboxSeqs(t, st, claimer)
	res = apply(t, st, persistence.Step{Instance: claimer, Epoch: 1, Claim: []int64{head[0].Seq}})
	if len(res.Claimed) != 1 {
		t.Fatalf("claim of %d moved %v", head[0].Seq, res.Claimed)
	}
	res = apply(t, st, persistence.Step{Instance: claimer, Epoch: 1, Unsubscribe: []string{"jobs"}})
	if len(res.Queued) != 1 {
		t.Fatalf("unsubscribe gave back %+v, want one message", res.Queued)
	}
	got := checkQueued("a message given back", res.Queued[0], jobs, persistence.MaxQueuedSubscribers)
	if slices.Contains(got, claimer) {
		t.Fatalf("a message given back names %s, which gave it back", claimer)
	}

	// A broadcast wakes every subscriber: each got a copy.
	res = apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "n0", Channel: "news"}}})
	if woken := slices.Sorted(slices.Values(res.Woken)); !slices.Equal(woken, news) || len(res.Queued) != 0 {
		t.Fatalf("broadcast woke %v (queued %v), want all %d subscribers", res.Woken, res.Queued, listeners)
	}
}
