package postgres_test

import (
	"encoding/json"
	"testing"

	"github.com/nornlabs/norn/persistence/postgres"
)

// Renewing or releasing an owner's leases reads each of its instances
// once, whatever the statistics say. Statistics taken while no instance
// was leased (a store whose instances had all ended, then a node that
// spawned thousands) estimate that an owner holds one lease; a plan that
// joined the locked rows back to the table by that estimate re-ran the
// lock for every leased instance, and renewing 5,800 leases took 11 s
// while every step of those instances waited for it. Nor does it read the
// ended instances.
func TestLeasesReadOncePerInstance(t *testing.T) {
	conn := schemaConn(t)
	for _, sql := range []string{
		`INSERT INTO instances (id, workflow, status, created_at, updated_at, bucket)
			SELECT 'i-' || lpad(g::text, 5, '0'), 'wf', 'completed', g, g, 0 FROM generate_series(1, 3000) g`,
		`ANALYZE instances`,
		`INSERT INTO instances (id, workflow, status, lease_owner, lease_epoch, lease_expires, created_at, updated_at, bucket)
			SELECT 'l-' || lpad(g::text, 5, '0'), 'wf', 'waiting', 'node-a', 1, 1, g, g, 0 FROM generate_series(1, 2000) g`,
		`PREPARE renew AS ` + postgres.LeaseSQL.Renew,
		`PREPARE release AS ` + postgres.LeaseSQL.Release,
	} {
		if _, err := conn.Exec(bg, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	explainEachPlan(t, conn, []planCase{
		{"renew", `EXECUTE renew('node-a', 1000000000)`},
		{"release", `EXECUTE release('node-a')`},
	}, func(name, mode, plan string) {
		var doc []struct{ Plan planNode }
		if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) != 1 {
			t.Fatalf("%s, %s: plan %s: %v", name, mode, plan, err)
		}
		if doc[0].Plan.Rows != 2000 && name == "renew" {
			t.Errorf("%s, %s: renewed %d leases, want 2000", name, mode, doc[0].Plan.Rows)
		}
		doc[0].Plan.walk(func(n *planNode) {
			// No index holds the lease owner: the leases are read from
			// the index of unsettled instances, which the 3,000 ended
			// instances are not in.
			if n.Type == "Seq Scan" && n.Relation == "instances" {
				t.Errorf("%s, %s: reads every instance:\n%s", name, mode, plan)
			}
			if n.Loops > 1 {
				t.Errorf("%s, %s: %s on %s ran %d times:\n%s", name, mode, n.Type, n.Relation, n.Loops, plan)
			}
		})
	})
}
