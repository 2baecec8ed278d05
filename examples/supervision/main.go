// Supervision shows what Norn does when workflow code crashes or a linked
// instance fails:
//
//	(a) restart: boss spawns a report child (actor.SpawnChild) and waits for
//	    its typed result (actor.AwaitChild). The child panics on its first two
//	    activations; its restart policy (actor.WithRestart: 3 restarts a
//	    minute, 50 ms back-off doubling) starts it again from history each
//	    time, and it completes. sys.Inspect reports Restarts == 2.
//	(b) budget: doomed panics every time; with MaxRestarts 2 the third panic
//	    fails it with "restart budget exhausted".
//	(c) links: trapper calls ctx.TrapExits, so its failing child's end comes
//	    as a mailbox.Down message (actor.Receive on mailbox.DownChannel) and
//	    it carries on; untrapped does not, so the same failure ends it too.
//	(d) monitor: watchdog calls ctx.Monitor on a job main started (not its
//	    child) and on trapper, which has already ended. It receives a Down
//	    for each, at once for trapper and when the job fails for the job,
//	    and the job's failure does not end it.
//
//	go run ./examples/supervision
//
// The panics are simulated with a counter in this process, outside history:
// deliberately non-deterministic, so that a restart (which replays history)
// gets past the crash. The runtime logs each restart, the exhausted budget
// and each failed instance on stderr, with the panic's stack; stdout shows
// only the example (run with 2>/dev/null to hide the logs).
//
// Instances are recorded in the store (default: the SQLite file
// norn-data/norn.db, deleted first unless -fresh=false); with -fresh=false, ended
// instances are reported from the store without running again.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

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
	node, err := demo.Start(boss, reportFlow, doomed, trapper, untrapped, chargeCard, job, watchdog)
	if err != nil {
		return err
	}
	defer node.Close()

	fmt.Printf("supervision on %s (runtime warnings go to stderr)\n", node.StoreURL)

	return node.RunParts(restart, budget, links, monitor)
}

// restart is part (a).
func restart(ctx context.Context, sys *actor.System) error {
	fmt.Println("(a) restart: a child that panics on its first two activations, then recovers")
	pid, err := actor.Spawn(ctx, sys, boss, "weekly-sales", actor.WithID("boss"))
	if err != nil {
		return err
	}
	rep, err := actor.Await(ctx, sys, boss, pid)
	if err != nil {
		return err
	}
	fmt.Printf("  boss got the child's result (actor.AwaitChild): %+v\n", rep)
	child, err := childOf(ctx, sys, pid)
	if err != nil {
		return err
	}
	info, err := sys.Inspect(ctx, child)
	if err != nil {
		return err
	}
	fmt.Printf("  sys.Inspect(%s): status %s, Restarts %d\n", child, info.Status, info.Restarts)
	return nil
}

// budget is part (b).
func budget(ctx context.Context, sys *actor.System) error {
	fmt.Println("(b) budget: a workflow that always panics, MaxRestarts 2")
	pid, err := actor.Spawn(ctx, sys, doomed, struct{}{}, actor.WithID("doomed"))
	if err != nil {
		return err
	}
	if _, err := actor.Await(ctx, sys, doomed, pid); err == nil {
		return errors.New("doomed completed")
	}
	info, err := sys.Inspect(ctx, pid)
	if err != nil {
		return err
	}
	// The error ends with the last panic's stack trace: print its first line.
	fmt.Printf("  sys.Inspect(%s): status %s, Restarts %d, error %q\n",
		pid, info.Status, info.Restarts, firstLine(info.Error))
	return nil
}

// links is part (c).
func links(ctx context.Context, sys *actor.System) error {
	fmt.Println("(c) links: two parents, each with a linked child that fails")
	trap, err := actor.Spawn(ctx, sys, trapper, 4200, actor.WithID("trapper"))
	if err != nil {
		return err
	}
	out, err := actor.Await(ctx, sys, trapper, trap)
	if err != nil {
		return err
	}
	fmt.Printf("  %s (traps exits): completed, %q\n", trap, out)

	unt, err := actor.Spawn(ctx, sys, untrapped, 4200, actor.WithID("untrapped"))
	if err != nil {
		return err
	}
	_, err = actor.Await(ctx, sys, untrapped, unt)
	var wfErr *actor.WorkflowError
	if !errors.As(err, &wfErr) {
		return fmt.Errorf("%s: want a failed workflow, got %v", unt, err)
	}
	fmt.Printf("  %s (does not): failed, %q\n", unt, wfErr.Message)
	return nil
}

// monitor is part (d).
func monitor(ctx context.Context, sys *actor.System) error {
	fmt.Println("(d) monitor: a watchdog monitors a running job and trapper (ended in (c))")
	j, err := actor.Spawn(ctx, sys, job, 300*time.Millisecond, actor.WithID("job"))
	if err != nil {
		return err
	}
	w, err := actor.Spawn(ctx, sys, watchdog, []actor.PID{j, "trapper"}, actor.WithID("watchdog"))
	if err != nil {
		return err
	}
	n, err := actor.Await(ctx, sys, watchdog, w)
	if err != nil {
		return err
	}
	fmt.Printf("  %s: completed after %d Downs, unaffected by the job's failure\n", w, n)
	return nil
}

// childOf returns the first child a parent spawned, from its history.
func childOf(ctx context.Context, sys *actor.System, parent actor.PID) (actor.PID, error) {
	info, err := sys.Inspect(ctx, parent)
	if err != nil {
		return "", err
	}
	for _, e := range info.History {
		if e.Kind == "child_spawned" {
			return actor.PID(e.Ref), nil
		}
	}
	return "", fmt.Errorf("%s spawned no child", parent)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
