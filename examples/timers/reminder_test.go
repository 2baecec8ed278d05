package main

import (
	"context"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntest"
)

// quietActivities replaces the activities, which print and feed the
// simulated users, with ones that do nothing.
func quietActivities(env *norntest.Env) {
	nothing := func(context.Context, Reminder) (struct{}, error) { return struct{}{}, nil }
	norntest.Mock(env, sendReminder, nothing)
	norntest.Mock(env, escalate, nothing)
}

var weekly = Reminder{To: "bob", Text: "review the design doc", After: 48 * time.Hour, AckWithin: 8 * time.Hour}

func TestReminderEscalatesWithoutAck(t *testing.T) {
	t.Parallel()
	env := norntest.New(t, norntest.Options{Workflows: actor.Register(reminderFlow)})
	quietActivities(env)
	start := env.Now()
	pid := norntest.Spawn(env, reminderFlow, weekly)
	got, err := norntest.Await(env, reminderFlow, pid)
	if err != nil || got != "escalated" {
		t.Fatalf("reminder = %q, %v; want escalated", got, err)
	}
	if d := env.Now().Sub(start); d != 56*time.Hour {
		t.Fatalf("escalated after %v of virtual time, want 56h (48h sleep + 8h deadline)", d)
	}
	if n := env.Executions(pid, "escalate:1"); n != 1 {
		t.Fatalf("escalate ran %d times", n)
	}
}

func TestReminderAcknowledged(t *testing.T) {
	t.Parallel()
	env := norntest.New(t, norntest.Options{Workflows: actor.Register(reminderFlow)})
	quietActivities(env)
	pid := norntest.Spawn(env, reminderFlow, weekly)
	env.Advance(48 * time.Hour) // the sleep ends, the reminder goes out
	if n := env.Executions(pid, "send-reminder:1"); n != 1 {
		t.Fatalf("after 48h the reminder was sent %d times, want 1", n)
	}
	env.Advance(7 * time.Hour) // within the 8h deadline
	if err := env.System().Send(env.Ctx(), pid, Ack{By: "bob"}); err != nil {
		t.Fatal(err)
	}
	got, err := norntest.Await(env, reminderFlow, pid)
	if err != nil || got != "acknowledged" {
		t.Fatalf("reminder = %q, %v; want acknowledged", got, err)
	}
	if n := env.Executions(pid, "escalate:1"); n != 0 {
		t.Fatalf("escalate ran %d times after an ack", n)
	}
}

func TestReminderCrashEverywhere(t *testing.T) {
	t.Parallel()
	rep := norntest.CrashEverywhere(t, norntest.Options{Workflows: actor.Register(reminderFlow)}, reminderFlow, weekly, quietActivities)
	t.Logf("%d runs over %d commits", rep.Runs, rep.Commits)
}
