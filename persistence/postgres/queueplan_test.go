package postgres_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/nornlabs/norn/persistence/postgres"
)

// A claim and a mailbox read reach the queue's first messages without
// walking past the rows at the head of the table that are no longer
// queued: claimed but not yet consumed (a consumer records its take with
// its next step) or consumed but not yet vacuumed. Statistics taken while
// every row was queued make reading the table in seq order through the
// primary key look free; whatever plan the statistics choose, generic or
// custom, no plan node may drop those rows one by one, nor scan the table.
func TestQueueReadsSkipRowsNoLongerQueued(t *testing.T) {
	conn := schemaConn(t)
	for _, sql := range []string{
		`INSERT INTO instances (id, workflow, status, input, parent, created_at, updated_at, bucket, lease_owner, lease_expires)
			SELECT 'c-' || g, 'consumer', 'waiting', '\x7b7d', '', 1, 1, 0, 'node', 9000000000000000000 FROM generate_series(1, 8) g`,
		`INSERT INTO subscriptions (instance_id, channel, mode) SELECT 'c-' || g, 'work', 'competing' FROM generate_series(1, 8) g`,
		`INSERT INTO messages (msg_id, channel, sender, payload, published_at)
			SELECT 'm-' || g, 'work', '', '\x31', g FROM generate_series(1, 6000) g`,
		`ANALYZE messages`,
		// The first 4,000 are claimed, after the statistics were taken.
		`UPDATE messages SET target = 'c-' || (seq % 8 + 1), claimed = true WHERE seq <= 4000`,
	} {
		if _, err := conn.Exec(bg, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if _, err := conn.Exec(bg, `PREPARE claim AS `+postgres.QueueSQL.Claim); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(bg, `PREPARE mailbox AS `+postgres.QueueSQL.Mailbox); err != nil {
		t.Fatal(err)
	}
	explainEachPlan(t, conn, []planCase{
		{"claim", `EXECUTE claim('node', 'work', '{c-1,c-2,c-3,c-4,c-5,c-6,c-7,c-8}', '{}')`},
		{"mailbox read", `EXECUTE mailbox('c-1', 8)`},
	}, func(name, mode, plan string) {
		dropped := 0
		for _, part := range strings.Split(plan, `"Rows Removed by Filter": `)[1:] {
			var n int
			if _, err := fmt.Sscan(strings.TrimLeft(part, " "), &n); err == nil {
				dropped = max(dropped, n)
			}
		}
		if dropped > 64 || strings.Contains(plan, `"Seq Scan"`) {
			t.Errorf("%s, %s: a plan node dropped %d rows, or the table was scanned:\n%s", name, mode, dropped, plan)
		}
	})
}

// planCase is a statement whose plan a test checks: EXECUTE of one
// prepared on the connection.
type planCase struct{ name, exec string }

// explainEachPlan runs EXPLAIN ANALYZE (JSON) of each case under a generic
// and under a custom plan, each in a transaction it rolls back, and hands
// check the plan.
func explainEachPlan(t *testing.T, conn *pgx.Conn, cases []planCase, check func(name, mode, plan string)) {
	t.Helper()
	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		if _, err := conn.Exec(bg, `SET plan_cache_mode = `+mode); err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			if _, err := conn.Exec(bg, `BEGIN`); err != nil {
				t.Fatal(err)
			}
			var plan string
			err := conn.QueryRow(bg, `EXPLAIN (ANALYZE, FORMAT JSON) `+c.exec).Scan(&plan)
			if _, rerr := conn.Exec(bg, `ROLLBACK`); rerr != nil {
				t.Fatal(rerr)
			}
			if err != nil {
				t.Fatalf("%s, %s: %v", c.name, mode, err)
			}
			check(c.name, mode, plan)
		}
	}
}
