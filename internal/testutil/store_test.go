package testutil_test

import (
	"context"
	"testing"
	"time"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// The outbox of a wrapped store is reachable through the wrapper, and
// steps that emit go through the Apply hooks.
func TestInterceptStoreOutbox(t *testing.T) {
	ctx := context.Background()
	applied := 0
	st := &testutil.InterceptStore{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)),
		AfterApply: func(persistence.Step, persistence.StepResult, error) { applied++ }}
	if _, err := st.Apply(ctx, persistence.Step{Emit: []persistence.OutboxEvent{{ID: "e", Type: "t"}}}); err != nil || applied != 1 {
		t.Fatalf("apply = %v, %d hook calls", err, applied)
	}
	var ob persistence.Outbox = st
	recs, err := ob.ClaimOutbox(ctx, "r", time.Now(), time.Minute, 0)
	if err != nil || len(recs) != 1 || recs[0].ID != "e" {
		t.Fatalf("claim = %+v, %v", recs, err)
	}
	if err := ob.FinishOutbox(ctx, "e", "r", persistence.OutboxSent, time.Time{}, ""); err != nil {
		t.Fatal(err)
	}
	if recs, err := ob.ListOutbox(ctx, persistence.OutboxSent, "", 0); err != nil || len(recs) != 1 || recs[0].Attempts != 1 {
		t.Fatalf("sent = %+v, %v", recs, err)
	}
}
