package postgres_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
)

// A publish on a competing channel reads as few of its subscribers as it
// names (persistence.MaxQueuedSubscribers), however many consumers there
// are: no plan node, generic or custom, returns or drops more than that
// many rows, nor scans the table.
func TestPublishReadsBoundedSubscribers(t *testing.T) {
	conn := schemaConn(t)
	for _, sql := range []string{
		// The other channel's rows first: a scan of the table meets them.
		`INSERT INTO subscriptions (instance_id, channel, mode) SELECT 'b-' || g, 'news', 'broadcast' FROM generate_series(1, 2000) g`,
		`INSERT INTO subscriptions (instance_id, channel, mode) SELECT 'c-' || g, 'work', 'competing' FROM generate_series(1, 2000) g`,
		`ANALYZE subscriptions`,
		`PREPARE publish AS ` + postgres.PublishSQL.One,
		`PREPARE runsubs AS ` + postgres.PublishSQL.RunSubs,
	} {
		if _, err := conn.Exec(bg, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	explainEachPlan(t, conn, []planCase{
		{"publish", `EXECUTE publish('m-1', 'work', '', '\x31', NULL, 1, 'int', '')`},
		{"publish after a key", `EXECUTE publish('m-2', 'work', '', '\x31', NULL, 1, 'int', 'c-5')`},
		{"run's subscribers", `EXECUTE runsubs('work', 'c-1999')`},
	}, func(name, mode, plan string) {
		var doc []struct{ Plan planNode }
		if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) != 1 {
			t.Fatalf("%s, %s: plan %s: %v", name, mode, plan, err)
		}
		doc[0].Plan.walk(func(n *planNode) {
			if n.Loops == 0 {
				return // never ran (a broadcast's scan, on this channel)
			}
			if n.Rows > 64 || n.Removed > 64 || n.Type == "Seq Scan" {
				t.Errorf("%s, %s: %s on %s returned %d rows and dropped %d:\n%s", name, mode, n.Type, n.Relation, n.Rows, n.Removed, plan)
			}
		})
	})
}

// planNode is a node of EXPLAIN (ANALYZE, FORMAT JSON).
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Rows     int        `json:"Actual Rows"`
	Loops    int        `json:"Actual Loops"`
	Removed  int        `json:"Rows Removed by Filter"`
	Plans    []planNode `json:"Plans"`
}

func (n *planNode) walk(f func(*planNode)) {
	f(n)
	for i := range n.Plans {
		n.Plans[i].walk(f)
	}
}

// A step's statements are planned once per connection, not at every call:
// left to choose, the server re-plans a publish at each call once a
// channel holds most subscriptions, and the planning cost more than the
// publish. Every pool connection reports its prepared statements' plans.
func TestStepsUseGenericPlans(t *testing.T) {
	st := openURL(t, testutil.PostgresURL(t), postgres.Options{Writers: 1})
	create(t, st, "p")
	for i := range 12 {
		if _, err := st.Apply(bg, persistence.Step{Instance: "p", Epoch: 1,
			History: []persistence.Event{{Seq: int64(i + 1), Kind: "sent"}},
			Send:    []persistence.NewMessage{{ID: fmt.Sprint("m", i), Channel: "c", Payload: []byte("1")}}}); err != nil {
			t.Fatal(err)
		}
	}
	// The writer may still hold its connection for a moment after the
	// last step returns: look until the connection that ran them is idle.
	var custom, generic int64
	testutil.Eventually(t, 10*time.Second, "the connection that published is idle", func() bool {
		custom, generic = preparedPlans(t, st, `name = 'norn_publish'`)
		return generic >= 12 || custom > 0
	})
	if custom != 0 || generic < 12 {
		t.Fatalf("publishes planned %d times for their values and %d times generically; want 0 and at least 12", custom, generic)
	}
}

// A listing without a workflow merges one range per workflow and status,
// and planning those for each call's values cost more than reading the
// page: it runs its generic plan from the first call.
func TestListingsUseGenericPlans(t *testing.T) {
	st := openURL(t, testutil.PostgresURL(t), postgres.Options{})
	create(t, st, "a")
	if _, err := st.Apply(bg, persistence.Step{Create: &persistence.Instance{ID: "b", Workflow: "other"},
		History: []persistence.Event{{Seq: 0, Kind: "started"}}}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []persistence.InstanceQuery{{}, {}, {Statuses: []persistence.Status{persistence.StatusRunning}}} {
		page, err := st.ListInstances(bg, q)
		if err != nil || len(page) != 2 {
			t.Fatalf("ListInstances(%+v) = %d instances, %v; want both", q, len(page), err)
		}
	}
	custom, generic := preparedPlans(t, st, `statement LIKE '%ORDER BY created_at DESC, id DESC LIMIT%'`)
	if custom != 0 || generic < 3 {
		t.Fatalf("listings planned %d times for their values and %d times generically; want 0 and 3", custom, generic)
	}
}

// preparedPlans sums, over the pool's idle connections, how often each
// planned the prepared statements where selects (a condition on
// pg_prepared_statements) for the values at hand and how often it used
// their generic plans.
func preparedPlans(t *testing.T, st *postgres.Store, where string) (custom, generic int64) {
	t.Helper()
	conns := st.Pool().AcquireAllIdle(bg)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for _, c := range conns {
		var cu, ge int64
		if err := c.QueryRow(bg, `SELECT COALESCE(SUM(custom_plans), 0)::bigint, COALESCE(SUM(generic_plans), 0)::bigint
			FROM pg_prepared_statements WHERE `+where).Scan(&cu, &ge); err != nil {
			t.Fatal(err)
		}
		custom, generic = custom+cu, generic+ge
	}
	return custom, generic
}
