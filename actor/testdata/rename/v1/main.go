// v1 is the first build of a program whose message type is later renamed
// (see v2): it starts an order that parks waiting for an Approval, sends
// one Approval to a second order before it starts waiting, and exits.
package main

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// Approval is stored as "main.Approval", its Go type name: v1 names no
// message.
type Approval struct{ By string }

var order = actor.Workflow("order", func(ctx *actor.Context, id string) (string, error) {
	a, err := actor.Receive[Approval](ctx)
	if err != nil {
		return "", err
	}
	return id + " approved by " + a.Value.By, nil
})

func main() {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, os.Args[1], sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(order)})
	if err != nil {
		log.Fatal(err)
	}
	defer sys.Stop(ctx)
	for _, id := range []string{"order-1", "order-2"} {
		if _, err := actor.Spawn(ctx, sys, order, id, actor.WithID(id)); err != nil {
			log.Fatal(err)
		}
	}
	// order-2's approval is in its mailbox, under the old name, before v2
	// runs; order-1 parks with nothing.
	if err := sys.Send(ctx, "order-2", Approval{By: "v1"}); err != nil {
		log.Fatal(err)
	}
	for {
		info, err := sys.Inspect(ctx, "order-1")
		if err != nil {
			log.Fatal(err)
		}
		if info.Status == actor.StatusWaiting {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
