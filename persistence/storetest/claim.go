package storetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/nornlabs/norn/persistence"
)

// testClaim: a competing consumer claims queued messages ahead into its own
// mailbox (Step.Claim), skipping those already taken; the other consumer no
// longer sees them; they go back to the queue, with a wake for the
// remaining consumer, when the claimer unsubscribes from their channel or
// ends, and claiming nothing that is queued changes nothing.
func testClaim(t *testing.T, st persistence.Store) {
	for _, id := range []string{"a", "b"} {
		create(t, st, id)
		apply(t, st, persistence.Step{Instance: id, Epoch: 1, Subscribe: []persistence.Subscription{
			{Channel: "jobs", Mode: persistence.Competing}, {Channel: "other", Mode: persistence.Competing}}})
	}
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "direct", Target: "a"}}})
	for i := range 6 {
		apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: fmt.Sprintf("j%d", i), Channel: "jobs", Type: "job"}}})
	}
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "o0", Channel: "other"}}})
	ids := func(id string) []string {
		var out []string
		for _, m := range mailboxSeqs(t, st, id) {
			out = append(out, m.ID)
		}
		return out
	}
	seqOf := map[string]int64{}
	for _, m := range mailboxSeqs(t, st, "a") {
		seqOf[m.ID] = m.Seq
	}

	// a consumes j0 and claims j1, j2 and j3; b consumed j2 first.
	apply(t, st, persistence.Step{Instance: "b", Epoch: 1, Consume: []int64{seqOf["j2"]}})
	res := apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Consume: []int64{seqOf["j0"]},
		Claim: []int64{seqOf["j1"], seqOf["j2"], seqOf["j3"]}})
	if got, want := fmt.Sprint(sorted(res.Claimed)), fmt.Sprint([]int64{seqOf["j1"], seqOf["j3"]}); got != want {
		t.Fatalf("claimed %s, want %s", got, want)
	}
	if got := fmt.Sprint(ids("a")); got != "[direct j1 j3 j4 j5 o0]" {
		t.Fatalf("a's mailbox after the claim = %s", got)
	}
	if got := fmt.Sprint(ids("b")); got != "[j4 j5 o0]" {
		t.Fatalf("b's mailbox after a's claim = %s", got)
	}
	for _, m := range mailboxSeqs(t, st, "a") {
		if (m.ID == "j1" || m.ID == "j3") && (m.Target != "a" || m.Channel != "jobs" || m.Type != "job") {
			t.Fatalf("claimed message = %+v, want target a, channel jobs, type job", m)
		}
	}
	// b cannot consume what a claimed... as a competing message it is
	// gone from the queue, but a may consume it.
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Consume: []int64{seqOf["j1"]}})

	// Unsubscribing from jobs returns j3 (not the direct message), and
	// wakes b for it.
	res = apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Unsubscribe: []string{"jobs"}})
	if len(res.Queued) != 1 || res.Queued[0].Channel != "jobs" || res.Queued[0].Type != "job" ||
		fmt.Sprint(res.Queued[0].Subscribers) != "[b]" || !slices.Contains(res.Woken, "b") {
		t.Fatalf("unsubscribe result = %+v, want j3 queued on jobs for b", res)
	}
	if got := fmt.Sprint(ids("b")); got != "[j3 j4 j5 o0]" {
		t.Fatalf("b's mailbox after a unsubscribed = %s", got)
	}
	if got := fmt.Sprint(ids("a")); got != "[direct o0]" {
		t.Fatalf("a's mailbox after it unsubscribed = %s", got)
	}

	// Claims of another channel go back when a ends; its own mail goes.
	res = apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Claim: []int64{seqOf["o0"], seqOf["j4"]}})
	if got := fmt.Sprint(sorted(res.Claimed)); got != fmt.Sprint(sorted([]int64{seqOf["o0"], seqOf["j4"]})) {
		t.Fatalf("claimed %s", got)
	}
	if got := fmt.Sprint(ids("b")); got != "[j3 j5]" {
		t.Fatalf("b's mailbox after a's second claim = %s", got)
	}
	res = apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{{Seq: 1, Kind: "completed"}},
		Status: persistence.StatusCompleted})
	if len(res.Queued) != 2 {
		t.Fatalf("end result queued %+v, want o0 and j4 back", res.Queued)
	}
	if got := fmt.Sprint(ids("b")); got != "[j3 j4 j5 o0]" {
		t.Fatalf("b's mailbox after a ended = %s", got)
	}
	if got := ids("a"); len(got) != 0 {
		t.Fatalf("a's mailbox after it ended = %v", got)
	}
	// A claim of nothing queued claims nothing.
	res = apply(t, st, persistence.Step{Instance: "b", Epoch: 1, Claim: []int64{seqOf["direct"], 1 << 40}})
	if len(res.Claimed) != 0 {
		t.Fatalf("claimed %v of nothing queued", res.Claimed)
	}
}

func sorted(seqs []int64) []int64 { return slices.Sorted(slices.Values(seqs)) }
