package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The runtime's tables swing from empty to tens of thousands of rows in
// seconds: a broadcast copies a message to every parked subscriber, a
// burst of spawns subscribes each new instance. A connection plans each
// statement once, from the server's statistics; statistics taken while a
// table was empty make reading it in key order, or through an index that
// does not match, look free. Such a plan then reads the whole grown table
// at every call until autovacuum analyses the table again, which may be a
// minute later: waking 20,000 parked instances ran at 1,300/s instead of
// 5,500/s because each mailbox read walked every broadcast copy. So the
// store looks every statsEvery at how many rows its tables hold and
// analyses at once a table that has grown past statsGrowth times what its
// statistics saw (and past statsMinRows): ANALYZE replaces the statistics
// and makes every connection plan its statements again.
const (
	statsEvery   = time.Second
	statsGrowth  = 4
	statsMinRows = 1000
	// statsAgain is how long a table just analysed is left alone: a role
	// that may not analyse the store's tables (ANALYZE then only warns)
	// would otherwise try every statsEvery until autovacuum catches up.
	statsAgain = 5 * time.Second
)

// sqlGrownTables lists the store's tables that grew past their statistics:
// n_live_tup is the server's running count, reltuples what the last
// ANALYZE or VACUUM saw (-1 if none did). A never-analysed table counts as
// empty: the planner takes it for ten pages, and the plans made then (a new
// store's first reads) stay until something analyses it.
const sqlGrownTables = `SELECT c.relname::text FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
	WHERE s.schemaname = current_schema() AND c.relname IN ('instances', 'history', 'messages', 'subscriptions', 'timers')
		AND s.n_live_tup > $1::bigint AND s.n_live_tup > $2::bigint * greatest(c.reltuples, 0)`

// statsKeeper analyses the tables that grew past their statistics until
// the store closes.
func (s *Store) statsKeeper() {
	defer s.writers.Done()
	t := time.NewTicker(statsEvery)
	defer t.Stop()
	analysed := map[string]time.Time{}
	for {
		select {
		case <-s.statsCtx.Done():
			return
		case <-t.C:
		}
		s.analyzeGrown(s.statsCtx, analysed)
	}
}

// analyzeGrown analyses each table that grew past its statistics, unless
// it did so within statsAgain (analysed holds when). Failures are left to
// the next look: autovacuum analyses the tables anyway, only later.
func (s *Store) analyzeGrown(ctx context.Context, analysed map[string]time.Time) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.WriteTimeout)
	defer cancel()
	rows, _ := s.pool.Query(ctx, sqlGrownTables, int64(statsMinRows), int64(statsGrowth))
	grown, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		// The listener and the writers report a server that is down.
		s.opts.Logger.Debug("norn/postgres: reading table sizes", "server", s.target, "err", err)
		return
	}
	for _, table := range grown {
		if time.Since(analysed[table]) < statsAgain {
			continue
		}
		analysed[table] = time.Now()
		if _, err := s.pool.Exec(ctx, "ANALYZE "+pgx.Identifier{table}.Sanitize()); err != nil {
			if ctx.Err() == nil {
				s.opts.Logger.Warn("norn/postgres: analysing a grown table", "server", s.target, "table", table, "err", err)
			}
			return
		}
		s.opts.Logger.Debug("norn/postgres: analysed a grown table", "server", s.target, "table", table)
	}
}
