package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// queryInstances is how many instances the listing tests create: enough
// that pages, status branches and filters cross many index pages. -short
// runs use fewer.
const queryInstances = 5000

func queryCount() int {
	if testing.Short() {
		return queryInstances / 5
	}
	return queryInstances
}

// queryInput is the input of the i-th instance: JSON, except every 13th,
// which is bytes no JSON reader accepts (another codec's).
func queryInput(i int) []byte {
	if i%13 == 0 {
		return []byte{0xff, 0x00, 0x01, '{'}
	}
	return []byte(fmt.Sprintf(`{"customer":{"id":"c%d"},"n":%d,"vip":%t,"tag":null,"name":"x\"%d"}`, i%50, i%200, i%3 == 0, i%4))
}

// createMany creates the instances of queryInstances with varied workflows,
// parents and inputs, concurrently (so that drivers batch them), and then
// moves some to other statuses.
func createMany(t *testing.T, st persistence.Store, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	work := make(chan int)
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				id := fmt.Sprintf("q-%05d", i)
				wf := "wf-a"
				switch {
				case i%100 == 0:
					wf = "rare"
				case i%2 == 1:
					wf = "wf-b"
				}
				parent := ""
				if i%20 == 0 {
					parent = fmt.Sprintf("parent-%d", i%7)
				}
				in := &persistence.Instance{ID: id, Workflow: wf, Input: queryInput(i), Parent: parent,
					LeaseOwner: owner, LeaseEpoch: 1, LeaseExpires: time.Now().Add(time.Hour)}
				_, err := st.Apply(ctx(), persistence.Step{Create: in, History: []persistence.Event{{Seq: 0, Kind: "started", Name: wf}}})
				if err == nil {
					switch i % 10 {
					case 0:
						_, err = st.Apply(ctx(), persistence.Step{Instance: id, Epoch: 1, Status: persistence.StatusCompleted})
					case 1:
						_, err = st.Apply(ctx(), persistence.Step{Instance: id, Epoch: 1, Status: persistence.StatusFailed, Error: "boom"})
					case 2:
						_, err = st.Apply(ctx(), persistence.Step{Instance: id, Epoch: 1, Status: persistence.StatusWaiting, ReleaseLease: true})
					}
				}
				if err != nil {
					select {
					case errs <- fmt.Errorf("create %s: %w", id, err):
					default:
					}
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// allInstances reads every instance through List (ordered by ID), the
// reference the listings are checked against.
func allInstances(t *testing.T, st persistence.Store) []persistence.Instance {
	t.Helper()
	all, err := st.List(ctx(), persistence.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// newestFirst sorts instances in ListInstances' order.
func newestFirst(ins []persistence.Instance) {
	slices.SortFunc(ins, func(a, b persistence.Instance) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
}

// inputMatches is the reference meaning of InstanceQuery.Input.
func inputMatches(input []byte, conds map[string]string) bool {
	if len(conds) == 0 {
		return true
	}
	var doc any
	if json.Unmarshal(input, &doc) != nil {
		return false
	}
	for k, want := range conds {
		v := doc
		for _, seg := range strings.Split(k, ".") {
			obj, ok := v.(map[string]any)
			if !ok {
				return false
			}
			v = obj[seg]
		}
		switch x := v.(type) {
		case string:
			if x != want {
				return false
			}
		case float64, bool:
			b, _ := json.Marshal(x)
			if string(b) != want {
				return false
			}
		default: // missing, null, object, array
			return false
		}
	}
	return true
}

// matches is the reference meaning of an InstanceQuery's filters.
func matches(in persistence.Instance, q persistence.InstanceQuery) bool {
	between := func(t, after, before time.Time) bool {
		return (after.IsZero() || !t.Before(after)) && (before.IsZero() || t.Before(before))
	}
	return (q.Workflow == "" || in.Workflow == q.Workflow) &&
		(len(q.Statuses) == 0 || slices.Contains(q.Statuses, in.Status)) &&
		(q.Parent == "" || in.Parent == q.Parent) &&
		between(in.CreatedAt, q.CreatedAfter, q.CreatedBefore) &&
		between(in.UpdatedAt, q.UpdatedAfter, q.UpdatedBefore) &&
		inputMatches(in.Input, q.Input)
}

// listAll pages through q with its Limit, checking that every page but
// the last is full, and returns the IDs in order.
func listAll(t *testing.T, st persistence.Store, q persistence.InstanceQuery, between func()) []string {
	t.Helper()
	var ids []string
	for pages := 0; ; pages++ {
		if pages > queryInstances {
			t.Fatalf("%+v: paging does not end", q)
		}
		page, err := st.ListInstances(ctx(), q)
		if err != nil {
			t.Fatalf("ListInstances(%+v): %v", q, err)
		}
		for _, in := range page {
			ids = append(ids, in.ID)
		}
		if len(page) < q.PageLimit() {
			return ids
		}
		k := page[len(page)-1].Key()
		q.After = &k
		if between != nil {
			between()
		}
	}
}

func idList(ins []persistence.Instance) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.ID
	}
	return out
}

// diffIDs describes how got differs from want, briefly.
func diffIDs(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at %d: got %s, want %s (lengths %d, %d)", i, got[i], want[i], len(got), len(want))
		}
	}
	return fmt.Sprintf("lengths %d, want %d", len(got), len(want))
}

// Filters and pagination over 5,000 instances (1,000 with -short): every page is exact (the
// instances the filters select, newest first, split at the limit), with no
// duplicates and no gaps.
func testListInstances(t *testing.T, st persistence.Store) {
	n := queryCount()
	createMany(t, st, n)
	all := allInstances(t, st)
	if len(all) != n {
		t.Fatalf("%d instances stored, want %d", len(all), n)
	}
	newestFirst(all)
	// Time bounds taken from the data, so that ranges cut through it.
	c1, c2 := all[n*6/10].CreatedAt, all[n*2/10].CreatedAt
	byUpdate := slices.Clone(all)
	slices.SortFunc(byUpdate, func(a, b persistence.Instance) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
	u1 := byUpdate[n*3/10].UpdatedAt

	queries := []persistence.InstanceQuery{
		{},
		{Workflow: "wf-a"},
		{Workflow: "rare"},
		{Workflow: "none-such"},
		{Statuses: []persistence.Status{persistence.StatusFailed}},
		{Statuses: []persistence.Status{persistence.StatusRunning, persistence.StatusWaiting, persistence.StatusRunning}},
		{Workflow: "wf-b", Statuses: []persistence.Status{persistence.StatusCompleted, persistence.StatusFailed}},
		{Workflow: "rare", Statuses: []persistence.Status{persistence.StatusCompleted}},
		{Parent: "parent-3"},
		{Parent: "parent-3", Statuses: []persistence.Status{persistence.StatusRunning}, Workflow: "wf-a"},
		{CreatedAfter: c1, CreatedBefore: c2},
		{CreatedAfter: c1, Workflow: "wf-b", Statuses: []persistence.Status{persistence.StatusWaiting}},
		{CreatedBefore: c2, Statuses: []persistence.Status{persistence.StatusFailed}},
		{UpdatedAfter: u1},
		{UpdatedBefore: u1, Workflow: "wf-a"},
		{Input: map[string]string{"customer.id": "c7"}},
		{Input: map[string]string{"n": "42", "vip": "true"}},
		{Input: map[string]string{"vip": "false"}, Workflow: "wf-b", Statuses: []persistence.Status{persistence.StatusRunning}},
		{Input: map[string]string{"name": `x"1`}},
		{Input: map[string]string{"tag": "null"}},
		{Input: map[string]string{"customer": "c7"}},
		{Input: map[string]string{"missing.field": "1"}},
	}
	for _, q := range queries {
		want := []persistence.Instance{}
		for _, in := range all {
			if matches(in, q) {
				want = append(want, in)
			}
		}
		// Short pages where that stays quick.
		limits := []int{1000}
		if len(want) <= 3000 {
			limits = append(limits, 0)
		}
		if len(want) <= 300 {
			limits = append(limits, 7)
		}
		for _, limit := range limits {
			q.Limit = limit
			got := listAll(t, st, q, nil)
			if !slices.Equal(got, idList(want)) {
				t.Fatalf("query %+v, limit %d: %s", q, limit, diffIDs(got, idList(want)))
			}
		}
	}
	if n := len(listAll(t, st, persistence.InstanceQuery{Input: map[string]string{"customer.id": "c7"}}, nil)); n == 0 {
		t.Fatal("the input filter matched nothing: the test checks nothing")
	}

	// A page starts right after the given key, even one between stored
	// instances, and the limit is capped.
	k := all[n/2-1].Key()
	page, err := st.ListInstances(ctx(), persistence.InstanceQuery{After: &k, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := idList(page); !slices.Equal(got, idList(all[n/2:n/2+2])) {
		t.Fatalf("page after %v = %v, want %v", k, got, idList(all[n/2:n/2+2]))
	}
	page, err = st.ListInstances(ctx(), persistence.InstanceQuery{Limit: persistence.MaxQueryLimit + 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != min(persistence.MaxQueryLimit, n) {
		t.Fatalf("page of limit %d has %d instances", persistence.MaxQueryLimit+5, len(page))
	}

	for _, q := range []persistence.InstanceQuery{
		{Statuses: []persistence.Status{"sleeping"}},
		{Input: map[string]string{"a..b": "1"}},
		{Input: map[string]string{"": "1"}},
		{Workflow: "bad\x00name"},
		{After: &persistence.InstanceKey{}},
	} {
		if _, err := st.ListInstances(ctx(), q); !errors.Is(err, persistence.ErrInvalidRecord) {
			t.Errorf("ListInstances(%+v) = %v, want an invalid-input error", q, err)
		}
	}
}

// Paging while instances change status and new ones are created: an
// unfiltered listing and a workflow's listing return exactly the instances
// that existed at the first page, once each; a status listing returns each
// instance at most once, and every one that kept the status throughout.
func testListWhileChanging(t *testing.T, st persistence.Store) {
	n := queryCount() * 3 / 10
	createMany(t, st, n)
	start := allInstances(t, st)
	newestFirst(start)
	rng := rand.New(rand.NewPCG(1, 2))
	touched := map[string]bool{}
	created := 0
	churn := func() {
		// Complete or passivate some running instances, wake some waiting
		// ones, and create new ones.
		for j := 0; j < 40; j++ {
			in := start[rng.IntN(len(start))]
			cur, err := st.Instance(ctx(), in.ID)
			if err != nil {
				t.Fatal(err)
			}
			switch cur.Status {
			case persistence.StatusRunning:
				step := persistence.Step{Instance: in.ID, Epoch: cur.LeaseEpoch, Status: persistence.StatusCompleted}
				if j%2 == 0 {
					step.Status, step.ReleaseLease = persistence.StatusWaiting, true
				}
				apply(t, st, step)
			case persistence.StatusWaiting:
				if _, err := st.AcquireLease(ctx(), in.ID, owner, time.Hour); err != nil {
					t.Fatal(err)
				}
			default:
				continue
			}
			touched[in.ID] = true
		}
		for j := 0; j < 5; j++ {
			create(t, st, fmt.Sprintf("new-%05d", created))
			created++
		}
	}
	var startIDs, wfB, running []string
	for _, in := range start {
		startIDs = append(startIDs, in.ID)
		if in.Workflow == "wf-b" {
			wfB = append(wfB, in.ID)
		}
		if in.Status == persistence.StatusRunning {
			running = append(running, in.ID)
		}
	}
	if got := listAll(t, st, persistence.InstanceQuery{Limit: 97}, churn); !slices.Equal(got, startIDs) {
		t.Fatalf("unfiltered listing while instances change: %s", diffIDs(got, startIDs))
	}
	if got := listAll(t, st, persistence.InstanceQuery{Workflow: "wf-b", Limit: 61}, churn); !slices.Equal(got, wfB) {
		t.Fatalf("workflow listing while instances change: %s", diffIDs(got, wfB))
	}
	touched = map[string]bool{}
	got := listAll(t, st, persistence.InstanceQuery{Statuses: []persistence.Status{persistence.StatusRunning}, Limit: 53}, churn)
	seen := map[string]bool{}
	for _, id := range got {
		if seen[id] {
			t.Fatalf("status listing returned %s twice", id)
		}
		seen[id] = true
	}
	kept := 0
	for _, id := range running {
		cur, err := st.Instance(ctx(), id)
		if err != nil {
			t.Fatal(err)
		}
		if touched[id] || cur.Status != persistence.StatusRunning {
			continue
		}
		kept++
		if !seen[id] {
			t.Fatalf("status listing skipped %s, running throughout", id)
		}
	}
	if kept == 0 || len(touched) == 0 {
		t.Fatalf("%d instances kept their status, %d changed: the test checks nothing", kept, len(touched))
	}
}

// HistoryRange pages through a history; Timers lists an instance's timers,
// earliest first.
func testHistoryRangeAndTimers(t *testing.T, st persistence.Store) {
	create(t, st, "h")
	var evs []persistence.Event
	for i := int64(1); i <= 9; i++ {
		evs = append(evs, ev(i, "step"))
	}
	now := time.Now()
	apply(t, st, persistence.Step{Instance: "h", Epoch: 1, History: evs, AddTimers: []persistence.Timer{
		{ID: "sleep:2", Due: now.Add(2 * time.Hour)}, {ID: "receive:1", Due: now.Add(time.Hour)}}})
	var seqs []int64
	for from := int64(0); ; {
		page, err := st.HistoryRange(ctx(), "h", from, 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 4 {
			t.Fatalf("page of %d events, limit 4", len(page))
		}
		for _, e := range page {
			seqs = append(seqs, e.Seq)
		}
		if len(page) < 4 {
			break
		}
		from = page[len(page)-1].Seq + 1
	}
	if want := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(seqs, want) {
		t.Fatalf("history pages: seqs %v, want %v", seqs, want)
	}
	if all, err := st.HistoryRange(ctx(), "h", 8, 0); err != nil || len(all) != 2 {
		t.Fatalf("HistoryRange from 8 without a limit = %d events, %v; want 2", len(all), err)
	}
	ts, err := st.Timers(ctx(), "h")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].ID != "receive:1" || ts[1].ID != "sleep:2" || ts[0].Instance != "h" ||
		!ts[0].Due.Equal(now.Add(time.Hour)) {
		t.Fatalf("Timers = %+v; want receive:1 then sleep:2", ts)
	}
	if ts, err := st.Timers(ctx(), "nobody"); err != nil || len(ts) != 0 {
		t.Fatalf("Timers of a missing instance = %v, %v", ts, err)
	}
}
