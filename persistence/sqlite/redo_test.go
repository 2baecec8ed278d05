package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/nornlabs/norn/persistence"
)

// A step without a savepoint of its own (a plain send is "simple") that
// fails after writing, in a commit it shares: the commit is redone with a
// savepoint around every step, so the failing step leaves nothing and its
// neighbours commit.
func TestSimpleStepFailingAfterWritingInSharedCommit(t *testing.T) {
	ctx := context.Background()
	commits := &CommitLog{}
	st, err := Open(ctx, filepath.Join(t.TempDir(), "norn.db"), Options{Commits: commits})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range []string{"good1", "bad", "good2", "z"} {
		if _, err := st.Apply(ctx, persistence.Step{Create: &persistence.Instance{ID: id, Workflow: "wf", LeaseOwner: "n", LeaseEpoch: 1},
			History: []persistence.Event{{Seq: 0, Kind: "started"}}}); err != nil {
			t.Fatal(err)
		}
	}
	// z makes "direct" a direct channel: a send on it without a target
	// conflicts, after the step has appended its history.
	if _, err := st.Apply(ctx, persistence.Step{Instance: "z", Epoch: 1,
		Subscribe: []persistence.Subscription{{Channel: "direct", Mode: persistence.Direct}}}); err != nil {
		t.Fatal(err)
	}
	steps := []persistence.Step{
		{Instance: "good1", Epoch: 1, History: []persistence.Event{{Seq: 1, Kind: "ok"}}},
		{Instance: "bad", Epoch: 1, History: []persistence.Event{{Seq: 1, Kind: "sent"}},
			Send: []persistence.NewMessage{{ID: "m", Channel: "direct"}}},
		{Instance: "good2", Epoch: 1, History: []persistence.Event{{Seq: 1, Kind: "ok"}},
			Send: []persistence.NewMessage{{ID: "m2", Target: "z"}}},
	}
	// One batch of the three, as the writer would form it (each request
	// built as Apply builds it). The writer goroutine is idle meanwhile:
	// nothing is queued, and every earlier Apply has returned.
	batch := make([]*writeReq, len(steps))
	for i, step := range steps {
		if !simple(step) {
			t.Fatalf("step %d is not simple", i)
		}
		batch[i] = &writeReq{simple: true, done: make(chan struct{}), fn: func(tx *sql.Tx) error {
			var res persistence.StepResult
			return st.applyStep(tx, &step, &res)
		}}
	}
	st.commit(batch)
	for i, r := range batch {
		<-r.done
		switch {
		case i == 1 && !errors.Is(r.err, persistence.ErrChannelMode):
			t.Errorf("bad step: %v, want a channel mode conflict", r.err)
		case i != 1 && r.err != nil:
			t.Errorf("%s: %v", steps[i].Instance, r.err)
		}
	}
	for id, want := range map[string]int64{"good1": 2, "good2": 2, "bad": 1} {
		in, err := st.Instance(ctx, id)
		if err != nil || in.HistoryLen != want {
			t.Errorf("%s: history length %d (%v), want %d", id, in.HistoryLen, err, want)
		}
	}
	if ms, err := st.Mailbox(ctx, "z", 0); err != nil || len(ms) != 1 || ms[0].ID != "m2" {
		t.Errorf("z's mailbox = %+v, %v; want m2", ms, err)
	}
	if sizes := commits.Sizes(); sizes[len(sizes)-1] != 3 {
		t.Errorf("commit sizes %v, want the last of 3", sizes)
	}
}
