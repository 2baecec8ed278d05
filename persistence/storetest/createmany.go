package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// newInstances is a CreateMany batch of the given IDs of workflow wf, each
// with its started event (and a second one for every third, so that
// histories of different lengths go in one batch).
func newInstances(wf string, ids ...string) []persistence.NewInstance {
	out := make([]persistence.NewInstance, len(ids))
	for i, id := range ids {
		h := []persistence.Event{{Seq: 0, Kind: "started", Name: wf, Payload: []byte(`"` + id + `"`)}}
		if i%3 == 2 {
			h = append(h, ev(1, "next"))
		}
		out[i] = persistence.NewInstance{Instance: persistence.Instance{ID: id, Workflow: wf, Input: []byte(`"` + id + `"`)}, History: h}
	}
	return out
}

// testCreateMany: a batch creates every instance with its history, skips
// (and reports) those of the same workflow that exist, and writes nothing
// when an ID belongs to another workflow.
func testCreateMany(t *testing.T, st persistence.Store) {
	create(t, st, "b")
	res := apply(t, st, persistence.Step{CreateMany: newInstances("wf", "a", "b", "c", "d")})
	if !slices.Equal(res.Existed, []int{1}) {
		t.Fatalf("Existed = %v, want [1]", res.Existed)
	}
	for i, id := range []string{"a", "c", "d"} {
		in, err := st.Instance(ctx(), id)
		if err != nil {
			t.Fatal(err)
		}
		wantLen := int64(1)
		if id == "c" {
			wantLen = 2
		}
		if in.Status != persistence.StatusRunning || in.Workflow != "wf" || string(in.Input) != `"`+id+`"` || in.HistoryLen != wantLen ||
			in.LeaseOwner != "" || in.Run != 0 {
			t.Fatalf("instance %d = %+v", i, in)
		}
		h, err := st.History(ctx(), id, 0)
		if err != nil || int64(len(h)) != wantLen || h[0].Kind != "started" || string(h[0].Payload) != `"`+id+`"` || h[0].At.IsZero() {
			t.Fatalf("history of %s = %+v, %v", id, h, err)
		}
	}
	// The existing instance is untouched: its lease, its one event.
	in, err := st.Instance(ctx(), "b")
	if err != nil || in.LeaseOwner != owner || in.HistoryLen != 1 || string(in.Input) != `"in"` {
		t.Fatalf("existing instance = %+v, %v", in, err)
	}
	if got := runnableIn(t, st, nil); !slices.Equal(got, []string{"a", "c", "d"}) {
		t.Fatalf("runnable = %v, want the unleased new instances", got)
	}

	// Again: everything exists, nothing changes.
	res = apply(t, st, persistence.Step{CreateMany: newInstances("wf", "a", "b", "c", "d")})
	if !slices.Equal(res.Existed, []int{0, 1, 2, 3}) {
		t.Fatalf("repeated batch: Existed = %v", res.Existed)
	}
	if h, err := st.History(ctx(), "c", 0); err != nil || len(h) != 2 {
		t.Fatalf("history after a repeat = %+v, %v", h, err)
	}

	// An ID of another workflow fails the step, even after new ones.
	_, err = st.Apply(ctx(), persistence.Step{CreateMany: append(newInstances("other", "e", "f"), newInstances("other", "c", "g")...)})
	var conflict *persistence.IDConflictError
	if !errors.As(err, &conflict) || !errors.Is(err, persistence.ErrIDConflict) {
		t.Fatalf("conflicting batch: err = %v, want an *IDConflictError", err)
	}
	if conflict.ID != "c" || conflict.Workflow != "wf" || conflict.Requested != "other" {
		t.Fatalf("conflict = %+v", conflict)
	}
	for _, id := range []string{"e", "f", "g"} {
		_, err := st.Instance(ctx(), id)
		wantErr(t, err, persistence.ErrNotFound)
		if h, err := st.History(ctx(), id, 0); err != nil || len(h) != 0 {
			t.Fatalf("history of %s after a failed batch = %+v, %v", id, h, err)
		}
	}
}

// testCreateManyLeases: instances with a LeaseOwner are created under
// their lease, running LeaseTTL on the store's clock; the others without.
func testCreateManyLeases(t *testing.T, st persistence.Store) {
	const ttl = time.Hour
	batch := newInstances("wf", "a", "b", "c")
	for _, i := range []int{0, 2} {
		batch[i].Instance.LeaseOwner, batch[i].Instance.LeaseEpoch = owner, 1
	}
	before := time.Now()
	res := apply(t, st, persistence.Step{CreateMany: batch, LeaseTTL: ttl})
	after := time.Now()
	if len(res.Existed) != 0 {
		t.Fatalf("Existed = %v", res.Existed)
	}
	for _, id := range []string{"a", "c"} {
		in, err := st.Instance(ctx(), id)
		if err != nil {
			t.Fatal(err)
		}
		if lo, hi := before.Add(ttl-time.Millisecond), after.Add(ttl+time.Millisecond); in.LeaseExpires.Before(lo) || in.LeaseExpires.After(hi) {
			t.Fatalf("%s: lease expires %v, want within [%v, %v]", id, in.LeaseExpires, lo, hi)
		}
		if in.LeaseOwner != owner || in.LeaseEpoch != 1 {
			t.Fatalf("leased instance = %+v", in)
		}
		_, err = st.AcquireLease(ctx(), id, "node-b", time.Minute)
		wantErr(t, err, persistence.ErrLeaseHeld)
	}
	if got := runnableIn(t, st, nil); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("runnable = %v, want the unleased instance", got)
	}
	// The leased instance steps on under its epoch, as one Create made.
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "x")}})
}

// testCreateManyRace: batches that overlap, applied at once, create each
// instance once; every ID is reported created by exactly one of them.
func testCreateManyRace(t *testing.T, st persistence.Store) {
	const batches, size = 6, 40
	results := make([]persistence.StepResult, batches)
	steps := make([]persistence.Step, batches)
	var wg sync.WaitGroup
	for b := range batches {
		ids := make([]string, size)
		for i := range ids {
			// Each batch covers half of the next one's IDs, in a
			// different order.
			n := b*size/2 + i
			if b%2 == 1 {
				n = b*size/2 + size - 1 - i
			}
			ids[i] = fmt.Sprintf("i%04d", n)
		}
		steps[b] = persistence.Step{CreateMany: newInstances("wf", ids...)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := st.Apply(ctx(), steps[b])
			if err != nil {
				t.Errorf("batch %d: %v", b, err)
			}
			results[b] = res
		}()
	}
	wg.Wait()
	created := map[string]int{}
	for b, res := range results {
		existed := map[int]bool{}
		for _, i := range res.Existed {
			existed[i] = true
		}
		for i, c := range steps[b].CreateMany {
			if !existed[i] {
				created[c.Instance.ID]++
			}
		}
	}
	want := (batches + 1) * size / 2
	if len(created) != want {
		t.Fatalf("%d IDs created, want %d", len(created), want)
	}
	for id, n := range created {
		if n != 1 {
			t.Fatalf("%s reported created by %d batches", id, n)
		}
		if h, err := st.History(ctx(), id, 0); err != nil || len(h) == 0 || len(h) > 2 {
			t.Fatalf("history of %s = %+v, %v", id, h, err)
		}
	}
}

// testCreateManyValidation: a batch with repeated IDs, a history not from
// 0, or anything beside it is refused before anything is written.
func testCreateManyValidation(t *testing.T, st persistence.Store) {
	steps := map[string]persistence.Step{
		"CreateMany[2].Instance.ID":         {CreateMany: newInstances("wf", "a", "b", "a")},
		"CreateMany[1].Instance.Workflow":   {CreateMany: append(newInstances("wf", "a"), persistence.NewInstance{Instance: persistence.Instance{ID: "b"}})},
		"CreateMany[0].History[0].Seq":      {CreateMany: []persistence.NewInstance{{Instance: persistence.Instance{ID: "a", Workflow: "wf"}, History: []persistence.Event{ev(1, "x")}}}},
		"Send":                              {CreateMany: newInstances("wf", "a"), Send: []persistence.NewMessage{{ID: "m", Channel: "c"}}},
		"Create":                            {CreateMany: newInstances("wf", "a"), Create: &persistence.Instance{ID: "z", Workflow: "wf"}},
		"CreateMany[0].Instance.LeaseOwner": {CreateMany: []persistence.NewInstance{{Instance: persistence.Instance{ID: "a", Workflow: "wf", LeaseOwner: "x\n"}}}},
	}
	for field, s := range steps {
		_, err := st.Apply(ctx(), s)
		var inv *persistence.InvalidError
		if !errors.As(err, &inv) || inv.Field != field {
			t.Fatalf("%s: err = %v, want an *InvalidError naming it", field, err)
		}
	}
	for _, id := range []string{"a", "b", "z"} {
		_, err := st.Instance(ctx(), id)
		wantErr(t, err, persistence.ErrNotFound)
	}
}
