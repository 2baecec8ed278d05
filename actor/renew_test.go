package actor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// heldEnd holds the end step of one instance right after it committed (its
// lease given back, the activation still registered), and reports every
// lease renewal that starts from then on.
type heldEnd struct {
	persistence.Store
	id       string
	ended    chan struct{} // closed once the end committed
	endOnce  sync.Once
	renewals chan struct{} // one send per renewal after the end
	release  chan struct{} // closed by the test to let the end return
}

func (s *heldEnd) Apply(ctx context.Context, step persistence.Step) (persistence.StepResult, error) {
	res, err := s.Store.Apply(ctx, step)
	if err == nil && step.Instance == s.id && step.Status.Terminal() {
		s.endOnce.Do(func() { close(s.ended) })
		<-s.release
	}
	return res, err
}

func (s *heldEnd) RenewLeases(ctx context.Context, owner string, ttl time.Duration) ([]string, error) {
	select {
	case <-s.ended:
		select {
		case s.renewals <- struct{}{}:
		case <-ctx.Done():
		}
	default:
	}
	return s.Store.RenewLeases(ctx, owner, ttl)
}

// A lease renewal that runs while an activation's end is committing finds
// the lease gone: the end gave it back, nobody took it over, so the
// activation is not reported lost nor stopped.
func TestRenewalDuringEndIsNoLoss(t *testing.T) {
	const id = "ending"
	st := &heldEnd{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), id: id,
		ended: make(chan struct{}), renewals: make(chan struct{}), release: make(chan struct{})}
	var mu sync.Mutex
	var seen []actor.HookKind
	hooks := hookFunc(func(e actor.HookEvent) {
		if e.Instance == id {
			mu.Lock()
			seen = append(seen, e.Kind)
			mu.Unlock()
		}
	})
	wf := actor.Workflow("ends", func(ctx *actor.Context, n int) (int, error) { return n + 1, nil })
	sys := testutil.StartNode(t, slowNets(actor.Config{Store: st, Workflows: actor.Register(wf), Hooks: hooks,
		LeaseTTL: 600 * time.Millisecond}))
	ctx := testutil.Ctx(t, liveWait)
	pid, err := actor.Spawn(ctx, sys, wf, 1, actor.WithID(id))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.ended:
	case <-ctx.Done():
		t.Fatal("the end never committed")
	}
	// The renewal loop runs one renewal at a time: once the second renewal
	// after the end has started, the first one (which no longer found the
	// lease) has dealt with the activation.
	for i := range 2 {
		select {
		case <-st.renewals:
		case <-ctx.Done():
			t.Fatalf("renewal %d after the end never came", i+1)
		}
	}
	close(st.release)
	if got, err := actor.Await(ctx, sys, wf, pid); err != nil || got != 2 {
		t.Fatalf("Await = %d, %v", got, err)
	}
	testutil.Eventually(t, liveWait, "the completion hook", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range seen {
			if k == actor.HookInstanceCompleted {
				return true
			}
		}
		return false
	})
	mu.Lock()
	defer mu.Unlock()
	for _, k := range seen {
		if k == actor.HookInstanceLost {
			t.Fatalf("the finishing activation was reported lost: hooks %v", seen)
		}
	}
}
