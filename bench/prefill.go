package main

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
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
// workload's cost grows with the store; -prefill-parked N puts N idle
// instances parked on the channel prefillChannel, for the idle workload.
// Seeding a million instances through the runtime takes minutes, so the
// store is seeded once and copied for each run: a SQLite file in
// -prefill-cache, or a PostgreSQL template database beside the -store
// database.
//
// The rows are the runtime's own: one instance runs on the seed store (a
// chain workflow to its end, or an idler until it has passivated), and its
// rows (instance, history, subscriptions) are copied N times with only the
// instance ID (built as the runtime builds IDs), its bucket, the times and
// the input changed. A template column holding the instance ID anywhere
// else stops the seeding, so a schema change cannot make the copies drift
// from what the runtime writes unnoticed.

// prefillRows is how many clones go into one COPY (PostgreSQL); progress
// is reported every four times as many.
const prefillRows = 50000

// prefillSpan is the time the seeded instances' creation spreads over,
// ending an hour before the seeding, oldest first. It is well inside the
// runtime's default retention (30 days), so that a node's retention loop
// purges none of them until the seed is ten days old.
const prefillSpan = 20 * 24 * time.Hour

// prefillChannel is the broadcast channel the parked prefill's idlers wait on.
const prefillChannel = "wake-prefill"

// prefillKind is what a prefill seeds.
type prefillKind struct {
	name     string
	n        int
	tables   [][2]string // table, ID column; the instances table first
	empty    []string    // tables the template must leave empty
	template func(ctx context.Context, u string) (string, error)
	newInput func(i int) ([]byte, error) // nil: every copy has the template's input
}

func prefillOf(o options) (prefillKind, bool) {
	switch {
	case o.PrefillEnded > 0:
		return prefillKind{name: "ended", n: o.PrefillEnded,
			tables: [][2]string{{"instances", "id"}, {"history", "instance_id"}},
			empty:  []string{"messages", "subscriptions", "timers", "outbox"}, template: endedTemplate}, true
	case o.PrefillParked > 0:
		return prefillKind{name: "parked", n: o.PrefillParked,
			tables: [][2]string{{"instances", "id"}, {"history", "instance_id"}, {"subscriptions", "instance_id"}},
			empty:  []string{"messages", "timers", "outbox"}, template: parkedTemplate,
			newInput: func(i int) ([]byte, error) { return json.Marshal(idleInput{Channel: prefillChannel, Index: i}) }}, true
	}
	return prefillKind{}, false
}

// prefillTarget returns the target a run uses with -prefill-ended or
// -prefill-parked: a temp SQLite target whose file starts as a copy of the
// cached seed, or a new PostgreSQL database made from the seed's template.
// done drops that database again.
func prefillTarget(ctx context.Context, t target, o options, progress io.Writer) (out target, done func(), err error) {
	k, ok := prefillOf(o)
	if !ok {
		return t, func() {}, nil
	}
	logf := func(format string, args ...any) {
		if progress != nil {
			fmt.Fprintf(progress, "  [%s] %s\n", t.label, fmt.Sprintf(format, args...))
		}
	}
	switch {
	case t.postgres():
		tmpl, err := pgSeed(ctx, t.url, k, logf)
		if err != nil {
			return t, nil, fmt.Errorf("prefill: %w", err)
		}
		name := "norn_bench_run_" + runID()
		// FILE_COPY checkpoints before and after the copy, so that the run
		// does not start with the copy's writes still to be flushed.
		// (PostgreSQL 15; older servers copy files that way anyway.)
		err = pgExec(ctx, t.url, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s STRATEGY FILE_COPY", name, tmpl))
		if err != nil && strings.Contains(err.Error(), "STRATEGY") {
			err = pgExec(ctx, t.url, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tmpl))
		}
		if err != nil {
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
		seed, err := sqliteSeed(ctx, o.PrefillCache, k, logf)
		if err != nil {
			return t, nil, fmt.Errorf("prefill: %w", err)
		}
		out = t
		out.seed = seed
		return out, func() {}, nil
	default:
		return t, nil, errors.New("-prefill-ended and -prefill-parked work with -store sqlite (a temp copy per run) or postgres://, not an explicit SQLite file")
	}
}

// sqliteSeed returns the cached seed file of k, seeding it first if it is
// not there yet.
func sqliteSeed(ctx context.Context, dir string, k prefillKind, logf func(string, ...any)) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.db", k.name, k.n))
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
	logf("seeding %d %s instances into %s (once; later runs copy it)", k.n, k.name, path)
	start := time.Now()
	tmplID, err := k.template(ctx, "sqlite://"+building)
	if err != nil {
		return "", fmt.Errorf("template instance: %w", err)
	}
	db, err := sql.Open("sqlite", "file:"+building+"?"+sqliteParams())
	if err != nil {
		return "", err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := sqliteClone(ctx, db, tmplID, k, logf); err != nil {
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
	logf("seeded %d %s instances in %s", k.n, k.name, time.Since(start).Round(time.Second))
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

// endedTemplate runs one chain workflow to its end on the store at u and
// returns its instance ID: the rows to copy.
func endedTemplate(ctx context.Context, u string) (string, error) {
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

// parkedTemplate runs one idler (the idle workload's workflow) on the
// store at u until it has subscribed to prefillChannel and passivated, and
// returns its instance ID.
func parkedTemplate(ctx context.Context, u string) (string, error) {
	st, err := storeurl.Open(ctx, u)
	if err != nil {
		return "", err
	}
	side := &idleSide{subscribed: newDoneCounter(1), woken: newDoneCounter(1), at: make(stamps, 1)}
	wf := idleWorkflow(side)
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(wf), PassivateAfter: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return "", errors.Join(err, st.Close())
	}
	pid, err := actor.Spawn(ctx, sys, wf, idleInput{Channel: prefillChannel, Index: 0})
	for err == nil {
		var in persistence.Instance
		if in, err = st.Instance(ctx, string(pid)); err == nil && in.Status == persistence.StatusWaiting && in.LeaseOwner == "" {
			break
		}
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	err = errors.Join(err, sys.Stop(ctx), st.Close())
	return string(pid), err
}

// tmplTable is one table's rows of the template instance; idCol names
// the column that holds the instance's ID.
type tmplTable struct {
	name, idCol string
	cols        []string
	rows        [][]any
}

// templateRows is the template instance's rows in every table it has rows
// in, the instances table first.
type templateRows struct {
	tables   []tmplTable
	workflow string
	input    []byte             // the template's input, as stored
	newInput func(i int) []byte // the input of copy i; nil: the template's
}

// clone is the template's rows for instance i of n, table by table: a new
// ID (workflow name, creation time in milliseconds, randomness, as the
// runtime builds IDs), its bucket, every time moved by the same amount,
// and, with newInput, the input (and every payload equal to it) replaced.
func (tr templateRows) clone(i, n int, end int64, rng *rand.Rand) [][][]any {
	created := end - int64(prefillSpan) + int64(prefillSpan)/int64(n)*int64(i)
	var b [6]byte
	for j := range b {
		b[j] = byte(rng.UintN(256))
	}
	id := fmt.Sprintf("%s-%011x%s", tr.workflow, created/int64(time.Millisecond), hex.EncodeToString(b[:]))
	inst := tr.tables[0]
	var shift int64
	for j, c := range inst.cols {
		if c == "created_at" {
			shift = created - asInt(inst.rows[0][j])
		}
	}
	var input []byte
	if tr.newInput != nil {
		input = tr.newInput(i)
	}
	out := make([][][]any, len(tr.tables))
	for t, tb := range tr.tables {
		rows := make([][]any, len(tb.rows))
		for k, row := range tb.rows {
			r := make([]any, len(row))
			for j, c := range tb.cols {
				v := row[j]
				switch {
				case c == tb.idCol:
					v = id
				case c == "bucket":
					v = sameInt(v, int64(persistence.BucketOf(id)))
				case c == "created_at" || c == "updated_at" || c == "at":
					v = sameInt(v, asInt(v)+shift)
				case input != nil:
					if p, ok := v.([]byte); ok && string(p) == string(tr.input) {
						v = input
					}
				}
				r[j] = v
			}
			rows[k] = r
		}
		out[t] = rows
	}
	return out
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
	if len(tr.tables) < 2 || len(tr.tables[0].rows) != 1 || len(tr.tables[1].rows) == 0 {
		return errors.New("the template needs one instance row and its history")
	}
	need := map[string]bool{"id": false, "bucket": false, "created_at": false, "updated_at": false, "workflow": false, "input": false}
	for _, c := range tr.tables[0].cols {
		if _, ok := need[c]; ok {
			need[c] = true
		}
	}
	for c, ok := range need {
		if !ok {
			return fmt.Errorf("instances has no column %s", c)
		}
	}
	for _, tb := range tr.tables {
		for _, row := range tb.rows {
			for j, c := range tb.cols {
				if c != tb.idCol && holds(row[j]) {
					return fmt.Errorf("%s.%s holds the instance ID: the prefill does not know how to copy it", tb.name, c)
				}
			}
		}
	}
	return nil
}

// fill sets workflow and input from the instance row.
func (tr *templateRows) fill() {
	inst := tr.tables[0]
	for j, c := range inst.cols {
		switch c {
		case "workflow":
			tr.workflow, _ = inst.rows[0][j].(string)
		case "input":
			tr.input, _ = inst.rows[0][j].([]byte)
		}
	}
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

// readSQLRows reads every row of a query as column names and values.
func readSQLRows(rows *sql.Rows) ([]string, [][]any, error) {
	defer rows.Close() //nolint:errcheck // read-only; Err reports what matters
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

// prepare reads the template's rows with read (a query of one table's
// rows of the instance, by its ID column) and checks them.
func (k prefillKind) prepare(tmplID string, read func(table, idCol string) ([]string, [][]any, error)) (templateRows, error) {
	var tr templateRows
	for _, t := range k.tables {
		cols, rows, err := read(t[0], t[1])
		if err != nil {
			return tr, fmt.Errorf("read the template's %s: %w", t[0], err)
		}
		tr.tables = append(tr.tables, tmplTable{name: t[0], idCol: t[1], cols: cols, rows: rows})
	}
	if err := tr.check(tmplID); err != nil {
		return tr, err
	}
	tr.fill()
	if k.newInput != nil {
		want, err := k.newInput(0)
		if err != nil {
			return tr, err
		}
		if string(want) != string(tr.input) {
			return tr, fmt.Errorf("the template's input is %q, the copies' would be like %q", tr.input, want)
		}
		tr.newInput = func(i int) []byte {
			b, _ := k.newInput(i) // the same type encoded for 0 above
			return b
		}
	}
	return tr, nil
}

// sqliteClone replaces the template instance with k.n copies, in one
// transaction of prepared inserts, oldest first.
func sqliteClone(ctx context.Context, db *sql.DB, tmplID string, k prefillKind, logf func(string, ...any)) error {
	tr, err := k.prepare(tmplID, func(table, idCol string) ([]string, [][]any, error) {
		rows, err := db.QueryContext(ctx, fmt.Sprintf("SELECT * FROM %s WHERE %s = ?", table, idCol), tmplID)
		if err != nil {
			return nil, nil, err
		}
		return readSQLRows(rows)
	})
	if err != nil {
		return err
	}
	for _, table := range k.empty {
		var c int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&c); err != nil {
			return err
		}
		if c != 0 {
			return fmt.Errorf("the template left %d rows in %s", c, table)
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	inserts := make([]*sql.Stmt, len(tr.tables))
	for i := len(tr.tables) - 1; i >= 0; i-- {
		tb := tr.tables[i]
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("DELETE FROM %s WHERE %s = ?", tb.name, tb.idCol), tmplID); err != nil {
			return err
		}
		st, err := tx.PrepareContext(ctx, fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", tb.name, strings.Join(tb.cols, ", "),
			strings.TrimSuffix(strings.Repeat("?, ", len(tb.cols)), ", ")))
		if err != nil {
			return err
		}
		defer st.Close()
		inserts[i] = st
	}
	end := time.Now().Add(-time.Hour).UnixNano()
	rng := rand.New(rand.NewPCG(uint64(k.n), 29))
	for i := range k.n {
		for t, rows := range tr.clone(i, k.n, end, rng) {
			for _, r := range rows {
				if _, err := inserts[t].ExecContext(ctx, r...); err != nil {
					return fmt.Errorf("insert %s of copy %d: %w", tr.tables[t].name, i, err)
				}
			}
		}
		if (i+1)%(4*prefillRows) == 0 {
			logf("seeded %d of %d", i+1, k.n)
		}
	}
	return tx.Commit()
}

// pgSeed returns the name of the template database holding k, seeding it
// first (beside base's database, on its server) if it is not there yet.
func pgSeed(ctx context.Context, base string, k prefillKind, logf func(string, ...any)) (string, error) {
	name := fmt.Sprintf("norn_bench_seed_%s_%d", k.name, k.n)
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
	if exists {
		// Migrate a seed made before a schema change once, here.
		st, err := storeurl.Open(ctx, withDatabase(base, name))
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
	logf("seeding %d %s instances into database %s (once; later runs copy it)", k.n, k.name, name)
	start := time.Now()
	bu := withDatabase(base, building)
	tmplID, err := k.template(ctx, bu)
	if err != nil {
		return "", fmt.Errorf("template instance: %w", err)
	}
	if err := pgClone(ctx, bu, tmplID, k, logf); err != nil {
		return "", err
	}
	if err := pgExec(ctx, base, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name)); err != nil {
		return "", err
	}
	logf("seeded %d %s instances in %s", k.n, k.name, time.Since(start).Round(time.Second))
	return name, nil
}

// pgClone replaces the template instance with k.n copies, written with
// COPY in one transaction, then vacuums and analyzes the tables as a store
// that has been running for a while would be.
func pgClone(ctx context.Context, u, tmplID string, k prefillKind, logf func(string, ...any)) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	tr, err := k.prepare(tmplID, func(table, idCol string) ([]string, [][]any, error) {
		rows, err := conn.Query(ctx, fmt.Sprintf("SELECT * FROM norn.%s WHERE %s = $1", table, idCol), tmplID)
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
	})
	if err != nil {
		return err
	}
	for _, table := range k.empty {
		var c int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM norn."+table).Scan(&c); err != nil {
			return err
		}
		if c != 0 {
			return fmt.Errorf("the template left %d rows in %s", c, table)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after Commit
	for i := len(tr.tables) - 1; i >= 0; i-- {
		tb := tr.tables[i]
		if _, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM norn.%s WHERE %s = $1", tb.name, tb.idCol), tmplID); err != nil {
			return err
		}
	}
	end := time.Now().Add(-time.Hour).UnixNano()
	rng := rand.New(rand.NewPCG(uint64(k.n), 29))
	for lo := 0; lo < k.n; lo += prefillRows {
		hi := min(lo+prefillRows, k.n)
		batch := make([][][]any, len(tr.tables))
		for i := lo; i < hi; i++ {
			for t, rows := range tr.clone(i, k.n, end, rng) {
				batch[t] = append(batch[t], rows...)
			}
		}
		for t, rows := range batch {
			tb := tr.tables[t]
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"norn", tb.name}, tb.cols, pgx.CopyFromRows(rows)); err != nil {
				return fmt.Errorf("copy %s: %w", tb.name, err)
			}
		}
		if hi%(4*prefillRows) == 0 {
			logf("seeded %d of %d", hi, k.n)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	for _, tb := range tr.tables {
		if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) norn."+tb.name); err != nil {
			return fmt.Errorf("vacuum %s: %w", tb.name, err)
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

// copyFile copies src to dst (a new file) and syncs it.
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
	// On disk before the run starts: otherwise the kernel writes the copy
	// back during the run, and every fsync of the run waits behind it.
	return errors.Join(out.Sync(), out.Close())
}
