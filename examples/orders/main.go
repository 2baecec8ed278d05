// Orders is Norn's first example: an order workflow made of three activities
// (reserve stock, charge the card, ship), run for five orders at once.
//
// The charge fails on its first attempt for every third order and is retried
// by the activity's retry policy; each charge prints its idempotency key, the
// key a real payment API would use to drop duplicate charges. When all orders
// are done the program prints their results and the history Norn recorded
// for one of them.
//
//	go run ./examples/orders
//	go run ./examples/orders -fresh=false
//
// Everything an order does is recorded in the store (default: the SQLite file
// norn-data/norn.db, deleted first unless -fresh=false). Interrupt a run with
// Ctrl-C and run it again with -fresh=false: the orders carry on where they
// stopped, and no finished step runs again.
package main

import (
	"fmt"
	"log"
	"strings"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/examples/internal/demo"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	// demo.Start (examples/internal/demo) parses -store and -fresh, opens the store and starts a node running orderFlow.
	node, err := demo.Start(orderFlow)
	if err != nil {
		return err
	}
	defer node.Close()
	ctx, sys := node.Ctx, node.Sys

	orders := []Order{
		{N: 1, Item: "widget", Qty: 2, Cents: 1000},
		{N: 2, Item: "gadget", Qty: 1, Cents: 2450},
		{N: 3, Item: "gizmo", Qty: 3, Cents: 1200},
		{N: 4, Item: "doohickey", Qty: 1, Cents: 9900},
		{N: 5, Item: "sprocket", Qty: 4, Cents: 375},
	}
	fmt.Printf("%d orders on %s; every 3rd card charge fails once and is retried\n", len(orders), node.StoreURL)
	if !node.Fresh {
		fmt.Println("resuming: orders already in the store carry on; recorded steps do not run again")
	}
	fmt.Println("steps, printed by the activities as they run:")

	// WithID makes the spawn idempotent: on a re-run it returns the PID of
	// the order already in the store and starts nothing new.
	pids := make([]actor.PID, len(orders))
	for i, o := range orders {
		if pids[i], err = actor.Spawn(ctx, sys, orderFlow, o, actor.WithID(o.ID())); err != nil {
			return err
		}
	}

	var results []string
	var total int
	for i, pid := range pids {
		res, err := actor.Await(ctx, sys, orderFlow, pid)
		switch {
		case ctx.Err() != nil:
			fmt.Println("interrupted: run again with -fresh=false to resume the unfinished orders")
			return nil
		case err != nil:
			results = append(results, fmt.Sprintf("  %s  failed: %v", pid, err))
		default:
			total += res.Cents
			item := fmt.Sprintf("%d × %s", orders[i].Qty, orders[i].Item)
			results = append(results, fmt.Sprintf("  %s  %-13s tracking %s  charged %s",
				pid, item, res.Tracking, dollars(res.Cents)))
		}
	}
	fmt.Println("results (actor.Await):")
	fmt.Println(strings.Join(results, "\n"))
	fmt.Printf("summary: %d orders, %s charged; activity calls run by this process: %d\n",
		len(orders), dollars(total), executions.Load())

	// The history is what makes an order durable: a restarted order replays
	// it instead of running the activities again. Failed attempts that were
	// retried are not in it, only each activity's final result.
	info, err := sys.Inspect(ctx, pids[2])
	if err != nil {
		return err
	}
	fmt.Printf("history of %s (sys.Inspect, status %s):\n", info.ID, info.Status)
	for _, e := range info.History {
		fmt.Printf("  %d %-9s %-7s %-9s %s\n", e.Seq, e.Kind, e.Name, e.Ref, clip(string(e.Payload), 40))
	}
	return nil
}

func dollars(cents int) string { return fmt.Sprintf("$%d.%02d", cents/100, cents%100) }

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}
