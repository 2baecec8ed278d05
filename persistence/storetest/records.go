package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

func testDigest(t *testing.T, st persistence.Store) {
	apply(t, st, persistence.Step{
		Create:  &persistence.Instance{ID: "a", Workflow: "wf", LeaseOwner: owner, LeaseEpoch: 1},
		History: []persistence.Event{{Seq: 0, Kind: "started", Name: "wf", Digest: "sha256:00ff"}},
	})
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{
		{Seq: 1, Kind: "activity", Name: "charge", Ref: "act-1", Digest: "sha256:abcd"},
		{Seq: 2, Kind: "timer_fired", Name: "t"},
	}})
	digests := func() string {
		t.Helper()
		h, err := st.History(ctx(), "a", 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range h {
			out = append(out, fmt.Sprintf("%d:%s", e.Seq, e.Digest))
		}
		return fmt.Sprint(out)
	}
	if got := digests(); got != "[0:sha256:00ff 1:sha256:abcd 2:]" {
		t.Fatalf("digests = %s", got)
	}
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, ResetHistory: true,
		History: []persistence.Event{{Seq: 0, Kind: "started", Digest: "sha256:beef"}}})
	if got := digests(); got != "[0:sha256:beef]" {
		t.Fatalf("digests after reset = %s", got)
	}
}

// types lists "ID:Type" of an instance's mailbox.
func types(t *testing.T, st persistence.Store, id string) string {
	t.Helper()
	var out []string
	for _, m := range mailboxSeqs(t, st, id) {
		out = append(out, m.ID+":"+m.Type)
	}
	return fmt.Sprint(out)
}

func testMessageType(t *testing.T, st persistence.Store) {
	for _, id := range []string{"a", "b", "w1", "w2"} {
		create(t, st, id)
	}
	const generic = "example.com/orders.Event[example.com/orders.Placed]"
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{
		{ID: "m1", Target: "a", Type: "orders.Placed", Payload: []byte(`{}`)},
		{ID: "m2", Target: "a", Channel: "side", Type: generic},
		{ID: "m3", Target: "a"},
	}})
	if got := types(t, st, "a"); got != "[m1:orders.Placed m2:"+generic+" m3:]" {
		t.Fatalf("direct: %s", got)
	}

	for _, id := range []string{"a", "b"} {
		apply(t, st, persistence.Step{Instance: id, Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "news", Mode: persistence.Broadcast}}})
	}
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "n1", Channel: "news", Type: "news.Item"}}})
	if got := types(t, st, "b"); got != "[n1:news.Item]" {
		t.Fatalf("broadcast copy of b: %s", got)
	}
	if got := types(t, st, "a"); got != "[m1:orders.Placed m2:"+generic+" m3: n1:news.Item]" {
		t.Fatalf("broadcast copy of a: %s", got)
	}

	// Queued before anyone subscribes, and published to subscribers.
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "j1", Channel: "jobs", Type: "jobs.Early"}}})
	for _, id := range []string{"w1", "w2"} {
		apply(t, st, persistence.Step{Instance: id, Epoch: 1, Subscribe: []persistence.Subscription{{Channel: "jobs", Mode: persistence.Competing}}})
	}
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "j2", Channel: "jobs", Type: "jobs.Late"}}})
	for _, id := range []string{"w1", "w2"} {
		if got := types(t, st, id); got != "[j1:jobs.Early j2:jobs.Late]" {
			t.Fatalf("competing queue seen by %s: %s", id, got)
		}
	}
	// A message with neither channel nor target is kept in the queue of the
	// empty channel; that insert takes the type too.
	apply(t, st, persistence.Step{Send: []persistence.NewMessage{{ID: "q", Type: "x.Y"}}})
}

func timesEqual(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

func testRestartLog(t *testing.T, st persistence.Store) {
	base := time.Unix(1_700_000_000, 123_456_789)
	t1, t2, t3 := base, base.Add(time.Second+1), base.Add(time.Minute+7)
	create(t, st, "a")
	if in, _ := st.Instance(ctx(), "a"); in.RecentRestarts != nil || in.Restarts != 0 {
		t.Fatalf("new instance: restarts %d, log %v", in.Restarts, in.RecentRestarts)
	}
	// Given newest first; stored oldest first. IncRestarts goes with it.
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, IncRestarts: true, RestartLog: []time.Time{t2, t1},
		History: []persistence.Event{ev(1, "restarted")}})
	want := []time.Time{t1, t2}
	check := func(what string, in persistence.Instance, want []time.Time, restarts int64) {
		t.Helper()
		if !timesEqual(in.RecentRestarts, want) || in.Restarts != restarts {
			t.Fatalf("%s: restarts %d, log %v; want %d, %v", what, in.Restarts, in.RecentRestarts, restarts, want)
		}
	}
	in, err := st.Instance(ctx(), "a")
	if err != nil {
		t.Fatal(err)
	}
	check("Instance", in, want, 1)

	// A step without RestartLog keeps it.
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(2, "x")}})
	in, _ = st.Instance(ctx(), "a")
	check("after a step without RestartLog", in, want, 1)
	in, err = st.AcquireLease(ctx(), "a", owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	check("AcquireLease", in, want, 1)
	all, err := st.List(ctx(), persistence.ListFilter{})
	if err != nil || len(all) != 1 {
		t.Fatalf("list = %+v, %v", all, err)
	}
	check("List", all[0], want, 1)
	res := apply(t, st, persistence.Step{Create: &persistence.Instance{ID: "a", Workflow: "wf"}})
	if res.Existing == nil {
		t.Fatal("second create: no Existing")
	}
	check("StepResult.Existing", *res.Existing, want, 1)

	// Replaced, with another restart counted in the same step.
	apply(t, st, persistence.Step{Instance: "a", Epoch: 2, IncRestarts: true, RestartLog: []time.Time{t1, t2, t3}})
	in, _ = st.Instance(ctx(), "a")
	check("replaced", in, []time.Time{t1, t2, t3}, 2)
	apply(t, st, persistence.Step{Instance: "a", Epoch: 2, RestartLog: []time.Time{t3}})
	in, _ = st.Instance(ctx(), "a")
	check("shortened", in, []time.Time{t3}, 2)
	// Empty but not nil clears it.
	apply(t, st, persistence.Step{Instance: "a", Epoch: 2, RestartLog: []time.Time{}})
	in, _ = st.Instance(ctx(), "a")
	check("cleared", in, nil, 2)

	// Create stores the instance's RecentRestarts, or the step's RestartLog.
	apply(t, st, persistence.Step{Create: &persistence.Instance{ID: "b", Workflow: "wf", RecentRestarts: []time.Time{t1}}})
	apply(t, st, persistence.Step{Create: &persistence.Instance{ID: "c", Workflow: "wf", RecentRestarts: []time.Time{t1}},
		RestartLog: []time.Time{t3, t2}})
	in, _ = st.Instance(ctx(), "b")
	check("created b", in, []time.Time{t1}, 0)
	in, _ = st.Instance(ctx(), "c")
	check("created c", in, []time.Time{t2, t3}, 0)
}
