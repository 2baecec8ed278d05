package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// statsString prints channel stats as {channel mode subscribers waiting},
// after checking that Oldest is set exactly where messages wait: its value
// depends on the clock, so callers that care check it themselves.
func statsString(t *testing.T, stats []persistence.ChannelStat) string {
	t.Helper()
	parts := make([]string, len(stats))
	for i, c := range stats {
		if c.Oldest.IsZero() != (c.Waiting == 0) {
			t.Fatalf("channel %s: %d waiting but Oldest %v", c.Channel, c.Waiting, c.Oldest)
		}
		parts[i] = fmt.Sprintf("{%s %s %d %d}", c.Channel, c.Mode, c.Subscribers, c.Waiting)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func channelStat(t *testing.T, st persistence.Store, channel string) persistence.ChannelStat {
	t.Helper()
	stats, err := st.ChannelStats(ctx())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range stats {
		if c.Channel == channel {
			return c
		}
	}
	return persistence.ChannelStat{Channel: channel}
}

// testPruneQueue: PruneQueue deletes queued messages published before the
// cut-off, in however many chunks it takes, and nothing addressed to an
// instance; ChannelStats reports the oldest waiting message.
func testPruneQueue(t *testing.T, st persistence.Store) {
	for _, id := range []string{"w", "fan", "p"} {
		create(t, st, id)
	}
	if n, err := st.PruneQueue(ctx(), time.Now()); err != nil || n != 0 {
		t.Fatalf("prune of an empty store = %d, %v", n, err)
	}
	old := time.Now().Add(-2 * time.Hour)
	older := old.Add(-time.Hour)
	cut := old.Add(time.Hour)

	// Queued with nobody subscribed: an old and a new one on "jobs".
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{
		{ID: "j-old", Channel: "jobs", PublishedAt: old},
		{ID: "j-new", Channel: "jobs"},
	}})
	if c := channelStat(t, st, "jobs"); c.Waiting != 2 || !c.Oldest.Equal(old) {
		t.Fatalf("jobs before prune = %+v, want 2 waiting, oldest %v", c, old)
	}
	// A competing subscriber sees both in its mailbox.
	apply(t, st, persistence.Step{Instance: "w", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "jobs", Mode: persistence.Competing}}})
	seen := mailboxSeqs(t, st, "w")
	if len(seen) != 2 || seen[0].ID != "j-old" {
		t.Fatalf("w's mailbox = %+v", seen)
	}

	// Old messages addressed to instances: a broadcast copy, a direct
	// send on a channel, a send by PID. None may go.
	apply(t, st, persistence.Step{Instance: "fan", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "news", Mode: persistence.Broadcast}}})
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{
		{ID: "n-old", Channel: "news", PublishedAt: older},
		{ID: "d-old", Channel: "pings", Target: "p", PublishedAt: older},
		{ID: "s-old", Target: "p", PublishedAt: older},
	}})

	n, err := st.PruneQueue(ctx(), cut)
	if err != nil || n != 1 {
		t.Fatalf("prune = %d, %v; want 1 (j-old)", n, err)
	}
	if got := ids(t, st, "w"); got != "[j-new]" {
		t.Fatalf("w's mailbox after prune = %s, want [j-new]", got)
	}
	// The competing consumer that had read j-old before the prune cannot
	// take it any more.
	_, err = st.Apply(ctx(), persistence.Step{Instance: "w", Epoch: 1, Consume: []int64{seen[0].Seq}, History: []persistence.Event{ev(1, "received")}})
	wantErr(t, err, persistence.ErrMessageGone)
	if in, _ := st.Instance(ctx(), "w"); in.HistoryLen != 1 {
		t.Fatalf("a step consuming a pruned message left history: %+v", in)
	}
	if got := ids(t, st, "fan"); got != "[n-old]" {
		t.Fatalf("broadcast copy after prune: mailbox = %s", got)
	}
	if got := ids(t, st, "p"); got != "[d-old s-old]" {
		t.Fatalf("addressed mail after prune: mailbox = %s", got)
	}
	if c := channelStat(t, st, "jobs"); c.Waiting != 1 || c.Oldest.Before(cut) {
		t.Fatalf("jobs after prune = %+v, want 1 waiting, published after %v", c, cut)
	}
	if c := channelStat(t, st, "news"); c.Waiting != 1 || !c.Oldest.Equal(older) {
		t.Fatalf("news after prune = %+v, want its copy kept", c)
	}
	// The kept message is still consumed normally.
	apply(t, st, persistence.Step{Instance: "w", Epoch: 1, Consume: []int64{seen[1].Seq}, History: []persistence.Event{ev(1, "received")}})
	if c := channelStat(t, st, "jobs"); c.Waiting != 0 || !c.Oldest.IsZero() || c.Subscribers != 1 {
		t.Fatalf("jobs once empty = %+v, want zero Oldest", c)
	}

	// A backlog larger than any sensible chunk goes whole, and a second
	// prune finds nothing.
	const backlog = 1234
	msgs := make([]persistence.NewMessage, backlog)
	for i := range msgs {
		msgs[i] = persistence.NewMessage{ID: fmt.Sprintf("b%d", i), Channel: "backlog", PublishedAt: old.Add(time.Duration(i))}
	}
	apply(t, st, persistence.Step{Send: msgs})
	if n, err := st.PruneQueue(ctx(), cut); err != nil || n != backlog {
		t.Fatalf("prune of the backlog = %d, %v; want %d", n, err, backlog)
	}
	if n, err := st.PruneQueue(ctx(), cut); err != nil || n != 0 {
		t.Fatalf("second prune = %d, %v; want 0", n, err)
	}
	if c := channelStat(t, st, "backlog"); c.Waiting != 0 {
		t.Fatalf("backlog after prune = %+v", c)
	}
}
