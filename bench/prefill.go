package main

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// The prefill: -prefill-ended N puts N ended chain instances (five history
// events each) into the store before a workload runs, to show whether the
// workload's cost grows with the store. Seeding a million instances through
// the runtime takes minutes, so the store is seeded once and copied for
// each run: a SQLite file in -prefill-cache, or a PostgreSQL template
// database beside the -store database.
//
// The rows are the runtime's own: one chain workflow runs to its end on the
// seed store, and its instance row and history rows are copied N times with
// only the instance ID (built as the runtime builds IDs), its bucket and the
// times changed. A template column holding the instance ID anywhere else
// stops the seeding, so a schema change cannot make the copies drift from
// what the runtime writes unnoticed.

// prefillRows is how many clones go into one COPY (PostgreSQL) or how many
// instances are inserted between progress reports (SQLite).
const prefillRows = 50000

// prefillSpan is the time the seeded instances' creation spreads over,
// ending an hour before the seeding, oldest first. It is well inside the
// runtime's default retention (30 days), so that a node's retention loop
// purges none of them until the seed is ten days old.
const prefillSpan = 20 * 24 * time.Hour

// prefillTarget returns the target a run uses when -prefill-ended is set: a
// temp SQLite target whose file starts as a copy of the cached seed, or a
// new PostgreSQL database made from the seed's template. done drops that
// database again.
func prefillTarget(ctx context.Context, t target, o options, progress io.Writer) (out target, done func(), err error) {
	if o.PrefillEnded <= 0 {
		return t, func() {}, nil
	}
	logf := func(format string, args ...any) { fmt.Fprintf(progress, "  [%s] %s\n", t.label, fmt.Sprintf(format, args...)) }
	switch {
	case t.postgres():
		tmpl, err := pgSeed(ctx, t.url, o.PrefillEnded, logf)
		if err != nil {
			return t, nil, fmt.Errorf("prefill: %w", err)
		}
		name := "norn_bench_run_" + runID()
		if err := pgExec(ctx, t.url, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tmpl)); err != nil {
			return t, nil, fmt.Errorf("prefill: copy the template: %w", err)
		}
		out = t
		out.url = withDatabase(t.url, name)
		logf("run database %s, a copy of %s", name, tmpl)
		return out, func() {
			if err := pgExec(context.Background(), t.url, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
				logf("drop %s: %v", name, err)
			}
		}, nil
	case t.temp():
		seed, err := sqliteSeed(ctx, o.PrefillCache, o.PrefillEnded, logf)
		if err != nil {
			return t, nil, fmt.Errorf("prefill: %w", err)
		}
		out = t
		out.seed = seed
		return out, func() {}, nil
	default:
		return t, nil, errors.New("-prefill-ended works with -store sqlite (a temp copy per run) or postgres://, not an explicit SQLite file")
	}
}

// sqliteSeed returns the cached seed file of n ended instances, seeding it
// first if it is not there yet.
func sqliteSeed(ctx context.Context, dir string, n int, logf func(string, ...any)) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("ended-%d.db", n))
	if _, err := os.Stat(path); err == nil {
		// Migrate a seed made before a schema change once, here, not in every run's copy.
		st, err := storeurl.Open(ctx, "sqlite://"+path)
		if err != nil {
			return "", err
		}
		return path, errors.Join(st.Close(), sqliteCheckpoint(ctx, path))
	}
	building := path + ".building"
	for _, s := range []string{"", "-wal", "-shm"} {
		_ = os.Remove(building + s)
	}
	logf("seeding %d ended instances into %s (once; later runs copy it)", n, path)
	start := time.Now()
	tmplID, err := seedTemplate(ctx, "sqlite://"+building)
	if err != nil {
		return "", err
	}
	db, err := sql.Open("sqlite", "file:"+building+"?"+sqliteParams())
	if err != nil {
		return "", err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := sqliteClone(ctx, db, tmplID, n, logf); err != nil {
		return "", err
	}
	if _, err := db.ExecContext(ctx, "ANALYZE"); err != nil {
		return "", err
	}
	if err := db.Close(); err != nil {
		return "", err
	}
	if err := sqliteCheckpoint(ctx, building); err != nil {
		return "", err
	}
	if err := os.Rename(building, path); err != nil {
		return "", err
	}
	logf("seeded %d ended instances in %s", n, time.Since(start).Round(time.Second))
	return path, nil
}

func sqliteParams() string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_txlock", "immediate")
	return q.Encode()
}

// sqliteCheckpoint folds the WAL into the database file, so that the file
// alone is the whole store and can be copied.
func sqliteCheckpoint(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", "file:"+path+"?"+sqliteParams())
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	return errors.Join(err, db.Close())
}

// seedTemplate runs one chain workflow to its end on the store at u and
// returns its instance ID: the rows to copy.
func seedTemplate(ctx context.Context, u string) (string, error) {
	st, err := storeurl.Open(ctx, u)
	if err != nil {
		return "", err
	}
	wf := chainWorkflow()
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(wf), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return "", errors.Join(err, st.Close())
	}
	pid, err := actor.Spawn(ctx, sys, wf, 0)
	if err == nil {
		_, err = actor.Await(ctx, sys, wf, pid)
	}
	err = errors.Join(err, sys.Stop(ctx), st.Close())
	return string(pid), err
}

// templateRows is the template instance's rows: column names and values.
type templateRows struct {
	instCols, histCols []string
	inst               []any
	hist               [][]any
}

// clone is the template's rows for instance i of n: a new ID (workflow
// name, creation time in milliseconds, randomness, as the runtime builds
// IDs), its bucket, and every time moved by the same amount.
func (tr templateRows) clone(i, n int, end int64, rng *rand.Rand) (inst []any, hist [][]any) {
	created := end - int64(prefillSpan) + int64(prefillSpan)/int64(n)*int64(i)
	var b [6]byte
	for j := range b {
		b[j] = byte(rng.UintN(256))
	}
	id := fmt.Sprintf("chain-%011x%s", created/int64(time.Millisecond), hex.EncodeToString(b[:]))
	var shift int64
	inst = make([]any, len(tr.inst))
	for j, c := range tr.instCols {
		if c == "created_at" {
			shift = created - asInt(tr.inst[j])
		}
	}
	for j, c := range tr.instCols {
		v := tr.inst[j]
		switch c {
		case "id":
			v = id
		case "bucket":
			v = sameInt(v, int64(persistence.BucketOf(id)))
		case "created_at", "updated_at":
			v = sameInt(v, asInt(v)+shift)
		}
		inst[j] = v
	}
	hist = make([][]any, len(tr.hist))
	for k, row := range tr.hist {
		h := make([]any, len(row))
		for j, c := range tr.histCols {
			v := row[j]
			switch c {
			case "instance_id":
				v = id
			case "at":
				v = sameInt(v, asInt(v)+shift)
			}
			h[j] = v
		}
		hist[k] = h
	}
	return inst, hist
}

// check fails if the template's instance ID appears in a column that clone
// does not rewrite, or if a column clone rewrites is missing.
func (tr templateRows) check(id string) error {
	holds := func(v any) bool {
		switch v := v.(type) {
		case string:
			return strings.Contains(v, id)
		case []byte:
			return strings.Contains(string(v), id)
		}
		return false
	}
	need := map[string]bool{"id": false, "bucket": false, "created_at": false, "updated_at": false}
	for j, c := range tr.instCols {
		if _, ok := need[c]; ok {
			need[c] = true
		} else if holds(tr.inst[j]) {
			return fmt.Errorf("instances.%s holds the instance ID: the prefill does not know how to copy it", c)
		}
	}
	for c, ok := range need {
		if !ok {
			return fmt.Errorf("instances has no column %s", c)
		}
	}
	for _, row := range tr.hist {
		for j, c := range tr.histCols {
			if c != "instance_id" && holds(row[j]) {
				return fmt.Errorf("history.%s holds the instance ID: the prefill does not know how to copy it", c)
			}
		}
	}
	if len(tr.hist) == 0 {
		return errors.New("the template instance has no history")
	}
	return nil
}

func asInt(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case int32:
		return int64(v)
	case int:
		return int64(v)
	}
	return 0
}

// sameInt is x in the integer type of v, so that a copied row has the
// template's column types.
func sameInt(v any, x int64) any {
	if _, ok := v.(int32); ok {
		return int32(x)
	}
	return x
}

// queryRows reads every row of a query as column names and values.
type rowSource interface {
	Columns() ([]string, error)
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

func readSQLRows(rows rowSource) ([]string, [][]any, error) {
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, nil, err
	}
	var out [][]any
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, nil, err
		}
		out = append(out, vals)
	}
	return cols, out, rows.Err()
}

// sqliteClone replaces the template instance with n copies, in one
// transaction of prepared inserts, oldest first.
func sqliteClone(ctx context.Context, db *sql.DB, tmplID string, n int, logf func(string, ...any)) error {
	var tr templateRows
	rows, err := db.QueryContext(ctx, "SELECT * FROM instances WHERE id = ?", tmplID)
	if err != nil {
		return err
	}
	cols, inst, err := readSQLRows(rows)
	if err != nil || len(inst) != 1 {
		return fmt.Errorf("read the template instance: %d rows, %w", len(inst), err)
	}
	tr.instCols, tr.inst = cols, inst[0]
	if rows, err = db.QueryContext(ctx, "SELECT * FROM history WHERE instance_id = ? ORDER BY seq", tmplID); err != nil {
		return err
	}
	if tr.histCols, tr.hist, err = readSQLRows(rows); err != nil {
		return err
	}
	if err := tr.check(tmplID); err != nil {
		return err
	}
	if err := sqliteLeftovers(ctx, db); err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	for _, q := range []string{"DELETE FROM history WHERE instance_id = ?", "DELETE FROM instances WHERE id = ?"} {
		if _, err := tx.ExecContext(ctx, q, tmplID); err != nil {
			return err
		}
	}
	insert := func(table string, cols []string) (*sql.Stmt, error) {
		return tx.PrepareContext(ctx, fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", table, strings.Join(cols, ", "),
			strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ")))
	}
	insInst, err := insert("instances", tr.instCols)
	if err != nil {
		return err
	}
	defer insInst.Close()
	insHist, err := insert("history", tr.histCols)
	if err != nil {
		return err
	}
	defer insHist.Close()
	end := time.Now().Add(-time.Hour).UnixNano()
	rng := rand.New(rand.NewPCG(uint64(n), 29))
	for i := range n {
		inst, hist := tr.clone(i, n, end, rng)
		if _, err := insInst.ExecContext(ctx, inst...); err != nil {
			return fmt.Errorf("insert instance %d: %w", i, err)
		}
		for _, h := range hist {
			if _, err := insHist.ExecContext(ctx, h...); err != nil {
				return fmt.Errorf("insert history of %d: %w", i, err)
			}
		}
		if (i+1)%(4*prefillRows) == 0 {
			logf("seeded %d of %d", i+1, n)
		}
	}
	return tx.Commit()
}

// sqliteLeftovers fails if the ended template left rows in the tables the
// prefill does not copy: then a copy would not be what the runtime leaves.
func sqliteLeftovers(ctx context.Context, db *sql.DB) error {
	for _, table := range []string{"messages", "subscriptions", "timers", "outbox"} {
		var c int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&c); err != nil {
			return err
		}
		if c != 0 {
			return fmt.Errorf("the ended template left %d rows in %s", c, table)
		}
	}
	return nil
}

// pgSeed returns the name of the template database holding n ended
// instances, seeding it first (beside base's database, on its server) if
// it is not there yet.
func pgSeed(ctx context.Context, base string, n int, logf func(string, ...any)) (string, error) {
	name := fmt.Sprintf("norn_bench_seed_ended_%d", n)
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", err
	}
	var exists bool
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	conn.Close(context.Background())
	if err != nil {
		return "", err
	}
	u := withDatabase(base, name)
	if exists {
		// Migrate a seed made before a schema change once, here.
		st, err := storeurl.Open(ctx, u)
		if err != nil {
			return "", err
		}
		return name, st.Close()
	}
	building := name + "_building"
	if err := pgExec(ctx, base, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building)); err != nil {
		return "", err
	}
	if err := pgExec(ctx, base, "CREATE DATABASE "+building); err != nil {
		return "", err
	}
	logf("seeding %d ended instances into database %s (once; later runs copy it)", n, name)
	start := time.Now()
	bu := withDatabase(base, building)
	tmplID, err := seedTemplate(ctx, bu)
	if err != nil {
		return "", err
	}
	if err := pgClone(ctx, bu, tmplID, n, logf); err != nil {
		return "", err
	}
	if err := pgExec(ctx, base, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name)); err != nil {
		return "", err
	}
	logf("seeded %d ended instances in %s", n, time.Since(start).Round(time.Second))
	return name, nil
}

// pgClone replaces the template instance with n copies, written with COPY
// in one transaction, then vacuums and analyzes the tables as a store that
// has been running for a while would be.
func pgClone(ctx context.Context, u, tmplID string, n int, logf func(string, ...any)) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var tr templateRows
	read := func(q string) ([]string, [][]any, error) {
		rows, err := conn.Query(ctx, q, tmplID)
		if err != nil {
			return nil, nil, err
		}
		defer rows.Close()
		var cols []string
		for _, f := range rows.FieldDescriptions() {
			cols = append(cols, f.Name)
		}
		var out [][]any
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				return nil, nil, err
			}
			out = append(out, v)
		}
		return cols, out, rows.Err()
	}
	cols, inst, err := read("SELECT * FROM norn.instances WHERE id = $1")
	if err != nil || len(inst) != 1 {
		return fmt.Errorf("read the template instance: %d rows, %w", len(inst), err)
	}
	tr.instCols, tr.inst = cols, inst[0]
	if tr.histCols, tr.hist, err = read("SELECT * FROM norn.history WHERE instance_id = $1 ORDER BY seq"); err != nil {
		return err
	}
	if err := tr.check(tmplID); err != nil {
		return err
	}
	for _, table := range []string{"messages", "subscriptions", "timers", "outbox"} {
		var c int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM norn."+table).Scan(&c); err != nil {
			return err
		}
		if c != 0 {
			return fmt.Errorf("the ended template left %d rows in %s", c, table)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after Commit
	for _, q := range []string{"DELETE FROM norn.history WHERE instance_id = $1", "DELETE FROM norn.instances WHERE id = $1"} {
		if _, err := tx.Exec(ctx, q, tmplID); err != nil {
			return err
		}
	}
	end := time.Now().Add(-time.Hour).UnixNano()
	rng := rand.New(rand.NewPCG(uint64(n), 29))
	for lo := 0; lo < n; lo += prefillRows {
		hi := min(lo+prefillRows, n)
		insts := make([][]any, 0, hi-lo)
		hists := make([][]any, 0, (hi-lo)*len(tr.hist))
		for i := lo; i < hi; i++ {
			in, h := tr.clone(i, n, end, rng)
			insts = append(insts, in)
			hists = append(hists, h...)
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"norn", "instances"}, tr.instCols, pgx.CopyFromRows(insts)); err != nil {
			return fmt.Errorf("copy instances: %w", err)
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"norn", "history"}, tr.histCols, pgx.CopyFromRows(hists)); err != nil {
			return fmt.Errorf("copy history: %w", err)
		}
		if hi%(4*prefillRows) == 0 {
			logf("seeded %d of %d", hi, n)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	for _, q := range []string{"VACUUM (ANALYZE) norn.instances", "VACUUM (ANALYZE) norn.history"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// pgExec runs one statement on a connection of its own to u.
func pgExec(ctx context.Context, u, q string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, q)
	return errors.Join(err, conn.Close(context.Background()))
}

// withDatabase is the PostgreSQL URL u with its database replaced by name.
func withDatabase(u, name string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.Path = "/" + name
	return p.String()
}

// copyFile copies src to dst (a new file).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		return errors.Join(err, out.Close())
	}
	return out.Close()
}
