package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// testClaimQueue: ClaimQueue hands the head of a competing queue to the
// consumers that may take a message, one each in the order given, skipping
// those that are not competing subscribers, are leased by another owner or
// have ended, and messages of other types; what it moved is in the
// consumer's own mailbox, consumed by a step, and goes back to the queue
// when the consumer unsubscribes or ends.
func testClaimQueue(t *testing.T, st persistence.Store) {
	competing := jobsConsumers(t, st)

	publish := func(id, typ string) {
		apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: id, Channel: "jobs", Type: typ, Payload: []byte(`"` + id + `"`)}}})
	}
	publish("untyped", "")
	for i := range 4 {
		publish(fmt.Sprintf("j%d", i), "job")
	}
	more := false
	claim := func(types []string, consumers ...string) []persistence.Message {
		t.Helper()
		qc, err := st.ClaimQueue(ctx(), owner, "jobs", types, consumers)
		if err != nil {
			t.Fatalf("ClaimQueue(%v, %v): %v", types, consumers, err)
		}
		more = qc.More
		return qc.Messages
	}
	got := func(ms []persistence.Message) string {
		var out []string
		for _, m := range ms {
			out = append(out, m.ID+">"+m.Target)
		}
		return strings.Join(out, " ")
	}

	ms := claim([]string{"job", "job-alias"}, "not-sub", "elsewhere", "a", "done", "b", "ghost")
	if g := got(ms); g != "j0>a j1>b" || !more {
		t.Fatalf("claimed %q (more %v), want j0 to a and j1 to b, and more left", g, more)
	}
	if ms[0].Channel != "jobs" || ms[0].Type != "job" || string(ms[0].Payload) != `"j0"` || ms[0].Seq == 0 {
		t.Fatalf("claimed message = %+v", ms[0])
	}
	ids := func(id string) string {
		var out []string
		for _, m := range mailboxSeqs(t, st, id) {
			out = append(out, m.ID)
		}
		return strings.Join(out, " ")
	}
	if g := ids("a"); g != "untyped j0 j2 j3" {
		t.Fatalf("a's mailbox = %q, want its claimed j0 and the queue", g)
	}
	if g := ids("c"); g != "untyped j2 j3" {
		t.Fatalf("c's mailbox = %q, want the queue without the claimed", g)
	}
	// Any type: the untyped message first.
	if g := got(claim(nil, "c")); g != "untyped>c" || !more {
		t.Fatalf("claimed %q (more %v), want untyped to c, and more left", g, more)
	}
	// a takes its message with a step; a second claim for it takes j2.
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Consume: []int64{ms[0].Seq}})
	if g := got(claim([]string{"job"}, "a")); g != "j2>a" {
		t.Fatalf("claimed %q, want j2 to a", g)
	}
	// b unsubscribes: j1 goes back, queued for the remaining consumers.
	res := apply(t, st, persistence.Step{Instance: "b", Epoch: 1, Unsubscribe: []string{"jobs"}})
	if len(res.Queued) != 1 || res.Queued[0].Channel != "jobs" || !slices.Contains(res.Queued[0].Subscribers, "c") {
		t.Fatalf("unsubscribe result = %+v, want j1 queued on jobs", res)
	}
	// a ends: j2 goes back.
	res = apply(t, st, persistence.Step{Instance: "a", Epoch: 1, Status: persistence.StatusCompleted})
	if len(res.Queued) != 1 || res.Queued[0].Channel != "jobs" {
		t.Fatalf("end result = %+v, want j2 queued on jobs", res)
	}
	if g := ids("c"); g != "untyped j1 j2 j3" {
		t.Fatalf("c's mailbox = %q, want its claim and j1, j2, j3 queued", g)
	}
	// Now only c may take one; then the queue runs out.
	if g := got(claim([]string{"job"}, "a", "b", "c")); g != "j1>c" {
		t.Fatalf("claimed %q, want j1 to c", g)
	}
	create(t, st, "d")
	apply(t, st, persistence.Step{Instance: "d", Epoch: 1, Subscribe: competing})
	if g := got(claim(nil, "d", "c")); g != "j2>d j3>c" || more {
		t.Fatalf("claimed %q (more %v), want j2 to d and j3 to c, the last", g, more)
	}
	if g := got(claim(nil, "d", "c")); g != "" || more {
		t.Fatalf("claimed %q (more %v) from an empty queue", g, more)
	}

	var inv *persistence.InvalidError
	for _, bad := range [][]string{{"c", "c"}, {""}, make([]string, persistence.MaxQueueClaim+1)} {
		if _, err := st.ClaimQueue(ctx(), owner, "jobs", nil, bad); !errors.As(err, &inv) {
			t.Fatalf("ClaimQueue(%d consumers) error = %v, want an *InvalidError", len(bad), err)
		}
	}
	if _, err := st.ClaimQueue(ctx(), "", "jobs", nil, []string{"c"}); !errors.As(err, &inv) {
		t.Fatalf("ClaimQueue without an owner: error = %v, want an *InvalidError", err)
	}
}

// jobsConsumers makes the consumers of channel "jobs" the claim tests
// hand messages to: a, b and c, leased by owner and subscribed
// competitively; done, subscribed and ended; not-sub, not subscribed; and
// elsewhere, subscribed and leased by another owner (node-b). It returns
// the subscription, for more consumers.
func jobsConsumers(t *testing.T, st persistence.Store) []persistence.Subscription {
	t.Helper()
	competing := []persistence.Subscription{{Channel: "jobs", Mode: persistence.Competing}}
	for _, id := range []string{"a", "b", "c", "done", "not-sub"} {
		create(t, st, id)
		if id != "not-sub" {
			apply(t, st, persistence.Step{Instance: id, Epoch: 1, Subscribe: competing})
		}
	}
	apply(t, st, persistence.Step{Create: &persistence.Instance{ID: "elsewhere", Workflow: "wf", LeaseOwner: "node-b", LeaseEpoch: 1},
		LeaseTTL: time.Minute, Subscribe: competing})
	apply(t, st, persistence.Step{Instance: "done", Epoch: 1, Status: persistence.StatusCompleted})
	return competing
}

// testClaimQueueRace: claims for disjoint consumer sets race each other
// and consumers that take queued messages straight from the queue (Consume
// after a mailbox read); every message is consumed exactly once.
func testClaimQueueRace(t *testing.T, st persistence.Store) {
	const fetchers, perFetcher, msgs = 3, 3, 90
	var all []string
	for i := range fetchers*perFetcher + 2 {
		id := fmt.Sprintf("c%02d", i)
		all = append(all, id)
		create(t, st, id)
		apply(t, st, persistence.Step{Instance: id, Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "q", Mode: persistence.Competing}}})
	}
	for i := range msgs {
		apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: fmt.Sprintf("m%03d", i), Channel: "q"}}})
	}
	var mu sync.Mutex
	taken := map[string]string{}
	took := func(m persistence.Message, by string) {
		mu.Lock()
		defer mu.Unlock()
		if prev, dup := taken[m.ID]; dup {
			t.Errorf("message %s taken by %s and %s", m.ID, prev, by)
		}
		taken[m.ID] = by
	}
	var wg sync.WaitGroup
	for f := range fetchers {
		group := all[f*perFetcher : (f+1)*perFetcher]
		wg.Add(1)
		go func() {
			defer wg.Done()
			hist := map[string]int64{} // next history seq of each of group
			for _, id := range group {
				hist[id] = 1
			}
			for {
				qc, err := st.ClaimQueue(ctx(), owner, "q", nil, group)
				if err != nil {
					t.Error(err)
					return
				}
				ms := qc.Messages
				if len(ms) == 0 {
					return
				}
				for _, m := range ms {
					seq := hist[m.Target]
					if _, err := st.Apply(ctx(), persistence.Step{Instance: m.Target, Epoch: 1, Consume: []int64{m.Seq},
						History: []persistence.Event{{Seq: seq, Kind: "received", Ref: m.ID}}}); err != nil {
						t.Errorf("consume claimed %s: %v", m.ID, err)
						return
					}
					hist[m.Target] = seq + 1
					took(m, m.Target)
				}
			}
		}()
	}
	for _, id := range all[fetchers*perFetcher:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq := int64(1)
			for {
				ms, err := st.Mailbox(ctx(), id, 4)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ms) == 0 {
					return
				}
				m := ms[len(ms)-1]
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
				took(m, id)
			}
		}()
	}
	wg.Wait()
	if len(taken) != msgs {
		t.Fatalf("%d distinct messages taken, want %d", len(taken), msgs)
	}
	received := 0
	for _, id := range all {
		h, err := st.History(ctx(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		received += len(h)
	}
	if received != msgs {
		t.Fatalf("%d received events, want %d", received, msgs)
	}
}
