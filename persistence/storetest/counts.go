package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// testCountInstances: every instance counts, ended ones too, by workflow
// and status, ordered by workflow then status.
func testCountInstances(t *testing.T, st persistence.Store) {
	if got, err := st.CountInstances(ctx()); err != nil || len(got) != 0 {
		t.Fatalf("empty store: CountInstances = %v, %v", got, err)
	}
	mk := func(id, wf string) {
		apply(t, st, persistence.Step{Create: &persistence.Instance{ID: id, Workflow: wf, LeaseOwner: owner, LeaseEpoch: 1,
			LeaseExpires: time.Now().Add(time.Minute)}, History: []persistence.Event{ev(0, "started")}})
	}
	for i := range 3 {
		mk(fmt.Sprintf("b%d", i), "billing")
	}
	for i := range 2 {
		mk(fmt.Sprintf("a%d", i), "audit")
	}
	apply(t, st, persistence.Step{Instance: "b0", Epoch: 1, Status: persistence.StatusCompleted})
	apply(t, st, persistence.Step{Instance: "b1", Epoch: 1, Status: persistence.StatusFailed, Error: "boom"})
	apply(t, st, persistence.Step{Instance: "a1", Epoch: 1, Status: persistence.StatusWaiting})

	got, err := st.CountInstances(ctx())
	if err != nil {
		t.Fatal(err)
	}
	want := []persistence.InstanceCount{
		{Workflow: "audit", Status: persistence.StatusRunning, Count: 1},
		{Workflow: "audit", Status: persistence.StatusWaiting, Count: 1},
		{Workflow: "billing", Status: persistence.StatusCompleted, Count: 1},
		{Workflow: "billing", Status: persistence.StatusFailed, Count: 1},
		{Workflow: "billing", Status: persistence.StatusRunning, Count: 1},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("CountInstances =\n%v\nwant\n%v", got, want)
	}
	// Stats counts the live ones alone, in the same order.
	stats, err := st.Stats(ctx())
	if err != nil {
		t.Fatal(err)
	}
	live := []persistence.InstanceCount{want[0], want[1], want[4]}
	if fmt.Sprint(stats.Instances) != fmt.Sprint(live) {
		t.Fatalf("Stats().Instances =\n%v\nwant\n%v", stats.Instances, live)
	}
}

// commitLog records what one commit observer saw.
type commitLog struct {
	mu    sync.Mutex
	infos []persistence.CommitInfo
	seen  chan struct{} // signalled (without blocking) on each commit
}

func newCommitLog() *commitLog { return &commitLog{seen: make(chan struct{}, 1)} }

func (c *commitLog) ObserveCommit(ci persistence.CommitInfo) {
	c.mu.Lock()
	c.infos = append(c.infos, ci)
	c.mu.Unlock()
	select {
	case c.seen <- struct{}{}:
	default:
	}
}

// steps is the sum of the steps of the observed commits that succeeded.
func (c *commitLog) steps() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ci := range c.infos {
		if ci.Err == nil {
			n += ci.Steps
		}
	}
	return n
}

// waitSteps waits until the observer saw at least n committed steps: the
// drivers report a commit after they answered its callers.
func (c *commitLog) waitSteps(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for c.steps() < n {
		select {
		case <-c.seen:
		case <-timeout:
			t.Fatalf("observer saw %d committed steps, want %d", c.steps(), n)
		}
	}
}

// testObserveCommits: observers added through ObserveCommits learn of
// every commit until removed, and a removed one learns of no more.
func testObserveCommits(t *testing.T, st persistence.Store) {
	kept, dropped := newCommitLog(), newCommitLog()
	st.ObserveCommits(kept)
	remove := st.ObserveCommits(dropped)
	create(t, st, "a")
	kept.waitSteps(t, 1)
	dropped.waitSteps(t, 1)
	kept.mu.Lock()
	first := kept.infos[0]
	kept.mu.Unlock()
	if first.Driver == "" || first.Duration <= 0 {
		t.Fatalf("commit info = %+v: want the driver named and a duration", first)
	}
	remove()
	remove() // a second call does nothing
	before := dropped.steps()
	apply(t, st, persistence.Step{Instance: "a", Epoch: 1, History: []persistence.Event{ev(1, "step")}})
	kept.waitSteps(t, 2)
	if got := dropped.steps(); got != before {
		t.Fatalf("removed observer saw %d steps after removal", got-before)
	}
}
