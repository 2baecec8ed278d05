package actor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

type journal struct {
	mu    sync.Mutex
	lines []string
}

func (j *journal) add(s string) {
	j.mu.Lock()
	j.lines = append(j.lines, s)
	j.mu.Unlock()
}

func (j *journal) String() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return fmt.Sprint(j.lines)
}

// booking reserves a flight, a hotel and a car; the car fails, so the hotel
// and flight are undone in reverse order, each with its input and result.
func booking(j *journal, block chan struct{}) *actor.WorkflowDef[string, string] {
	step := func(name string, fail bool) *actor.ActivityDef[string, string] {
		return actor.Activity(name, func(ctx context.Context, trip string) (string, error) {
			if fail {
				return "", supervisor.Terminal(errors.New("no cars left"))
			}
			j.add("do " + name)
			return name + "-for-" + trip, nil
		}, actor.WithCompensation(func(ctx context.Context, trip, booked string) error {
			if block != nil && name == "flight" {
				<-block
			}
			j.add("undo " + booked)
			return nil
		}), actor.WithRetry(supervisor.NoRetry()))
	}
	flight, hotel, car := step("flight", false), step("hotel", false), step("car", true)
	return actor.Workflow("booking", func(ctx *actor.Context, trip string) (string, error) {
		for _, s := range []*actor.ActivityDef[string, string]{flight, hotel} {
			if _, err := s.Run(ctx, trip); err != nil {
				return "", err
			}
		}
		if trip == "wait" {
			if _, err := actor.Receive[string](ctx, mailbox.OnChannel("never")); err != nil {
				return "", err
			}
		}
		_, err := car.Run(ctx, trip)
		return "booked", err
	})
}

func TestSagaCompensatesInReverse(t *testing.T) {
	j := &journal{}
	wf := booking(j, nil)
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, "rome")
	_, err := actor.Await(ctx, sys, wf, pid)
	var we *actor.WorkflowError
	if !errors.As(err, &we) {
		t.Fatalf("Await = %v, want a WorkflowError", err)
	}
	if got := j.String(); got != "[do flight do hotel undo hotel-for-rome undo flight-for-rome]" {
		t.Fatalf("journal = %s", got)
	}
	info, _ := sys.Inspect(ctx, pid)
	var kinds []string
	for _, e := range info.History[3:] {
		kinds = append(kinds, string(e.Kind)+":"+e.Ref)
	}
	if fmt.Sprint(kinds) != "[activity:car:1 compensating: compensation:hotel:1 compensation:flight:1 failed:]" {
		t.Fatalf("history tail = %v", kinds)
	}
}

func TestCancelCompensates(t *testing.T) {
	j := &journal{}
	wf := booking(j, nil)
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, "wait")
	for {
		if info, _ := sys.Inspect(ctx, pid); info.HistoryLen >= 3 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := sys.Cancel(ctx, pid, "trip called off"); err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Await(ctx, sys, wf, pid); !errors.Is(err, actor.ErrCancelled) {
		t.Fatalf("Await = %v", err)
	}
	if got := j.String(); got != "[do flight do hotel undo hotel-for-wait undo flight-for-wait]" {
		t.Fatalf("journal = %s", got)
	}
	if info, _ := sys.Inspect(ctx, pid); info.Status != persistence.StatusCancelled || info.Error != "trip called off" {
		t.Fatalf("instance = %+v", info.Instance)
	}
}

// A node stopping during compensation resumes it elsewhere without running
// finished compensations again.
func TestCompensationResumesAfterRestart(t *testing.T) {
	j := &journal{}
	block := make(chan struct{})
	wf := booking(j, block)
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	ctx := testutil.Ctx(t, 30*time.Second)
	sys1, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(wf), NodeID: "n", Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := actor.Spawn(ctx, sys1, wf, "oslo")
	for {
		if info, _ := sys1.Inspect(ctx, pid); info.Status == persistence.StatusCompensating && len(info.History) >= 6 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	// hotel is undone and recorded; flight's compensation is blocked. Stop
	// the node: the blocked compensation's context ends, nothing is recorded.
	stopCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_ = sys1.Stop(stopCtx) // the blocked compensation ignores its context
	cancel()
	close(block)
	sys2 := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), NodeID: "n"})
	if _, err := actor.Await(ctx, sys2, wf, pid); err == nil {
		t.Fatal("booking succeeded")
	}
	got := j.String()
	if got != "[do flight do hotel undo hotel-for-oslo undo flight-for-oslo]" &&
		got != "[do flight do hotel undo hotel-for-oslo undo flight-for-oslo undo flight-for-oslo]" {
		t.Fatalf("journal = %s", got)
	}
	info, _ := sys2.Inspect(ctx, pid)
	n := 0
	for _, e := range info.History {
		if e.Kind == "compensation" && e.Ref == "hotel:1" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("hotel compensation recorded %d times", n)
	}
}

// Continue-as-new keeps the PID and the unconsumed mailbox.
func TestRecurKeepsMailboxAndPID(t *testing.T) {
	wf := actor.Workflow("counter", func(ctx *actor.Context, total int) (int, error) {
		m, err := actor.Receive[int](ctx)
		if err != nil {
			return 0, err
		}
		if m.Value < 0 {
			return total, nil
		}
		return 0, actor.Recur(ctx, total+m.Value)
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, _ := actor.Spawn(ctx, sys, wf, 0, actor.WithID("counter"))
	for i := 1; i <= 50; i++ {
		if err := sys.Send(ctx, pid, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := sys.Send(ctx, pid, -1); err != nil {
		t.Fatal(err)
	}
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil || got != 50*51/2 {
		t.Fatalf("Await = %d, %v; want %d", got, err, 50*51/2)
	}
	info, _ := sys.Inspect(ctx, pid)
	if info.Run != 50 || len(info.History) != 3 {
		t.Fatalf("run %d with %d events; want run 50 with a fresh 3-event history", info.Run, len(info.History))
	}
}
