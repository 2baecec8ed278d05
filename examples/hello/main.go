// Hello is the README's example: a workflow that runs an activity with
// retries, then waits durably for a message, on an embedded SQLite file.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence/sqlite"
	"github.com/nornlabs/norn/supervisor"
)

type Approval struct{ By string }

// An activity does the side effects; its result is recorded once, and a
// failed attempt is retried (here after 100ms, 200ms, … at most 5 attempts).
var greet = actor.Activity("greet", func(ctx context.Context, name string) (string, error) {
	return "hello, " + name, nil
}, actor.WithRetry(supervisor.Exponential(100*time.Millisecond, 2, time.Second, 5)))

// A workflow is plain Go; each durable call is recorded, so after a crash it
// replays to where it stopped and carries on.
var hello = actor.Workflow("hello", func(ctx *actor.Context, name string) (string, error) {
	msg, err := greet.Run(ctx, name)
	if err != nil {
		return "", err
	}
	// Parks until an Approval arrives (a durable timer bounds the wait).
	a, err := actor.Receive[Approval](ctx, mailbox.Timeout(24*time.Hour))
	if err != nil {
		return "", err
	}
	return msg + ", approved by " + a.Value.By, nil
})

func main() {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "norn-data/norn.db", sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(hello)})
	if err != nil {
		log.Fatal(err)
	}
	defer sys.Stop(ctx)

	pid, err := actor.Spawn(ctx, sys, hello, "ann")
	if err != nil {
		log.Fatal(err)
	}
	if err := sys.Send(ctx, pid, Approval{By: "bob"}); err != nil { // durable when it returns
		log.Fatal(err)
	}
	out, err := actor.Await(ctx, sys, hello, pid)
	fmt.Println(out, err)
}
