package actor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// node starts a System on a fresh SQLite file for the examples.
func node(wfs ...actor.Definition) (*actor.System, func()) {
	dir, _ := os.MkdirTemp("", "norn-example")
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "norn.db"), sqlite.Options{})
	if err != nil {
		panic(err)
	}
	sys, err := actor.Start(context.Background(), actor.Config{Store: st, Workflows: wfs})
	if err != nil {
		panic(err)
	}
	return sys, func() {
		_ = sys.Stop(context.Background())
		_ = st.Close()
		_ = os.RemoveAll(dir)
	}
}

type Order struct {
	ID    string
	Total int
}

var priceOf = actor.Activity("price", func(ctx context.Context, o Order) (int, error) {
	return o.Total * 2, nil // a side effect would go here; its result is recorded
})

// Spawn starts an instance; Await waits for its typed result.
func ExampleSpawn() {
	order := actor.Workflow("order", func(ctx *actor.Context, o Order) (string, error) {
		p, err := priceOf.Run(ctx, o)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s costs %d", o.ID, p), nil
	})
	sys, done := node(order)
	defer done()
	ctx := context.Background()
	pid, _ := actor.Spawn(ctx, sys, order, Order{ID: "o-1", Total: 21}, actor.WithID("order-o-1"))
	res, err := actor.Await(ctx, sys, order, pid)
	fmt.Println(res, err)
	// Output: o-1 costs 42 <nil>
}

type Approval struct{ By string }
type Ping struct{ N int }

// Receive takes only messages of its type: a Ping waits while the workflow
// receives an Approval, and is still there for the Receive that wants it.
func ExampleReceive() {
	approver := actor.Workflow("approver", func(ctx *actor.Context, _ int) (string, error) {
		a, err := actor.Receive[Approval](ctx, mailbox.Timeout(time.Hour))
		if err != nil {
			return "", err
		}
		p, err := actor.Receive[Ping](ctx)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("approved by %s, then ping %d", a.Value.By, p.Value.N), nil
	})
	sys, done := node(approver)
	defer done()
	ctx := context.Background()
	pid, _ := actor.Spawn(ctx, sys, approver, 0)
	_ = sys.Send(ctx, pid, Ping{N: 7})
	_ = sys.Send(ctx, pid, Approval{By: "ann"})
	res, _ := actor.Await(ctx, sys, approver, pid)
	fmt.Println(res)
	// Output: approved by ann, then ping 7
}

var (
	slow = actor.Activity("slow", func(ctx context.Context, s string) (string, error) {
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
		return "slow " + s, nil
	})
	quick = actor.Activity("quick", func(ctx context.Context, s string) (string, error) { return "quick " + s, nil })
)

// Go starts activities side by side; Select waits for the first, WaitAll
// for all. The order in which outcomes were observed is recorded, so a
// replay picks the same one.
func ExampleSelect() {
	race := actor.Workflow("race", func(ctx *actor.Context, s string) (string, error) {
		a, b := slow.Go(ctx, s), quick.Go(ctx, s)
		i, err := actor.Select(ctx, a, b)
		if err != nil {
			return "", err
		}
		if err := actor.WaitAll(ctx, a, b); err != nil {
			return "", err
		}
		first, _ := []*actor.Future[string]{a, b}[i].Get(ctx)
		return "first: " + first, nil
	})
	sys, done := node(race)
	defer done()
	ctx := context.Background()
	pid, _ := actor.Spawn(ctx, sys, race, "x")
	res, _ := actor.Await(ctx, sys, race, pid)
	fmt.Println(res)
	// Output: first: quick x
}

// Version lets new code take a new branch while instances that started
// under the old code keep the old one on replay.
func ExampleContext_Version() {
	shipping := actor.Workflow("shipping", func(ctx *actor.Context, o Order) (string, error) {
		if ctx.Version("free-shipping", 1) == 1 {
			return "free", nil // new code
		}
		return "paid", nil // what instances started before the change do
	})
	sys, done := node(shipping)
	defer done()
	ctx := context.Background()
	pid, _ := actor.Spawn(ctx, sys, shipping, Order{ID: "o-2"})
	res, _ := actor.Await(ctx, sys, shipping, pid)
	fmt.Println(res)
	// Output: free
}

// Replay checks today's code against a recorded history without side
// effects; a changed call order is reported as the first divergence.
func ExampleReplay() {
	v1 := actor.Workflow("pricing", func(ctx *actor.Context, o Order) (int, error) {
		return priceOf.Run(ctx, o)
	})
	sys, done := node(v1)
	defer done()
	ctx := context.Background()
	pid, _ := actor.Spawn(ctx, sys, v1, Order{ID: "o-3", Total: 5})
	_, _ = actor.Await(ctx, sys, v1, pid)
	hist, _ := sys.History(ctx, pid)

	fmt.Println("v1:", actor.Replay(ctx, v1, hist))
	v2 := actor.Workflow("pricing", func(ctx *actor.Context, o Order) (int, error) {
		o.Total++ // a different input to the recorded call
		return priceOf.Run(ctx, o)
	})
	var nd *actor.NonDeterminismError
	err := actor.Replay(ctx, v2, hist)
	fmt.Println("v2 diverges:", errors.As(err, &nd), nd.Seq)
	// Output:
	// v1: <nil>
	// v2 diverges: true 1
}
