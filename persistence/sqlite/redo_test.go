package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

type commitSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (c *commitSizes) ObserveCommit(ci persistence.CommitInfo) {
	c.mu.Lock()
	c.sizes = append(c.sizes, ci.Steps)
	c.mu.Unlock()
}

// A step without a savepoint of its own (a plain send is "simple") that
// fails after writing, in a commit it shares: the commit is redone with a
// savepoint around every step, so the failing step leaves nothing and its
// neighbours commit.
func TestSimpleStepFailingAfterWritingInSharedCommit(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "norn.db")
	commits := &commitSizes{}
	st, err := Open(ctx, path, Options{Commits: commits})
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
	bad := persistence.Step{Instance: "bad", Epoch: 1, History: []persistence.Event{{Seq: 1, Kind: "sent"}},
		Send: []persistence.NewMessage{{ID: "m", Channel: "direct"}}}
	if !simple(bad) {
		t.Fatal("a step with a plain send is not simple")
	}

	// Another connection holds the write lock, so that the three steps
	// queue up behind a blocked commit and share the next one.
	other, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	lock, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := st.Apply(ctx, persistence.Step{Instance: "z", Epoch: 1, History: []persistence.Event{{Seq: 1, Kind: "first"}}})
		first <- err
	}()
	type outcome struct {
		id  string
		err error
	}
	out := make(chan outcome, 3)
	for _, step := range []persistence.Step{
		{Instance: "good1", Epoch: 1, History: []persistence.Event{{Seq: 1, Kind: "ok"}}},
		bad,
		{Instance: "good2", Epoch: 1, History: []persistence.Event{{Seq: 1, Kind: "ok"}},
			Send: []persistence.NewMessage{{ID: "m2", Target: "z"}}},
	} {
		go func() {
			_, err := st.Apply(ctx, step)
			out <- outcome{step.Instance, err}
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for len(st.reqs) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the steps did not queue")
		}
		time.Sleep(time.Millisecond) // polling the queue, not timing anything
	}
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range 3 {
		o := <-out
		switch {
		case o.id == "bad" && !errors.Is(o.err, persistence.ErrChannelMode):
			t.Errorf("bad step: %v, want a channel mode conflict", o.err)
		case o.id != "bad" && o.err != nil:
			t.Errorf("%s: %v", o.id, o.err)
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
	commits.mu.Lock()
	defer commits.mu.Unlock()
	if last := commits.sizes[len(commits.sizes)-1]; last != 3 {
		t.Errorf("the three steps were committed in commits of %v, want one of 3", commits.sizes)
	}
}
