package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/cli"
	"github.com/nornlabs/norn/persistence"
)

// cliRepeats is how often each command is timed.
const cliRepeats = 20

// runCLI measures the norn command's answers over a store holding -n
// instances (default 100,000): ls's first page, unfiltered and by workflow
// and status, and show and history of one instance. Each figure is the
// whole command as cli.Run runs it in this process (open the store, start
// a client System, query, print, stop), without starting a process. The
// instances are written straight into the store, spread over ten
// workflows and four statuses, so that nothing runs them.
func runCLI(ctx context.Context, r *runner) (result, error) {
	n := size(100_000, r.opts.N)
	res := result{N: fmtInt(int64(n)) + " instances", Unit: "commands/s"}
	node, err := r.start(ctx, actor.Config{Client: true})
	if err != nil {
		return res, err
	}
	defer node.Close()
	u := node.t.url
	if node.t.temp() {
		u = node.path
	}
	prefix := "cli-" + runID() + "-"
	r.logf("writing %d instances", n)
	start := time.Now()
	if node.t.postgres() {
		err = writeInstances(ctx, node.store, prefix, n, max(r.opts.Spawners, 256))
	} else {
		err = writeInstancesSQLite(ctx, node.path, prefix, n)
	}
	if err != nil {
		return res, fmt.Errorf("write instances: %w", err)
	}
	r.logf("wrote %d instances in %v", n, time.Since(start).Round(time.Millisecond))

	one := fmt.Sprintf("%s%08d", prefix, n/2)
	commands := []struct {
		label string
		args  []string
	}{
		{"ls", []string{"ls"}},
		{"ls --workflow --status", []string{"ls", "--workflow", "wf-3", "--status", "waiting"}},
		{"ls --input", []string{"ls", "--workflow", "wf-3", "--input", "customer=3"}},
		{"show", []string{"show", one}},
		{"history", []string{"history", one}},
	}
	var extra []string
	var all []time.Duration
	res.Metrics = map[string]float64{}
	for _, c := range commands {
		args := append([]string{"--store", u}, c.args...)
		var ds []time.Duration
		for range cliRepeats {
			t0 := time.Now()
			if code := cli.Run(ctx, args, cli.Options{Stdout: io.Discard, Stderr: io.Discard}); code != cli.ExitOK {
				return res, fmt.Errorf("norn %s: exit code %d", strings.Join(c.args, " "), code)
			}
			ds = append(ds, time.Since(t0))
		}
		l := summarize(ds)
		all = append(all, ds...)
		extra = append(extra, fmt.Sprintf("%s p50 %s", c.label, fmtDur(l.P50)))
		res.Metrics[strings.ReplaceAll(c.label, " ", "")+"_p50_ms"] = float64(l.P50) / float64(time.Millisecond)
	}
	l := summarize(all)
	res.P50, res.P99 = l.P50, l.P99
	res.Throughput = float64(time.Second) / float64(l.Mean)
	res.Extra = strings.Join(extra, "; ")
	return res, nil
}

// cliStatus is the status of the i-th instance of the cli workload.
func cliStatus(i int) persistence.Status {
	return []persistence.Status{persistence.StatusRunning, persistence.StatusWaiting, persistence.StatusCompleted, persistence.StatusFailed}[i%4]
}

// writeInstances writes n instances through the store, one step each from
// many writers at once (the store commits them in shared batches); ended
// ones end with a second step, as a node ends them.
func writeInstances(ctx context.Context, st persistence.Store, prefix string, n, workers int) error {
	return parallel(ctx, n, workers, func(ctx context.Context, i int) error {
		id := fmt.Sprintf("%s%08d", prefix, i)
		input := []byte(fmt.Sprintf(`{"customer":%d}`, i%1000))
		status := cliStatus(i)
		inst := persistence.Instance{ID: id, Workflow: fmt.Sprintf("wf-%d", i%10), Status: persistence.StatusWaiting, Input: input, HistoryLen: 1}
		if status == persistence.StatusRunning {
			inst.Status = status
		}
		_, err := st.Apply(ctx, persistence.Step{Create: &inst,
			History: []persistence.Event{{Seq: 0, Kind: actor.EventStarted, Name: inst.Workflow, Ref: "json", Payload: input, At: time.Now()}}})
		if err != nil || !status.Terminal() {
			return err
		}
		_, err = st.Apply(ctx, persistence.Step{Instance: id, Status: status, Output: []byte("1"),
			History: []persistence.Event{{Seq: 1, Kind: string(status), Name: inst.Workflow, Payload: []byte("1"), At: time.Now()}}})
		return err
	})
}

// writeInstancesSQLite writes the same instances as writeInstances into an
// SQLite store with plain SQL, 50,000 rows a transaction: a million rows
// in seconds rather than the many minutes of a step each. It writes the
// columns the listing reads and each instance's first history event; the
// bucket column is i mod 1024 rather than the ID's hash, which only a
// node's scans of its own buckets would notice.
func writeInstancesSQLite(ctx context.Context, path, prefix string, n int) error {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	const chunk = 50_000
	base := time.Now().Add(-time.Hour).UnixNano()
	for from := 0; from < n; from += chunk {
		to := min(from+chunk, n)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		gen := `WITH RECURSIVE k(i) AS (SELECT ? UNION ALL SELECT i+1 FROM k WHERE i+1 < ?) `
		_, err = tx.ExecContext(ctx, gen+`INSERT INTO instances (id, workflow, status, input, output, created_at, updated_at, history_len, bucket)
			SELECT printf('%s%08d', ?, i), 'wf-' || (i % 10),
				CASE i % 4 WHEN 0 THEN 'running' WHEN 1 THEN 'waiting' WHEN 2 THEN 'completed' ELSE 'failed' END,
				CAST('{"customer":' || (i % 1000) || '}' AS BLOB), CASE WHEN i % 4 >= 2 THEN CAST('1' AS BLOB) END,
				? + i * 1000, ? + i * 1000, 1, i % 1024 FROM k`, from, to, prefix, base, base)
		if err == nil {
			_, err = tx.ExecContext(ctx, gen+`INSERT INTO history (instance_id, seq, kind, name, ref, payload, at)
				SELECT printf('%s%08d', ?, i), 0, 'started', 'wf-' || (i % 10), 'json', CAST('{"customer":' || (i % 1000) || '}' AS BLOB), ? + i * 1000 FROM k`,
				from, to, prefix, base)
		}
		if err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}
