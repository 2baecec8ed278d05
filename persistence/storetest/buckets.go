package storetest

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// spread finds IDs named prefix-N for n buckets with two IDs each (so that
// selecting a bucket must select both), plus n IDs alone in other buckets.
func spread(prefix string, n int) (buckets []int, byBucket map[int][]string, others []string) {
	seen := map[int][]string{}
	byBucket = map[int][]string{}
	for i := 0; len(buckets) < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		b := persistence.BucketOf(id)
		seen[b] = append(seen[b], id)
		if len(seen[b]) == 2 {
			buckets = append(buckets, b)
			byBucket[b] = seen[b]
		}
	}
	for _, ids := range seen {
		if len(others) < n && len(ids) == 1 {
			others = append(others, ids[0])
		}
	}
	sort.Strings(others)
	return buckets, byBucket, others
}

// idsOf lists the IDs of the given buckets, sorted.
func idsOf(byBucket map[int][]string, buckets ...int) []string {
	var out []string
	for _, b := range buckets {
		out = append(out, byBucket[b]...)
	}
	sort.Strings(out)
	return out
}

// emptyBucket is a bucket none of the given IDs is in.
func emptyBucket(ids []string) int {
	used := map[int]bool{}
	for _, id := range ids {
		used[persistence.BucketOf(id)] = true
	}
	for b := 0; ; b++ {
		if !used[b] {
			return b
		}
	}
}

func runnableIn(t *testing.T, st persistence.Store, buckets []int) []string {
	t.Helper()
	ids, err := st.Runnable(ctx(), buckets, 0)
	if err != nil {
		t.Fatalf("runnable in %v: %v", buckets, err)
	}
	sort.Strings(ids)
	return ids
}

func dueIn(t *testing.T, st persistence.Store, buckets []int) []persistence.Timer {
	t.Helper()
	ts, err := st.DueTimers(ctx(), time.Now().Add(time.Hour), buckets, 0)
	if err != nil {
		t.Fatalf("due timers in %v: %v", buckets, err)
	}
	return ts
}

// timerInstances lists the instances of timers, sorted.
func timerInstances(ts []persistence.Timer) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Instance)
	}
	sort.Strings(out)
	return out
}

func testBuckets(t *testing.T, st persistence.Store) {
	buckets, byBucket, others := spread("b", 3)
	all := append(idsOf(byBucket, buckets...), others...)
	sort.Strings(all)
	now := time.Now()
	for i, id := range all {
		create(t, st, id)
		apply(t, st, persistence.Step{Instance: id, Epoch: 1, ReleaseLease: true,
			AddTimers: []persistence.Timer{{ID: "t", Due: now.Add(time.Duration(i) * time.Second)}}})
	}
	none := emptyBucket(all)
	for _, tc := range []struct {
		name    string
		buckets []int
		want    []string
	}{
		{"nil (every bucket)", nil, all},
		{"empty (no bucket)", []int{}, nil},
		{"one bucket", buckets[:1], idsOf(byBucket, buckets[0])},
		{"two buckets", []int{buckets[2], buckets[0]}, idsOf(byBucket, buckets[0], buckets[2])},
		{"a bucket twice", []int{buckets[1], buckets[1]}, idsOf(byBucket, buckets[1])},
		{"an empty bucket", []int{none}, nil},
		{"an empty bucket and another", []int{none, buckets[1]}, idsOf(byBucket, buckets[1])},
	} {
		if got := runnableIn(t, st, tc.buckets); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: runnable = %v, want %v", tc.name, got, tc.want)
		}
		ts := dueIn(t, st, tc.buckets)
		if got := timerInstances(ts); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: timers of %v, want %v", tc.name, got, tc.want)
		}
		for i := 1; i < len(ts); i++ {
			if ts[i].Due.Before(ts[i-1].Due) {
				t.Errorf("%s: timers not earliest first: %+v", tc.name, ts)
			}
		}
	}
	if got := runnableIn(t, st, []int{}); got != nil {
		t.Fatalf("runnable in no bucket = %#v, want nil", got)
	}
	// The limit applies to the bucket set's rows.
	if ts, err := st.DueTimers(ctx(), now.Add(time.Hour), buckets, 3); err != nil || len(ts) != 3 {
		t.Fatalf("due timers with limit 3 = %+v, %v", ts, err)
	}
	if ids, err := st.Runnable(ctx(), buckets, 5); err != nil || len(ids) != 5 {
		t.Fatalf("runnable with limit 5 = %v, %v", ids, err)
	}
}

// An instance under a live lease is in no bucket's Runnable, until
// ReleaseLeases frees it: then exactly the bucket set's instances are.
func testBucketsAfterRelease(t *testing.T, st persistence.Store) {
	buckets, byBucket, others := spread("r", 2)
	all := append(idsOf(byBucket, buckets...), others...)
	sort.Strings(all)
	for _, id := range all {
		apply(t, st, persistence.Step{Create: &persistence.Instance{ID: id, Workflow: "wf", LeaseOwner: "node-dead", LeaseEpoch: 1},
			LeaseTTL: time.Hour, History: []persistence.Event{ev(0, "started")}})
	}
	create(t, st, "alive")
	if got := runnableIn(t, st, buckets); len(got) != 0 {
		t.Fatalf("runnable under live leases = %v", got)
	}
	if got := runnableIn(t, st, nil); len(got) != 0 {
		t.Fatalf("runnable under live leases = %v", got)
	}
	if err := st.ReleaseLeases(ctx(), "node-dead"); err != nil {
		t.Fatal(err)
	}
	if got, want := runnableIn(t, st, buckets[:1]), idsOf(byBucket, buckets[0]); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("runnable in %d after release = %v, want %v", buckets[0], got, want)
	}
	if got, want := runnableIn(t, st, buckets), idsOf(byBucket, buckets...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("runnable in %v after release = %v, want %v", buckets, got, want)
	}
	if got := runnableIn(t, st, nil); fmt.Sprint(got) != fmt.Sprint(all) {
		t.Fatalf("runnable after release = %v, want %v", got, all)
	}
	// Released instances may share its bucket (the others are picked from
	// a map): only "alive" itself must not be runnable.
	if got := runnableIn(t, st, []int{persistence.BucketOf("alive")}); slices.Contains(got, "alive") {
		t.Fatalf("another owner's instance released: %v", got)
	}
}

// ReleaseLeases fences whoever still runs under a released lease, so that a
// cluster may take a dead node's instances over before their leases expire.
func testReleaseFences(t *testing.T, st persistence.Store) {
	create(t, st, "a")
	apply(t, st, persistence.Step{Create: &persistence.Instance{ID: "b", Workflow: "wf", LeaseOwner: "node-b", LeaseEpoch: 1},
		LeaseTTL: time.Hour, History: []persistence.Event{ev(0, "started")}})
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "x")}, Status: persistence.StatusWaiting})
	// Parked under the lease, passivated (no lease): the release turns the
	// first to running, and leaves the second alone.
	create(t, st, "p")
	apply(t, st, persistence.Step{Instance: "p", Epoch: 1, Status: persistence.StatusWaiting, ReleaseLease: true})
	if err := st.ReleaseLeases(ctx(), owner); err != nil {
		t.Fatal(err)
	}
	in, err := st.Instance(ctx(), "a")
	if err != nil || in.LeaseOwner != "" || in.LeaseEpoch != 2 || in.Status != persistence.StatusRunning {
		t.Fatalf("released instance = %+v, %v", in, err)
	}
	if in, err := st.Instance(ctx(), "p"); err != nil || in.Status != persistence.StatusWaiting || in.LeaseEpoch != 1 {
		t.Fatalf("passivated instance after the release = %+v, %v", in, err)
	}
	_, err = st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(2, "y")}})
	wantErr(t, err, persistence.ErrFenced)
	_, err = st.Apply(ctx(), persistence.Step{Instance: "a", Epoch: 1, Status: persistence.StatusCompleted})
	wantErr(t, err, persistence.ErrFenced)
	if got := runnableIn(t, st, []int{persistence.BucketOf("a")}); fmt.Sprint(got) != "[a]" {
		t.Fatalf("runnable in a's bucket after release = %v, want [a]", got)
	}
	if got := runnableIn(t, st, nil); fmt.Sprint(got) != "[a]" {
		t.Fatalf("runnable after release = %v, want [a]", got)
	}
	// Another owner's lease is left alone.
	if in, _ := st.Instance(ctx(), "b"); in.LeaseOwner != "node-b" || in.LeaseEpoch != 1 {
		t.Fatalf("other owner's instance = %+v", in)
	}
	// The new holder writes with the epoch after the release's.
	in, err = st.AcquireLease(ctx(), "a", "node-c", time.Minute)
	if err != nil || in.LeaseEpoch != 3 {
		t.Fatalf("take over released instance = %+v, %v", in, err)
	}
	apply(t, st, persistence.Step{Instance: "a", Epoch: 3, History: []persistence.Event{ev(2, "y")}})
	// Releasing an owner that holds nothing changes nothing.
	if err := st.ReleaseLeases(ctx(), owner); err != nil {
		t.Fatal(err)
	}
	if in, _ := st.Instance(ctx(), "a"); in.LeaseEpoch != 3 || in.LeaseOwner != "node-c" {
		t.Fatalf("instance after releasing nobody's leases = %+v", in)
	}
}

// A timer is in its instance's bucket, whatever its own ID and however it
// was added.
func testTimerBuckets(t *testing.T, st persistence.Store) {
	const id = "timed"
	b := persistence.BucketOf(id)
	// A timer ID whose own bucket is another one.
	tid := "t"
	for i := 0; persistence.BucketOf(tid) == b; i++ {
		tid = fmt.Sprintf("t%d", i)
	}
	other := persistence.BucketOf(tid)
	check := func(when string, want int) {
		t.Helper()
		if ts := dueIn(t, st, []int{b}); len(ts) != want || want == 1 && (ts[0].Instance != id || ts[0].ID != tid) {
			t.Fatalf("%s: timers in the instance's bucket = %+v, want %d", when, ts, want)
		}
		if ts := dueIn(t, st, []int{other}); len(ts) != 0 {
			t.Fatalf("%s: timers in the timer ID's bucket = %+v", when, ts)
		}
	}
	create(t, st, id)
	now := time.Now()
	apply(t, st, persistence.Step{Instance: id, Epoch: 1, AddTimers: []persistence.Timer{{ID: tid, Due: now.Add(time.Minute)}}})
	check("added", 1)
	// Rescheduled (the same timer added again).
	apply(t, st, persistence.Step{Instance: id, Epoch: 1, AddTimers: []persistence.Timer{{ID: tid, Due: now.Add(time.Second)}}})
	check("rescheduled", 1)
	if ts := dueIn(t, st, []int{b}); !ts[0].Due.Equal(now.Add(time.Second)) && ts[0].Due.Sub(now.Add(time.Second)).Abs() > time.Microsecond {
		t.Fatalf("rescheduled timer due %v", ts[0].Due)
	}
	// Under another lease, after the old one was released, and after
	// continue-as-new.
	if err := st.ReleaseLeases(ctx(), owner); err != nil {
		t.Fatal(err)
	}
	check("lease released", 1)
	in, err := st.AcquireLease(ctx(), id, "node-b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, st, persistence.Step{Instance: id, Epoch: in.LeaseEpoch, ResetHistory: true, History: []persistence.Event{ev(0, "started")},
		AddTimers: []persistence.Timer{{ID: tid, Due: now.Add(2 * time.Second)}}})
	check("continued as new", 1)
	apply(t, st, persistence.Step{Instance: id, Epoch: in.LeaseEpoch, FireTimers: []string{tid}, History: []persistence.Event{ev(1, "timer_fired")}})
	check("fired", 0)
}

// Step.LeaseTTL leases a created instance for that long from the store's
// clock.
func testCreateLeaseTTL(t *testing.T, st persistence.Store) {
	const ttl = time.Hour
	before := time.Now()
	apply(t, st, persistence.Step{Create: &persistence.Instance{ID: "a", Workflow: "wf", LeaseOwner: owner, LeaseEpoch: 1},
		LeaseTTL: ttl, History: []persistence.Event{ev(0, "started")}})
	after := time.Now()
	in, err := st.Instance(ctx(), "a")
	if err != nil {
		t.Fatal(err)
	}
	// The store's clock is this host's here (a test server), read between
	// before and after; a millisecond covers rounding to microseconds.
	if lo, hi := before.Add(ttl-time.Millisecond), after.Add(ttl+time.Millisecond); in.LeaseExpires.Before(lo) || in.LeaseExpires.After(hi) {
		t.Fatalf("lease expires %v, want within [%v, %v]", in.LeaseExpires, lo, hi)
	}
	if in.LeaseOwner != owner || in.LeaseEpoch != 1 {
		t.Fatalf("created instance = %+v", in)
	}
	if got := runnableIn(t, st, nil); len(got) != 0 {
		t.Fatalf("runnable under a live lease = %v", got)
	}
	_, err = st.AcquireLease(ctx(), "a", "node-b", time.Minute)
	wantErr(t, err, persistence.ErrLeaseHeld)
	// Creating it again changes nothing, its lease included.
	res := apply(t, st, persistence.Step{Create: &persistence.Instance{ID: "a", Workflow: "wf", LeaseOwner: "node-b", LeaseEpoch: 1},
		LeaseTTL: time.Minute, History: []persistence.Event{ev(0, "started")}})
	if res.Existing == nil || res.Existing.LeaseOwner != owner || !res.Existing.LeaseExpires.Equal(in.LeaseExpires) {
		t.Fatalf("second create: Existing = %+v", res.Existing)
	}
}
