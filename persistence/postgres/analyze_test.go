package postgres_test

import (
	"testing"
	"time"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence/postgres"
)

// A table that grows far past the statistics the server last took of it
// (here: analysed empty, then 5,000 subscriptions) is analysed again by
// the store, without waiting for autovacuum (off for it here), so that
// the statements planned from the old statistics are planned again.
func TestStatsFollowGrowth(t *testing.T) {
	st := openURL(t, testutil.PostgresURL(t), postgres.Options{})
	pool := st.Pool()
	for _, sql := range []string{
		`ALTER TABLE subscriptions SET (autovacuum_enabled = false)`,
		`ANALYZE subscriptions`,
		`INSERT INTO subscriptions (instance_id, channel, mode) SELECT 'i-' || g, 'news', 'broadcast' FROM generate_series(1, 5000) g`,
	} {
		if _, err := pool.Exec(bg, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The server's row counts reach its statistics views within seconds.
	testutil.Eventually(t, time.Minute, "subscriptions analysed again", func() bool {
		var seen float64
		if err := pool.QueryRow(bg, `SELECT reltuples FROM pg_class WHERE oid = 'subscriptions'::regclass`).Scan(&seen); err != nil {
			t.Fatal(err)
		}
		return seen >= 4000
	})
}
