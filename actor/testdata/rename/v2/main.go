// v2 is the next build of v1's program: Approval is renamed OrderApproval
// and given a stable name, with v1's name as an alias. It approves order-1
// with the renamed type and prints what both orders returned.
package main

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence/sqlite"
)

type OrderApproval struct{ By string }

var order = actor.Workflow("order", func(ctx *actor.Context, id string) (string, error) {
	a, err := actor.Receive[OrderApproval](ctx)
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
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(order),
		Messages: []actor.MessageName{actor.Message[OrderApproval]("orders.approval", "main.Approval")}})
	if err != nil {
		log.Fatal(err)
	}
	defer sys.Stop(ctx)
	if err := sys.Send(ctx, "order-1", OrderApproval{By: "v2"}); err != nil {
		log.Fatal(err)
	}
	for _, id := range []actor.PID{"order-1", "order-2"} {
		out, err := actor.Await(ctx, sys, order, id)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(out)
	}
}
