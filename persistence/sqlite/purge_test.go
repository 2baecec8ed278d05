package sqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// A purge that finds nothing writes nothing: a node's retention loop asks
// every few minutes, and an idle node must not commit for it. One that
// finds something deletes in one commit.
func TestPurgeWithNothingToPurgeDoesNotCommit(t *testing.T) {
	t.Parallel()
	var log sqlite.CommitLog
	st := openDelayed(t, 0, &log)
	ctx := context.Background()
	if _, err := st.Apply(ctx, persistence.Step{Create: &persistence.Instance{ID: "a", Workflow: "wf", Status: persistence.StatusCompleted},
		History: []persistence.Event{{Seq: 0, Kind: "completed"}}}); err != nil {
		t.Fatal(err)
	}
	in, err := st.Instance(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	commits := len(log.Sizes())
	if n, err := st.PurgeInstances(ctx, persistence.PurgeFilter{Before: in.UpdatedAt}); err != nil || n != 0 {
		t.Fatalf("purge before a's end = %d, %v", n, err)
	}
	if got := len(log.Sizes()); got != commits {
		t.Fatalf("a purge that found nothing committed %d times", got-commits)
	}
	if n, err := st.PurgeInstances(ctx, persistence.PurgeFilter{Before: in.UpdatedAt.Add(time.Nanosecond)}); err != nil || n != 1 {
		t.Fatalf("purge after a's end = %d, %v", n, err)
	}
	if got := len(log.Sizes()); got != commits+1 {
		t.Fatalf("a purge of one batch committed %d times, want 1", got-commits)
	}
}
