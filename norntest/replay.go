package norntest

import (
	"context"
	"os"
	"testing"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntest/historyfile"
)

// Replay replays the history file at path (written by `norn history
// --export ID`, or by WriteHistory) against today's code of wf, without
// side effects, and fails the test if the code no longer asks for what the
// history recorded: the regression test for changing a workflow while
// instances of it are running. opts are those the node uses (the codec,
// the registered errors).
func Replay(t testing.TB, wf actor.Definition, path string, opts ...actor.ReplayOption) {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatalf("norntest: replay: %v", err)
	}
	defer fh.Close()
	f, err := historyfile.Read(fh)
	if err != nil {
		t.Fatalf("norntest: replay %s: %v", path, err)
	}
	if f.Workflow != wf.Name() {
		t.Fatalf("norntest: replay %s: the history is of workflow %q, not %q", path, f.Workflow, wf.Name())
	}
	if err := actor.Replay(context.Background(), wf, f.History(), opts...); err != nil {
		t.Fatalf("norntest: replay %s (instance %s, %d events) against today's %s: %v", path, f.Instance, len(f.Events), wf.Name(), err)
	}
}

// WriteHistory writes instance pid's history to a history file at path
// (as `norn history --export` does), to keep under testdata/ for Replay.
func (e *Env) WriteHistory(pid actor.PID, path string) {
	e.t.Helper()
	inst, err := e.System().Instance(e.ctx, pid)
	if err != nil {
		e.t.Fatalf("norntest: %v", err)
	}
	fh, err := os.Create(path)
	if err != nil {
		e.t.Fatalf("norntest: %v", err)
	}
	if err := historyfile.Write(fh, historyfile.New(string(pid), inst.Workflow, e.History(pid))); err != nil {
		fh.Close()
		e.t.Fatalf("norntest: write %s: %v", path, err)
	}
	if err := fh.Close(); err != nil {
		e.t.Fatalf("norntest: write %s: %v", path, err)
	}
}
