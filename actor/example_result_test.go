package actor_test

import (
	"context"
	"fmt"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
)

// SpawnID is safe to retry, and tells the first attempt from a repeat.
func ExampleSpawnID() {
	order := actor.Workflow("order", func(ctx *actor.Context, o Order) (int, error) { return priceOf.Run(ctx, o) })
	sys, done := node(order)
	defer done()
	ctx := context.Background()
	for range 2 {
		r, err := actor.SpawnID(ctx, sys, order, "order-o-2", Order{ID: "o-2", Total: 5})
		fmt.Println(r.PID, r.Existed, err)
	}
	// Output:
	// order-o-2 false <nil>
	// order-o-2 true <nil>
}

// Deliver sends a message the way Send, SendOn or Publish would, and tells
// whether a message ID given had been used already.
func ExampleSystem_Deliver() {
	inbox := actor.Workflow("inbox", func(ctx *actor.Context, _ struct{}) (string, error) {
		m, err := actor.Receive[string](ctx, mailbox.OnChannel("mail"))
		return m.Value, err
	})
	sys, done := node(inbox)
	defer done()
	ctx := context.Background()
	pid, _ := actor.Spawn(ctx, sys, inbox, struct{}{})
	for range 2 {
		r, err := sys.Deliver(ctx, actor.Outgoing{Channel: "mail", Target: pid, Message: "hello", ID: "mail-1"})
		fmt.Println(r.ID, r.Duplicate, err)
	}
	got, err := actor.Await(ctx, sys, inbox, pid)
	fmt.Println(got, err)
	// Output:
	// mail-1 false <nil>
	// mail-1 true <nil>
	// hello <nil>
}
