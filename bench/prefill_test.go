package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// TestPrefill seeds a few ended and parked instances, checks that the
// copies read back through the store as the runtime wrote their template,
// and runs workloads on copies of the seeds: list must page through the
// seeded instances too, and idle must wake every parked copy.
func TestPrefill(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cache := t.TempDir()
	opts := options{N: 20, M: 20, Spawners: 8, Timeout: 30 * time.Second, BaselineBatch: 50,
		PassivateAfter: 200 * time.Millisecond, PrefillEnded: 30, PrefillCache: cache}
	targets, err := parseTargets("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]workload{}
	for _, w := range workloads() {
		byName[w.name] = w
	}
	for _, name := range []string{"chain", "list"} {
		if res := runOne(ctx, byName[name], opts, targets[0], nil); res.Err != nil {
			t.Fatalf("%s on the prefilled store: %v (%s)", name, res.Err, res.Extra)
		}
	}

	// The seed: 30 completed chain instances, each with the template's
	// five events, a distinct ID and that ID's bucket.
	st, err := storeurl.Open(ctx, "sqlite://"+filepath.Join(cache, "ended-30.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	list, err := st.List(ctx, persistence.ListFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 30 {
		t.Fatalf("the seed holds %d instances, want 30", len(list))
	}
	seen := map[string]bool{}
	for _, in := range list {
		if in.Workflow != "chain" || in.Status != persistence.StatusCompleted || seen[in.ID] {
			t.Fatalf("seeded instance %+v: want a completed chain instance, once", in)
		}
		seen[in.ID] = true
		h, err := st.History(ctx, in.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		kinds := ""
		for _, e := range h {
			kinds += e.Kind + " "
		}
		if kinds != "started activity activity activity completed " {
			t.Fatalf("history of %s: %q", in.ID, kinds)
		}
	}

	// Each copy is in its own ID's bucket (the runtime's nodes read by bucket).
	db, err := sql.Open("sqlite", "file:"+filepath.Join(cache, "ended-30.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT id, bucket FROM instances")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var bucket int
		if err := rows.Scan(&id, &bucket); err != nil {
			t.Fatal(err)
		}
		if bucket != persistence.BucketOf(id) {
			t.Fatalf("%s is in bucket %d, want %d", id, bucket, persistence.BucketOf(id))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	parked := opts
	parked.PrefillEnded, parked.PrefillParked = 0, 25
	res := runOne(ctx, byName["idle"], parked, targets[0], nil)
	if res.Err != nil {
		t.Fatalf("idle on parked copies: %v (%s)", res.Err, res.Extra)
	}
	if res.Metrics["waiting"] != 25 {
		t.Fatalf("idle: %v of 25 parked copies waiting", res.Metrics["waiting"])
	}
}
