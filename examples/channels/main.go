// Channels shows the ways messages reach workflow instances:
//
//	(a) broadcast: three readers subscribe to "news"; every reader gets
//	    every headline the newsroom workflow publishes.
//	(b) competing: three workers subscribe to "jobs"; each of the nine jobs
//	    that main publishes with sys.Publish is taken by exactly one worker.
//	    Workers end when they get a "stop" message sent to their PID.
//	(c) direct: two instances play ping-pong by PID with ctx.Send and a
//	    receive filtered on the sender (mailbox.From).
//	(d) selective receive: an instance sends itself "b" then "a", takes "a"
//	    first (mailbox.Match), and only then "b", which waited in its mailbox.
//
// Run it with
//
//	go run ./examples/channels
//
// Messages, subscriptions and what each instance consumed are durable (by
// default in the SQLite file norn-data/norn.db, deleted first unless
// -fresh=false): interrupt a run and start it again with -fresh=false, and
// the instances carry on without losing or repeating a message.
package main

import (
	"context"
	"errors"
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
	// demo.Start (examples/internal/demo) parses -store and -fresh, opens the store and starts a node running these workflows.
	node, err := demo.Start(newsroom, reader, worker, pinger, ponger, picky)
	if err != nil {
		return err
	}
	defer node.Close()
	return node.RunParts(broadcast, competing, direct, selective)
}

// broadcast is part (a): every reader gets every headline.
func broadcast(ctx context.Context, sys *actor.System) error {
	fmt.Println(`(a) broadcast: 3 readers subscribe to "news", the newsroom publishes 3 headlines`)
	room, err := actor.Spawn(ctx, sys, newsroom, Newsroom{Readers: 3, Headlines: []string{
		"Norn 0.1 released", "Actors found durable", "Sleep survives restart",
	}}, actor.WithID("newsroom"))
	if err != nil {
		return err
	}
	readers := make([]actor.PID, 3)
	for i := range readers {
		id := fmt.Sprintf("reader-%d", i+1)
		if readers[i], err = actor.Spawn(ctx, sys, reader, Reader{Newsroom: room, Want: 3}, actor.WithID(id)); err != nil {
			return err
		}
	}
	if _, err := actor.Await(ctx, sys, newsroom, room); err != nil {
		return err
	}
	for _, pid := range readers {
		got, err := actor.Await(ctx, sys, reader, pid)
		if err != nil {
			return err
		}
		fmt.Printf("  %s received %q\n", pid, got)
	}
	return nil
}

// competing is part (b): a work queue; each job goes to exactly one worker.
func competing(ctx context.Context, sys *actor.System) error {
	fmt.Println(`(b) competing: 3 workers subscribe to "jobs"; each job goes to one of them`)
	// sys.Publish is not idempotent: publish only if this run created the
	// workers, so that a -fresh=false re-run does not publish the jobs twice.
	_, err := sys.Inspect(ctx, "worker-1")
	firstRun := errors.Is(err, actor.ErrNotFound)
	if err != nil && !firstRun {
		return err
	}
	workers := make([]actor.PID, 3)
	for i := range workers {
		if workers[i], err = actor.Spawn(ctx, sys, worker, struct{}{}, actor.WithID(fmt.Sprintf("worker-%d", i+1))); err != nil {
			return err
		}
	}
	if firstRun {
		fmt.Println("  main publishes job-1 … job-9 with sys.Publish")
		for i := 1; i <= 9; i++ {
			if _, err := sys.Publish(ctx, "jobs", fmt.Sprintf("job-%d", i)); err != nil {
				return err
			}
		}
	}
	// A worker takes its stop only once no job is waiting ahead of it.
	for _, pid := range workers {
		if err := sys.Send(ctx, pid, "stop"); err != nil && !errors.Is(err, actor.ErrInstanceDone) {
			return err
		}
	}
	total := 0
	for _, pid := range workers {
		jobs, err := actor.Await(ctx, sys, worker, pid)
		if err != nil {
			return err
		}
		total += len(jobs)
		fmt.Printf("  %s did %s\n", pid, strings.Join(jobs, ", "))
	}
	fmt.Printf("  %d jobs done, each by one worker\n", total)
	return nil
}

// direct is part (c): ping-pong by PID.
func direct(ctx context.Context, sys *actor.System) error {
	fmt.Println("(c) direct: ping and pong send a ball back and forth 3 times")
	pong, err := actor.Spawn(ctx, sys, ponger, 3, actor.WithID("pong"))
	if err != nil {
		return err
	}
	ping, err := actor.Spawn(ctx, sys, pinger, Rally{Peer: pong, Rounds: 3}, actor.WithID("ping"))
	if err != nil {
		return err
	}
	if _, err := actor.Await(ctx, sys, ponger, pong); err != nil {
		return err
	}
	n, err := actor.Await(ctx, sys, pinger, ping)
	if err != nil {
		return err
	}
	fmt.Printf("  rally over: ping got %d balls back\n", n)
	return nil
}

// selective is part (d): a receive that skips a message and takes it later.
func selective(ctx context.Context, sys *actor.System) error {
	fmt.Println("(d) selective receive: take \"a\" before \"b\", though \"b\" arrived first")
	pid, err := actor.Spawn(ctx, sys, picky, struct{}{}, actor.WithID("picky"))
	if err != nil {
		return err
	}
	order, err := actor.Await(ctx, sys, picky, pid)
	if err != nil {
		return err
	}
	fmt.Printf("  consumed in the order %q\n", order)
	return nil
}
