package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, as Norn's store uses
)

// baselineResult is the raw write rate of history-shaped rows.
type baselineResult struct {
	kind       string
	rowsPerSec float64
}

// historyRow is one row shaped like Norn's history table.
type historyRow struct {
	instance string
	seq      int64
	kind     string
	name     string
	ref      string
	payload  []byte
	err      string
	at       int64
}

// baselineRows makes rows rows the way the chain workflow's history looks:
// per instance a started event, activities, and a completed event. Instance
// IDs are built as Norn builds them (the workflow's name, the time in
// milliseconds, then randomness), so inserts land in the primary key where
// Norn's do: near its end, spread within one millisecond.
func baselineRows(rows, rowsPer int) []historyRow {
	rowsPer = max(rowsPer, 2)
	out := make([]historyRow, 0, rows)
	now := time.Now().UnixNano()
	var id string
	for i := range rows {
		seq := i % rowsPer
		if seq == 0 {
			b := make([]byte, 6)
			_, _ = rand.Read(b)
			id = fmt.Sprintf("chain-%011x", time.Now().UnixMilli()) + hex.EncodeToString(b)
		}
		row := historyRow{instance: id, seq: int64(seq), at: now, payload: []byte(strconv.Itoa(i/rowsPer + seq))}
		switch seq {
		case 0:
			row.kind, row.name = "started", "chain"
		case rowsPer - 1:
			row.kind, row.name = "completed", "chain"
		default:
			row.kind, row.name, row.ref = "activity", "inc", "inc:"+strconv.Itoa(seq)
		}
		out = append(out, row)
	}
	return out
}

// sqliteBaseline writes rows into a fresh SQLite file at path (removed
// afterwards) with Norn's settings: WAL, synchronous=FULL, busy_timeout,
// BEGIN IMMEDIATE; one prepared INSERT, batch rows per transaction.
func sqliteBaseline(ctx context.Context, path string, rows, rowsPer, batch int) (baselineResult, error) {
	defer func() {
		for _, s := range []string{"", "-wal", "-shm", "-journal"} {
			os.Remove(path + s)
		}
	}()
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return baselineResult{}, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE history (
		instance_id TEXT NOT NULL,
		seq         INTEGER NOT NULL,
		kind        TEXT NOT NULL,
		name        TEXT NOT NULL DEFAULT '',
		ref         TEXT NOT NULL DEFAULT '',
		payload     BLOB,
		error       TEXT NOT NULL DEFAULT '',
		at          INTEGER NOT NULL,
		PRIMARY KEY (instance_id, seq)
	) WITHOUT ROWID`); err != nil {
		return baselineResult{}, err
	}
	data := baselineRows(rows, rowsPer)
	start := time.Now()
	for lo := 0; lo < len(data); lo += batch {
		if err := sqliteBatch(ctx, db, data[lo:min(lo+batch, len(data))]); err != nil {
			return baselineResult{}, err
		}
	}
	return baselineResult{kind: "sqlite", rowsPerSec: rate(rows, time.Since(start))}, nil
}

func sqliteBatch(ctx context.Context, db *sql.DB, rows []historyRow) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	st, err := tx.PrepareContext(ctx, `INSERT INTO history (instance_id, seq, kind, name, ref, payload, error, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, r := range rows {
		if _, err := st.ExecContext(ctx, r.instance, r.seq, r.kind, r.name, r.ref, r.payload, r.err, r.at); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// pgBaseline copies rows into a scratch table of the bench's own (a regular,
// WAL-logged table like Norn's, not a TEMP table, which would skip the WAL
// and overstate the baseline), batch rows per COPY, and drops that table.
func pgBaseline(ctx context.Context, dsn string, rows, rowsPer, batch int) (res baselineResult, err error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return baselineResult{}, err
	}
	defer conn.Close(context.Background())
	table := "norn_bench_history_" + runID()
	if _, err := conn.Exec(ctx, `CREATE TABLE `+table+` (
		instance_id TEXT NOT NULL,
		seq         BIGINT NOT NULL,
		kind        TEXT NOT NULL,
		name        TEXT NOT NULL DEFAULT '',
		ref         TEXT NOT NULL DEFAULT '',
		payload     BYTEA,
		error       TEXT NOT NULL DEFAULT '',
		at          BIGINT NOT NULL,
		PRIMARY KEY (instance_id, seq)
	)`); err != nil {
		return baselineResult{}, err
	}
	defer func() {
		_, derr := conn.Exec(context.Background(), `DROP TABLE IF EXISTS `+table)
		err = errors.Join(err, derr)
	}()
	data := baselineRows(rows, rowsPer)
	cols := []string{"instance_id", "seq", "kind", "name", "ref", "payload", "error", "at"}
	start := time.Now()
	for lo := 0; lo < len(data); lo += batch {
		part := data[lo:min(lo+batch, len(data))]
		n, err := conn.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromSlice(len(part), func(i int) ([]any, error) {
			r := part[i]
			return []any{r.instance, r.seq, r.kind, r.name, r.ref, r.payload, r.err, r.at}, nil
		}))
		if err != nil {
			return baselineResult{}, err
		}
		if int(n) != len(part) {
			return baselineResult{}, fmt.Errorf("copied %d rows of %d", n, len(part))
		}
	}
	return baselineResult{kind: "postgres", rowsPerSec: rate(rows, time.Since(start))}, nil
}
