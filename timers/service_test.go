package timers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeSource struct {
	mu sync.Mutex
	ts []persistence.Timer
}

// DueTimers serves a fixed list, as a store would.
func (f *fakeSource) DueTimers(_ context.Context, before time.Time, _ []int, limit int) ([]persistence.Timer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []persistence.Timer
	for _, t := range f.ts {
		if t.Due.Before(before) && len(out) < limit {
			out = append(out, t)
		}
	}
	return out, nil
}

func TestFiresInOrderNeverEarly(t *testing.T) {
	now := time.Now()
	src := &fakeSource{ts: []persistence.Timer{
		{Instance: "past", ID: "1", Due: now.Add(-time.Hour)},
		{Instance: "b", ID: "1", Due: now.Add(60 * time.Millisecond)},
		{Instance: "a", ID: "1", Due: now.Add(30 * time.Millisecond)},
		{Instance: "far", ID: "1", Due: now.Add(time.Hour)},
	}}
	type fired struct {
		t  persistence.Timer
		at time.Time
	}
	got := make(chan fired, 10)
	svc, err := New(Config{Source: src, Horizon: time.Minute, Fire: func(t persistence.Timer) { got <- fired{t, time.Now()} }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { svc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	// A timer scheduled after start is fired too (before, during or after
	// the first load).
	svc.Schedule(persistence.Timer{Instance: "c", ID: "1", Due: now.Add(45 * time.Millisecond)})
	want := []string{"past", "a", "c", "b"}
	for _, w := range want {
		select {
		case f := <-got:
			if f.t.Instance != w {
				t.Fatalf("fired %s, want %s", f.t.Instance, w)
			}
			if f.at.Before(f.t.Due) {
				t.Fatalf("%s fired early: %v before %v", w, f.at, f.t.Due)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("timer %s never fired", w)
		}
	}
	select {
	case f := <-got:
		t.Fatalf("unexpected firing of %+v", f.t)
	case <-time.After(50 * time.Millisecond):
	}
	if svc.Pending() != 0 {
		t.Fatalf("pending = %d; the far timer is beyond the horizon", svc.Pending())
	}
}

func TestConfigValidation(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("empty config accepted")
	}
}

// start runs svc until the test ends.
func start(t *testing.T, svc *Service) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = svc.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// collect returns a Fire function and a way to wait for n distinct timers.
func collect() (func(persistence.Timer), func(t *testing.T, n int) map[key]int) {
	c := make(chan persistence.Timer, 1000)
	fire := func(tm persistence.Timer) { c <- tm }
	wait := func(t *testing.T, n int) map[key]int {
		t.Helper()
		got := map[key]int{}
		deadline := time.After(10 * time.Second)
		for len(got) < n {
			select {
			case tm := <-c:
				got[key{tm.Instance, tm.ID}]++
			case <-deadline:
				t.Fatalf("%d of %d timers fired", len(got), n)
			}
		}
		return got
	}
	return fire, wait
}

// More timers due within the horizon than one load reads: the rest are
// read as soon as the first batch is done, not half a horizon later.
func TestLoadCutAtBatchLimitReadsOn(t *testing.T) {
	now := time.Now()
	src := &fakeSource{}
	for i := 0; i < 25; i++ {
		src.ts = append(src.ts, persistence.Timer{Instance: fmt.Sprintf("i%02d", i), ID: "1", Due: now.Add(time.Duration(i) * time.Millisecond)})
	}
	fire, wait := collect()
	// The fired timers stay in the source, as in a store until their
	// instances commit the fire; nothing may fire twice for it.
	svc, err := New(Config{Source: src, Fire: fire, Horizon: time.Hour, BatchLimit: 10})
	if err != nil {
		t.Fatal(err)
	}
	start(t, svc)
	for k, n := range wait(t, 25) {
		if n != 1 {
			t.Errorf("%v fired %d times", k, n)
		}
	}
}

// blockingSource holds its first read until released, as a slow store
// read would.
type blockingSource struct {
	fakeSource
	reading chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingSource) DueTimers(ctx context.Context, before time.Time, buckets []int, limit int) ([]persistence.Timer, error) {
	out, err := b.fakeSource.DueTimers(ctx, before, buckets, limit)
	b.once.Do(func() {
		close(b.reading)
		<-b.release
	})
	return out, err
}

// A timer scheduled while a load is reading the store (committed after the
// read's snapshot) fires: it is not dropped until the next reload.
func TestScheduleDuringLoad(t *testing.T) {
	src := &blockingSource{reading: make(chan struct{}), release: make(chan struct{})}
	fire, wait := collect()
	svc, err := New(Config{Source: src, Fire: fire, Horizon: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	start(t, svc)
	<-src.reading
	svc.Schedule(persistence.Timer{Instance: "late", ID: "1", Due: time.Now().Add(time.Millisecond)})
	close(src.release)
	wait(t, 1)
}

// ownHalf owns the instances whose name starts with "a".
type ownHalf struct{}

func (ownHalf) Owns(id string) bool { return strings.HasPrefix(id, "a") }
func (ownHalf) Buckets() []int      { return []int{1} }

// recordingSource remembers the bucket sets it was asked for.
type recordingSource struct {
	fakeSource
	mu      sync.Mutex
	buckets [][]int
}

func (r *recordingSource) DueTimers(ctx context.Context, before time.Time, buckets []int, limit int) ([]persistence.Timer, error) {
	r.mu.Lock()
	r.buckets = append(r.buckets, buckets)
	r.mu.Unlock()
	return r.fakeSource.DueTimers(ctx, before, buckets, limit)
}

// A node reads only its buckets and fires only its instances' timers.
func TestOwnership(t *testing.T) {
	now := time.Now()
	src := &recordingSource{fakeSource: fakeSource{ts: []persistence.Timer{
		{Instance: "a1", ID: "1", Due: now}, {Instance: "b1", ID: "1", Due: now}, {Instance: "a2", ID: "1", Due: now.Add(time.Millisecond)},
	}}}
	fire, wait := collect()
	svc, err := New(Config{Source: src, Fire: fire, Horizon: time.Hour, Ownership: ownHalf{}})
	if err != nil {
		t.Fatal(err)
	}
	svc.Schedule(persistence.Timer{Instance: "b2", ID: "1", Due: now})
	start(t, svc)
	got := wait(t, 2)
	if got[key{"a1", "1"}] != 1 || got[key{"a2", "1"}] != 1 {
		t.Fatalf("fired %v, want a1 and a2", got)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if len(src.buckets) == 0 || len(src.buckets[0]) != 1 || src.buckets[0][0] != 1 {
		t.Fatalf("read buckets %v, want [[1]]", src.buckets)
	}
}

// TestScheduleAfterItFired: the commit that scheduled a timer can reach
// Schedule after a load already read the timer from the store and fired
// it. The timer is not fired twice, and Schedule copes with the heap being
// empty.
func TestScheduleAfterItFired(t *testing.T) {
	tm := persistence.Timer{Instance: "x", ID: "1", Due: time.Now().Add(-time.Millisecond)}
	src := &fakeSource{ts: []persistence.Timer{tm}}
	got := make(chan persistence.Timer, 4)
	svc, err := New(Config{Source: src, Horizon: time.Minute, Fire: func(t persistence.Timer) { got <- t }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { svc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the loaded timer never fired")
	}
	svc.Schedule(tm) // panicked on the empty heap
	if n := svc.Pending(); n != 0 {
		t.Fatalf("pending = %d after scheduling a fired timer; want 0", n)
	}
	select {
	case f := <-got:
		t.Fatalf("fired twice: %+v", f)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestWarmsAheadOfFiring: with Warm set, each timer is warmed WarmLead
// before it is due (at once when it has less left), and fired at its due
// time, never before; the order of both follows the due times.
func TestWarmsAheadOfFiring(t *testing.T) {
	now := time.Now()
	const lead = 150 * time.Millisecond
	src := &fakeSource{ts: []persistence.Timer{
		{Instance: "past", ID: "1", Due: now.Add(-time.Hour)},
		{Instance: "b", ID: "1", Due: now.Add(600 * time.Millisecond)},
		{Instance: "a", ID: "1", Due: now.Add(400 * time.Millisecond)},
		{Instance: "far", ID: "1", Due: now.Add(time.Hour)},
	}}
	type call struct {
		warm bool
		t    persistence.Timer
		at   time.Time
	}
	got := make(chan call, 20)
	svc, err := New(Config{Source: src, Horizon: time.Minute, WarmLead: lead,
		Warm: func(t persistence.Timer) { got <- call{true, t, time.Now()} },
		Fire: func(t persistence.Timer) { got <- call{false, t, time.Now()} }})
	if err != nil {
		t.Fatal(err)
	}
	start(t, svc)
	// Less than the lead left: warmed at once.
	svc.Schedule(persistence.Timer{Instance: "c", ID: "1", Due: now.Add(100 * time.Millisecond)})

	warmed := map[string]time.Time{}
	var order []string
	for len(order) < 8 {
		var c call
		select {
		case c = <-got:
		case <-time.After(5 * time.Second):
			t.Fatalf("after %v: nothing more", order)
		}
		name := c.t.Instance
		if c.warm {
			if _, ok := warmed[name]; ok {
				t.Fatalf("%s warmed twice", name)
			}
			warmed[name] = c.at
			if early := c.t.Due.Sub(c.at); early > lead {
				t.Fatalf("%s warmed %v before it is due, more than the lead %v", name, early, lead)
			}
			order = append(order, "w:"+name)
			continue
		}
		if _, ok := warmed[name]; !ok {
			t.Fatalf("%s fired before it was warmed", name)
		}
		if c.at.Before(c.t.Due) {
			t.Fatalf("%s fired early", name)
		}
		order = append(order, "f:"+name)
	}
	// Fires follow the due times (c's place next to past varies: it may
	// be scheduled before or after the first load).
	var fires []string
	for _, o := range order {
		if name, ok := strings.CutPrefix(o, "f:"); ok && name != "c" {
			fires = append(fires, name)
		}
	}
	if got := strings.Join(fires, " "); got != "past a b" {
		t.Fatalf("fired %s, want past a b (calls %v)", got, order)
	}
	select {
	case c := <-got:
		t.Fatalf("unexpected call for %+v (warm %v)", c.t, c.warm)
	case <-time.After(50 * time.Millisecond):
	}
	if n := svc.Pending(); n != 0 {
		t.Fatalf("pending = %d; the far timer is beyond the horizon", n)
	}
}

// TestWarmAcrossCutLoads: when loads are cut at BatchLimit, the next one
// comes a warm lead before the horizon, so that the timers just past it
// are still warmed well ahead (not at the moment they come due).
func TestWarmAcrossCutLoads(t *testing.T) {
	now := time.Now()
	const lead, gap = time.Second, 100 * time.Millisecond
	src := &fakeSource{}
	for i := range 20 {
		src.ts = append(src.ts, persistence.Timer{Instance: fmt.Sprintf("i%02d", i), ID: "1", Due: now.Add(1500*time.Millisecond + time.Duration(i)*gap)})
	}
	var mu sync.Mutex
	ahead := map[string]time.Duration{}
	fire, wait := collect()
	svc, err := New(Config{Source: src, Fire: fire, Horizon: time.Hour, BatchLimit: 5, WarmLead: lead,
		Warm: func(t persistence.Timer) {
			mu.Lock()
			ahead[t.Instance] = time.Until(t.Due)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, svc)
	for k, n := range wait(t, 20) {
		if n != 1 {
			t.Errorf("%v fired %d times", k, n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, tm := range src.ts {
		// A batch spans 500ms of due times: read at the horizon, the
		// first timer past it would be warmed at most one gap ahead.
		if a, ok := ahead[tm.Instance]; !ok || a < lead/2 {
			t.Errorf("%s warmed %v ahead (warmed: %v), want about %v", tm.Instance, a, ok, lead)
		}
	}
}

// gatedSource serves fakeSource, but every load after the first waits
// for the gate (a slow read of a long timer table).
type gatedSource struct {
	fakeSource
	calls   atomic.Int32
	started chan struct{}
	gate    chan struct{}
}

func (g *gatedSource) DueTimers(ctx context.Context, before time.Time, b []int, limit int) ([]persistence.Timer, error) {
	if g.calls.Add(1) > 1 {
		g.started <- struct{}{}
		select {
		case <-g.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.fakeSource.DueTimers(ctx, before, b, limit)
}

// TestFiresDuringSlowLoad: a load that takes long does not hold back the
// timers already held.
func TestFiresDuringSlowLoad(t *testing.T) {
	src := &gatedSource{started: make(chan struct{}, 10), gate: make(chan struct{})}
	src.ts = []persistence.Timer{{Instance: "a", ID: "1", Due: time.Now().Add(300 * time.Millisecond)}}
	fired := make(chan string, 10)
	svc, err := New(Config{Source: src, Horizon: time.Minute, Fire: func(t persistence.Timer) { fired <- t.Instance }})
	if err != nil {
		t.Fatal(err)
	}
	start(t, svc)
	eventually(t, func() bool { return svc.Pending() == 1 })
	svc.Reload()
	<-src.started // the second load is stuck at the gate
	select {
	case id := <-fired:
		if id != "a" {
			t.Fatalf("fired %s", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a held timer did not fire while a load was slow")
	}
	close(src.gate)
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
