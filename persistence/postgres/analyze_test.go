package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence/postgres"
)

// A table that grows far past the statistics the server last took of it
// (analysed empty, or never analysed as in a new store, then 5,000
// subscriptions) is analysed by the store, without waiting for autovacuum
// (off for it here), so that the statements planned from the old
// statistics are planned again.
func TestStatsFollowGrowth(t *testing.T) {
	for _, analysed := range []bool{true, false} {
		t.Run(fmt.Sprintf("analysed=%v", analysed), func(t *testing.T) {
			st := openURL(t, testutil.PostgresURL(t), postgres.Options{})
			pool := st.Pool()
			sqls := []string{`ALTER TABLE subscriptions SET (autovacuum_enabled = false)`}
			if analysed {
				sqls = append(sqls, `ANALYZE subscriptions`)
			}
			sqls = append(sqls, `INSERT INTO subscriptions (instance_id, channel, mode)
				SELECT 'i-' || g, 'news', 'broadcast' FROM generate_series(1, 5000) g`)
			for _, sql := range sqls {
				if _, err := pool.Exec(bg, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			// The server's row counts reach its statistics views within seconds.
			testutil.Eventually(t, time.Minute, "subscriptions analysed", func() bool {
				var seen float64
				if err := pool.QueryRow(bg, `SELECT reltuples FROM pg_class WHERE oid = 'subscriptions'::regclass`).Scan(&seen); err != nil {
					t.Fatal(err)
				}
				return seen >= 4000
			})
		})
	}
}
