package main

import (
	"errors"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntest"
)

func TestHelloApproved(t *testing.T) {
	t.Parallel()
	env := norntest.New(t, norntest.Options{Workflows: actor.Register(hello)})
	pid := norntest.Spawn(env, hello, "ann")
	env.AwaitStatus(pid, actor.StatusWaiting) // parked in Receive
	if err := env.System().Send(env.Ctx(), pid, Approval{By: "bob"}); err != nil {
		t.Fatal(err)
	}
	got, err := norntest.Await(env, hello, pid)
	if err != nil || got != "hello, ann, approved by bob" {
		t.Fatalf("hello = %q, %v", got, err)
	}
}

func TestHelloTimesOutAfter24Hours(t *testing.T) {
	t.Parallel()
	env := norntest.New(t, norntest.Options{Workflows: actor.Register(hello)})
	start := env.Now()
	pid := norntest.Spawn(env, hello, "ann")
	_, err := norntest.Await(env, hello, pid)
	if !errors.Is(err, actor.ErrTimeout) {
		t.Fatalf("hello without approval = %v, want ErrTimeout", err)
	}
	if d := env.Now().Sub(start); d != 24*time.Hour {
		t.Fatalf("the timeout came after %v of virtual time, want 24h", d)
	}
}

func TestHelloCrashEverywhere(t *testing.T) {
	t.Parallel()
	rep := norntest.CrashEverywhere(t, norntest.Options{Workflows: actor.Register(hello)}, hello, "ann", nil)
	t.Logf("%d runs over %d commits", rep.Runs, rep.Commits)
}
