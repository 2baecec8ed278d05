package norntest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nornlabs/norn/actor"
)

// CrashReport says what CrashEverywhere did.
type CrashReport struct {
	// Commits is how many commits the uninterrupted run made: the step
	// boundaries a crash was tried at.
	Commits int64
	// Runs is how many runs there were, the uninterrupted one included.
	Runs int
}

// crashID is the instance ID of the runs of CrashEverywhere.
const crashID = "crash-everywhere"

// CrashEverywhere runs wf with in once without interruption, then once
// per step boundary (each commit the uninterrupted run made) with a crash
// right after that commit: the node loses everything it holds in memory
// (activations, activities in flight, timers) and writes nothing more, the
// store keeps what was committed, and a new node carries on from there. It
// fails the test where a run differs from the uninterrupted one in:
//
//   - the outcome: status, result or error;
//   - the recorded values: the instance's history events (kind, name,
//     reference, payload, error), taken as a set (activities run in
//     parallel may finish in either order);
//   - the activity executions per ID: every attempt number of every
//     activity ID must have run, and no attempt twice, except the one the
//     crash cut short (started, its outcome not yet committed), which runs
//     again as it would in production.
//
// Each run has a fresh store and virtual clock; setup, if not nil, is
// called on each Env before the instance starts (to Mock activities).
// Code that reads the wall clock, iterates a map, draws random numbers or
// keeps state in globals outside the history is what this finds.
func CrashEverywhere[In, Out any](t testing.TB, opts Options, wf *actor.WorkflowDef[In, Out], in In, setup func(*Env)) CrashReport {
	t.Helper()
	ref := crashRun(t, opts, wf, in, setup, 0)
	rep := CrashReport{Commits: ref.commits, Runs: 1}
	for k := int64(1); k < ref.commits; k++ {
		got := crashRun(t, opts, wf, in, setup, k)
		rep.Runs++
		if msg := ref.diff(got); msg != "" {
			t.Fatalf("norntest: CrashEverywhere(%s): crashed after commit %d of %d: %s", wf.Name(), k, ref.commits, msg)
		}
		if !got.crashed {
			break // this run ended in fewer commits: no boundary left
		}
	}
	return rep
}

// crashResult is what one run of CrashEverywhere observed.
type crashResult struct {
	status  actor.Status
	output  string
	err     string
	history []string
	runs    map[execKey]map[int]int
	commits int64
	crashed bool
}

func crashRun[In, Out any](t testing.TB, opts Options, wf *actor.WorkflowDef[In, Out], in In, setup func(*Env), at int64) crashResult {
	t.Helper()
	e := newEnv(t, opts, at)
	defer e.stop()
	e.start()
	if setup != nil {
		setup(e)
	}
	pid := Spawn(e, wf, in, actor.WithID(crashID))
	var r crashResult
	if at > 0 {
		e.waitFor(fmt.Sprintf("the crash after commit %d", at), func() (bool, string) {
			if e.crashed.Load() {
				return true, ""
			}
			inst, err := e.System().Instance(e.ctx, pid)
			if err != nil {
				t.Fatalf("norntest: instance %s: %v", pid, err)
			}
			return inst.Status.Terminal(), "it is " + string(inst.Status)
		})
		if r.crashed = e.crashed.Load(); r.crashed {
			e.Restart()
		}
	}
	inst := e.AwaitEnd(pid)
	r.status, r.output, r.err = inst.Status, string(inst.Output), inst.Error
	for _, ev := range e.History(pid) {
		r.history = append(r.history, recorded(ev))
	}
	slices.Sort(r.history)
	r.runs = e.executions()
	r.commits = e.commits.Load()
	return r
}

// recorded is the part of an event a rerun must reproduce: not its
// timestamp, and of a retried attempt not its times (a retry policy's
// jitter is drawn afresh).
func recorded(ev actor.HistoryEvent) string {
	payload := string(ev.Payload)
	if ev.Kind == actor.EventActivityRetry {
		var r struct {
			Attempt int    `json:"attempt"`
			Error   string `json:"error"`
		}
		if json.Unmarshal(ev.Payload, &r) == nil {
			payload = fmt.Sprintf("attempt %d: %s", r.Attempt, r.Error)
		}
	}
	return fmt.Sprintf("%s name=%q ref=%q digest=%q payload=%s error=%q", ev.Kind, ev.Name, ev.Ref, ev.Digest, payload, ev.ErrorRecord)
}

// diff describes how got differs from the uninterrupted run r ("" if not).
func (r crashResult) diff(got crashResult) string {
	if got.status != r.status || got.output != r.output || got.err != r.err {
		return fmt.Sprintf("outcome differs:\n  uninterrupted: %s %s %s\n  with crash:    %s %s %s",
			r.status, r.output, r.err, got.status, got.output, got.err)
	}
	if !slices.Equal(r.history, got.history) {
		return "recorded values differ:\n" + setDiff(r.history, got.history)
	}
	var b strings.Builder
	keys := sortedKeys(r.runs)
	for _, k := range sortedKeys(got.runs) {
		if _, ok := r.runs[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		want, have := r.runs[k], got.runs[k]
		twice := 0
		for n := range have {
			if _, ok := want[n]; !ok {
				fmt.Fprintf(&b, "  activity %s of %s: attempt %d ran, but not in the uninterrupted run\n", k.id, k.instance, n)
			}
		}
		for n, c := range want {
			switch h := have[n]; {
			case h < c:
				fmt.Fprintf(&b, "  activity %s of %s: attempt %d ran %d times, %d in the uninterrupted run\n", k.id, k.instance, n, h, c)
			case h > c:
				twice += h - c
			}
		}
		if twice > 1 {
			fmt.Fprintf(&b, "  activity %s of %s: %d more executions than in the uninterrupted run (one crash cuts one short)\n", k.id, k.instance, twice)
		}
	}
	if b.Len() > 0 {
		return "activity executions differ:\n" + b.String()
	}
	return ""
}

// setDiff lists what is only in a and only in b.
func setDiff(a, b []string) string {
	var out strings.Builder
	count := map[string]int{}
	for _, s := range a {
		count[s]++
	}
	for _, s := range b {
		count[s]--
	}
	for _, s := range a {
		if count[s] > 0 {
			fmt.Fprintf(&out, "  only uninterrupted: %s\n", s)
			count[s]--
		}
	}
	for _, s := range b {
		if count[s] < 0 {
			fmt.Fprintf(&out, "  only with crash:    %s\n", s)
			count[s]++
		}
	}
	return out.String()
}
