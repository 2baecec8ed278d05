package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// ids lists the message IDs of an instance's mailbox.
func ids(t *testing.T, st persistence.Store, id string) string {
	t.Helper()
	var out []string
	for _, m := range mailboxSeqs(t, st, id) {
		out = append(out, m.ID)
	}
	return fmt.Sprint(out)
}

func wantDuplicates(t *testing.T, res persistence.StepResult, want string) {
	t.Helper()
	if got := fmt.Sprint(res.Duplicates); got != want {
		t.Fatalf("duplicates = %s, want %s", got, want)
	}
}

func testDedupe(t *testing.T, st persistence.Store) {
	for _, id := range []string{"a", "b", "c"} {
		create(t, st, id)
	}
	res := apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "d1", Target: "a", Dedupe: true}}})
	wantDuplicates(t, res, "[]")
	if fmt.Sprint(res.Woken) != "[a]" {
		t.Fatalf("woken = %v", res.Woken)
	}

	// The duplicate is skipped and reported; the rest of the step applies.
	res = apply(t, st, persistence.Step{Instance: "b", Epoch: 1, History: []persistence.Event{ev(1, "sent")},
		AddTimers: []persistence.Timer{{ID: "t", Due: time.Now().Add(time.Hour)}},
		Send: []persistence.NewMessage{
			{ID: "d1", Target: "c", Dedupe: true},
			{ID: "d2", Target: "a", Dedupe: true},
			{ID: "plain", Target: "a"},
		}})
	wantDuplicates(t, res, "[d1]")
	for _, w := range res.Woken {
		if w == "c" {
			t.Fatal("the target of a duplicate was woken")
		}
	}
	if got := ids(t, st, "a"); got != "[d1 d2 plain]" {
		t.Fatalf("mailbox a = %s", got)
	}
	if got := ids(t, st, "c"); got != "[]" {
		t.Fatalf("mailbox c = %s, want the duplicate skipped", got)
	}
	if in, _ := st.Instance(ctx(), "b"); in.HistoryLen != 2 {
		t.Fatalf("b history length = %d: the rest of the step was not applied", in.HistoryLen)
	}
	if ts, _ := st.DueTimers(ctx(), time.Now().Add(2*time.Hour), nil, 0); len(ts) != 1 {
		t.Fatalf("timers = %+v: the rest of the step was not applied", ts)
	}

	// Only Dedupe messages take part: a plain message may repeat an ID, and
	// a plain message's ID is not used for a later Dedupe one.
	res = apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "d1", Target: "a"}, {ID: "plain", Target: "a", Dedupe: true}}})
	wantDuplicates(t, res, "[]")
	// Twice in one step: the second is the duplicate.
	res = apply(t, st, persistence.Step{Send: []persistence.NewMessage{
		{ID: "twice", Target: "a", Dedupe: true}, {ID: "twice", Target: "b", Dedupe: true}}})
	wantDuplicates(t, res, "[twice]")
	if got := ids(t, st, "a"); got != "[d1 d2 plain d1 plain twice]" {
		t.Fatalf("mailbox a = %s", got)
	}
	if got := ids(t, st, "b"); got != "[]" {
		t.Fatalf("mailbox b = %s", got)
	}

	// Broadcast and competing: no copies, no queue entry, nobody woken.
	apply(t, st, persistence.Step{Instance: "b", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "news", Mode: persistence.Broadcast}}})
	apply(t, st, persistence.Step{Instance: "c", Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "news", Mode: persistence.Broadcast}}})
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "n1", Channel: "news", Dedupe: true}, {ID: "j1", Channel: "jobs", Dedupe: true}}})
	res = apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "n1", Channel: "news", Dedupe: true}, {ID: "j1", Channel: "jobs", Dedupe: true}}})
	wantDuplicates(t, res, "[n1 j1]")
	if len(res.Woken) != 0 {
		t.Fatalf("duplicates woke %v", res.Woken)
	}
	if got := ids(t, st, "c"); got != "[n1]" {
		t.Fatalf("mailbox c = %s", got)
	}
	stats, _ := st.ChannelStats(ctx())
	if got := statsString(t, stats); got != "[{jobs  0 1} {news broadcast 2 2}]" {
		t.Fatalf("channel stats = %s", got)
	}

	// A step that fails does not use its IDs.
	_, err := st.Apply(ctx(), persistence.Step{Instance: "b", Epoch: 1, Send: []persistence.NewMessage{{ID: "f1", Target: "c", Dedupe: true}},
		FireTimers: []string{"never-added"}})
	wantErr(t, err, persistence.ErrTimerGone)
	res = apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "f1", Target: "c", Dedupe: true}}})
	wantDuplicates(t, res, "[]")

	// A retried MustDeliver send to an instance that ended since is a
	// duplicate, not an error: the first one was delivered.
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "md", Target: "c", Dedupe: true, MustDeliver: true}}})
	apply(t, st, persistence.Step{Instance: "c", Epoch: 1, Status: persistence.StatusCompleted})
	res = apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "md", Target: "c", Dedupe: true, MustDeliver: true}}})
	wantDuplicates(t, res, "[md]")

	// Pruning forgets IDs first used before the given time; then they can
	// be used again.
	n, err := st.PruneMessageIDs(ctx(), time.Now().Add(-time.Hour))
	if err != nil || n != 0 {
		t.Fatalf("prune of nothing = %d, %v", n, err)
	}
	// d1 d2 plain twice n1 j1 f1 md
	n, err = st.PruneMessageIDs(ctx(), time.Now().Add(time.Second))
	if err != nil || n != 8 {
		t.Fatalf("prune = %d, %v; want 8", n, err)
	}
	res = apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "d1", Target: "a", Dedupe: true}}})
	wantDuplicates(t, res, "[]")
	res = apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "d1", Target: "a", Dedupe: true}}})
	wantDuplicates(t, res, "[d1]")
	if n, err = st.PruneMessageIDs(ctx(), time.Now().Add(time.Second)); err != nil || n != 1 {
		t.Fatalf("second prune = %d, %v; want 1", n, err)
	}
}

// dedupeRace sends one Dedupe message ID from many goroutines at once, over
// the given stores in turn, each in a step that also sends a plain message,
// and checks that exactly one copy arrived and every plain message did.
func dedupeRace(t *testing.T, stores []persistence.Store, rounds, senders int) {
	st := stores[0]
	create(t, st, "a")
	create(t, st, "b")
	for round := 0; round < rounds; round++ {
		id := fmt.Sprint("race-", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		delivered, duplicates := 0, 0
		for g := 0; g < senders; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := stores[g%len(stores)].Apply(ctx(), persistence.Step{Send: []persistence.NewMessage{
					{ID: id, Target: "a", Dedupe: true, Payload: []byte(fmt.Sprint(g))},
					{ID: fmt.Sprintf("extra-%d-%d", round, g), Target: "b"},
				}})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				switch fmt.Sprint(res.Duplicates) {
				case "[]":
					delivered++
				case "[" + id + "]":
					duplicates++
				default:
					t.Errorf("duplicates = %v", res.Duplicates)
				}
			}()
		}
		wg.Wait()
		if delivered != 1 || duplicates != senders-1 {
			t.Fatalf("round %d: %d delivered, %d duplicates; want 1 and %d", round, delivered, duplicates, senders-1)
		}
	}
	got := map[string]int{}
	for _, m := range mailboxSeqs(t, st, "a") {
		got[m.ID]++
	}
	for round := 0; round < rounds; round++ {
		if n := got[fmt.Sprint("race-", round)]; n != 1 {
			t.Fatalf("race-%d arrived %d times", round, n)
		}
	}
	if n := len(mailboxSeqs(t, st, "b")); n != rounds*senders {
		t.Fatalf("%d plain messages arrived, want %d", n, rounds*senders)
	}
}

func testDedupeRace(t *testing.T, st persistence.Store) {
	dedupeRace(t, []persistence.Store{st}, 5, 16)
}
