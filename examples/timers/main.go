// Timers shows durable timers: a reminder workflow sleeps (ctx.Sleep), sends
// a reminder (an activity), then waits for an acknowledgement with a
// deadline (actor.Receive with mailbox.Timeout) and escalates if none comes.
//
// Two reminders run: alice acknowledges hers (main plays the user and sends
// the Ack with sys.Send once she has it); bob never answers, so his reminder
// times out and is escalated. Each line shows the time since the start.
//
//	go run ./examples/timers
//
// Timers are stored with their due time (by default in an SQLite file under
// ./norn-data, deleted first unless -fresh=false). Interrupt a run during a
// sleep and start it again with -fresh=false: the reminders carry on, and a
// timer that came due meanwhile fires at once. (The simulated users live in
// this process only: a reminder delivered before the interruption is not
// acknowledged after it, so it escalates.)
package main

import (
	"context"
	"errors"
	"flag"
	"io/fs"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence/storeurl"
)

func main() {
	storeURL := flag.String("store", "sqlite://norn-data/timers.db", "store URL: sqlite://path or postgres://…")
	fresh := flag.Bool("fresh", true, "delete the SQLite file first; -fresh=false resumes unfinished reminders")
	flag.Parse()
	if err := run(*storeURL, *fresh); err != nil {
		log.Fatal(err)
	}
}

func run(storeURL string, fresh bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if fresh {
		if err := removeSQLite(storeURL); err != nil {
			return err
		}
	}
	st, err := storeurl.Open(ctx, storeURL)
	if err != nil {
		return err
	}
	defer st.Close()

	start = time.Now() // the timeline starts with the node
	sys, err := actor.Start(ctx, actor.Config{
		Store:     st,
		Workflows: actor.Register(reminderFlow),
		// Short leases: a re-run after kill -9 takes the reminders back as
		// soon as the dead run's leases expire (the default is 10s).
		LeaseTTL: 2 * time.Second,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := sys.Stop(ctx); err != nil {
			log.Print(err)
		}
	}()

	usersCtx, stopUsers := context.WithCancel(ctx)
	var users sync.WaitGroup
	users.Go(func() { simulateUsers(usersCtx, sys, &users) })
	defer users.Wait()
	defer stopUsers()

	reminders := []Reminder{
		{To: "alice", Text: "stand-up in 5 minutes", After: 500 * time.Millisecond, AckWithin: time.Second},
		{To: "bob", Text: "review the design doc", After: 700 * time.Millisecond, AckWithin: time.Second},
	}
	logf("spawn reminder-alice and reminder-bob")
	pids := make([]actor.PID, len(reminders))
	for i, r := range reminders {
		if pids[i], err = actor.Spawn(ctx, sys, reminderFlow, r, actor.WithID("reminder-"+r.To)); err != nil {
			return err
		}
	}
	for _, pid := range pids {
		outcome, err := actor.Await(ctx, sys, reminderFlow, pid)
		if ctx.Err() != nil {
			logf("interrupted: run again with -fresh=false to resume")
			return nil
		}
		if err != nil {
			return err
		}
		logf("%s: %s", pid, outcome)
	}
	return nil
}

// simulateUsers reads the reminders as they are delivered: alice
// acknowledges hers after 300 ms, bob ignores his.
func simulateUsers(ctx context.Context, sys *actor.System, wg *sync.WaitGroup) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-inbox:
			if r.To != "alice" {
				logf("%s reads the reminder and does nothing", r.To)
				continue
			}
			wg.Go(func() {
				select {
				case <-ctx.Done():
					return
				case <-time.After(300 * time.Millisecond):
				}
				logf("%s acknowledges: sys.Send(reminder-%s, Ack)", r.To, r.To)
				err := sys.Send(ctx, actor.PID("reminder-"+r.To), Ack{By: r.To})
				if err != nil && ctx.Err() == nil {
					logf("%s's ack failed: %v", r.To, err)
				}
			})
		}
	}
}

// removeSQLite deletes an SQLite store's files so that a run starts clean.
// Other stores are left alone: with them a re-run reuses the instances of
// earlier runs, as -fresh=false does.
func removeSQLite(url string) error {
	path, ok := strings.CutPrefix(url, "sqlite://")
	if !ok && strings.Contains(url, "://") {
		return nil
	}
	if !ok {
		path = url
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}
