package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// listWorkflowNames are the workflow names of the list workload; the last is
// rare (1% of instances), to show that a rare workflow's page costs no more.
var listWorkflowNames = [...]string{"order", "payment", "shipment", "invoice", "refund", "signup", "report", "sync", "audit", "rare"}

// listRow is one generated instance of the list workload.
type listRow struct {
	id, workflow, status, parent string
	input                        []byte
	created, updated             int64
}

// listRows generates instance i of n: created over the last 30 days in
// order, mostly ended, a tenth of them children, with a JSON input.
func listRows(n int, now time.Time) func(i int) listRow {
	span := int64(30 * 24 * time.Hour)
	start := now.UnixNano() - span
	return func(i int) listRow {
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		wf := listWorkflowNames[i%9]
		if i%100 == 99 {
			wf = listWorkflowNames[9]
		}
		st := persistence.StatusCompleted
		switch p := rng.IntN(100); {
		case p < 5:
			st = persistence.StatusRunning
		case p < 15:
			st = persistence.StatusWaiting
		case p < 25:
			st = persistence.StatusFailed
		case p < 30:
			st = persistence.StatusCancelled
		}
		created := start + span/int64(n)*int64(i)
		r := listRow{id: fmt.Sprintf("%s-%09d", wf, i), workflow: wf, status: string(st), created: created,
			updated: created + rng.Int64N(int64(time.Hour)),
			input:   []byte(fmt.Sprintf(`{"customer":{"id":"c%d"},"n":%d}`, i%10000, i))}
		if i%10 == 5 {
			// About nine children for each order of every 90 instances.
			r.parent = fmt.Sprintf("%s-%09d", listWorkflowNames[0], i-i%90)
		}
		return r
	}
}

// loadInstances writes n instance rows straight into the store's table
// (the runtime's Spawn path is measured by other workloads; this only
// needs many rows, fast), in big transactions.
func loadInstances(ctx context.Context, t target, path string, n int, gen func(int) listRow) error {
	const batch = 20000
	if t.postgres() {
		conn, err := pgx.Connect(ctx, t.url)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		cols := []string{"id", "workflow", "status", "input", "parent", "created_at", "updated_at", "bucket"}
		for lo := 0; lo < n; lo += batch {
			hi := min(lo+batch, n)
			_, err := conn.CopyFrom(ctx, pgx.Identifier{"norn", "instances"}, cols, pgx.CopyFromSlice(hi-lo, func(i int) ([]any, error) {
				r := gen(lo + i)
				return []any{r.id, r.workflow, r.status, r.input, r.parent, r.created, r.updated, int32(persistence.BucketOf(r.id))}, nil
			}))
			if err != nil {
				return err
			}
		}
		_, err = conn.Exec(ctx, "ANALYZE norn.instances")
		return err
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for lo := 0; lo < n; lo += batch {
		if err := func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback() //nolint:errcheck // no-op after Commit
			st, err := tx.PrepareContext(ctx, `INSERT INTO instances (id, workflow, status, input, parent, created_at, updated_at, bucket)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
			if err != nil {
				return err
			}
			defer st.Close()
			for i := lo; i < min(lo+batch, n); i++ {
				r := gen(i)
				if _, err := st.ExecContext(ctx, r.id, r.workflow, r.status, r.input, r.parent, r.created, r.updated, persistence.BucketOf(r.id)); err != nil {
					return err
				}
			}
			return tx.Commit()
		}(); err != nil {
			return err
		}
	}
	return nil
}

// listCase is one filter of the list workload.
type listCase struct {
	name string
	q    actor.ListQuery
}

// runList: load N instances (default 100,000; -n 1000000 for the target of
// `norn ls`), then time List's first page and a deep page (halfway into
// what the filter selects, reached with the page token) for each filter,
// with a client System as the norn command uses. Each figure is the median
// of 5 calls; "cold" is opening the store, starting the client and reading
// the first page, as one `norn ls` does (without starting the process).
func runList(ctx context.Context, r *runner) (result, error) {
	n := size(100000, r.opts.N)
	res := result{N: fmtInt(int64(n)), Metrics: map[string]float64{}}
	nd, err := r.start(ctx, actor.Config{Client: true})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()
	now := time.Now()
	gen := listRows(n, now)
	r.logf("loading %d instances", n)
	loadStart := time.Now()
	if err := loadInstances(ctx, r.t, nd.path, n, gen); err != nil {
		return res, fmt.Errorf("load instances: %w", err)
	}
	res.Metrics["load_per_s"] = rate(n, time.Since(loadStart))

	// Cold: what one `norn ls` does against the loaded store.
	coldStart := time.Now()
	u := r.t.url
	if r.t.temp() {
		u = "sqlite://" + nd.path
	}
	st, err := storeurl.Open(ctx, u)
	if err != nil {
		return res, err
	}
	client, err := actor.Start(ctx, actor.Config{Store: st, Client: true, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		_, err = client.List(ctx, actor.ListQuery{})
		res.Metrics["cold_first_page_ms"] = ms(time.Since(coldStart))
		err = errors.Join(err, client.Stop(ctx))
	}
	err = errors.Join(err, st.Close())
	if err != nil {
		return res, fmt.Errorf("cold listing: %w", err)
	}

	mid := gen(n / 2)
	child := gen(n/2 - n/2%10 + 5) // has a parent
	cases := []listCase{
		{"all", actor.ListQuery{}},
		{"workflow", actor.ListQuery{Workflow: "payment"}},
		{"rare-workflow", actor.ListQuery{Workflow: "rare"}},
		{"status", actor.ListQuery{Statuses: []actor.Status{actor.StatusFailed}}},
		{"statuses", actor.ListQuery{Statuses: []actor.Status{actor.StatusRunning, actor.StatusWaiting}}},
		{"workflow+status", actor.ListQuery{Workflow: "rare", Statuses: []actor.Status{actor.StatusFailed}}},
		{"created-range", actor.ListQuery{CreatedAfter: time.Unix(0, mid.created).Add(-24 * time.Hour), CreatedBefore: time.Unix(0, mid.created)}},
		{"parent", actor.ListQuery{Parent: child.parent}},
		{"updated-after", actor.ListQuery{UpdatedAfter: now.Add(-24 * time.Hour)}},
		{"input", actor.ListQuery{Workflow: "order", Input: map[string]string{"customer.id": "c4500"}}},
	}
	var firsts []time.Duration
	var parts []string
	for _, c := range cases {
		first, deep, depth, total, err := timeListCase(ctx, nd.sys, c.q)
		if err != nil {
			return res, fmt.Errorf("%s: %w", c.name, err)
		}
		if want := n + r.opts.PrefillEnded; c.name == "all" && total != want {
			return res, fmt.Errorf("the listing pages through %d instances of %d", total, want)
		}
		firsts = append(firsts, first)
		res.Metrics[c.name+"_first_ms"] = ms(first)
		res.Metrics[c.name+"_deep_ms"] = ms(deep)
		res.Metrics[c.name+"_depth"] = float64(depth)
		parts = append(parts, fmt.Sprintf("%s %s/%s@%s", c.name, fmtDur(first), fmtDur(deep), fmtInt(int64(depth))))
		r.logf("%s: first page %s, deep page %s at depth %d", c.name, fmtDur(first), fmtDur(deep), depth)
	}
	slices.Sort(firsts)
	res.P50, res.P99 = firsts[len(firsts)/2], firsts[len(firsts)-1]
	// Throughput: first pages per second by one caller at the median.
	res.Throughput, res.Unit = float64(time.Second)/float64(res.P50), "first pages/s"
	res.Extra = fmt.Sprintf("p50/p99 over the filters' first pages; first/deep page (50) by filter: %s; cold open+first page %.1fms; load %s rows/s",
		strings.Join(parts, ", "), res.Metrics["cold_first_page_ms"], fmtRate(res.Metrics["load_per_s"]))
	return res, nil
}

// timeListCase times the first page of q and a page halfway into what q
// selects (reached with pages of 1000), each the median of 5 calls, and
// counts what q selects.
func timeListCase(ctx context.Context, sys *actor.System, q actor.ListQuery) (first, deep time.Duration, depth, total int, err error) {
	median := func(q actor.ListQuery) (time.Duration, error) {
		var ds []time.Duration
		for range 5 {
			start := time.Now()
			if _, err := sys.List(ctx, q); err != nil {
				return 0, err
			}
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		return ds[len(ds)/2], nil
	}
	if first, err = median(q); err != nil {
		return 0, 0, 0, 0, err
	}
	// Count what q selects (pages of 1000), then walk halfway.
	walk := q
	walk.Limit = 1000
	for {
		page, err := sys.List(ctx, walk)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		total += len(page.Instances)
		if page.Next == "" {
			break
		}
		walk.PageToken = page.Next
	}
	walk = q
	walk.Limit = 1000
	for depth < total/2-1000 {
		page, err := sys.List(ctx, walk)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		depth += len(page.Instances)
		walk.PageToken = page.Next
	}
	deepQ := q
	deepQ.PageToken = walk.PageToken
	deep, err = median(deepQ)
	return first, deep, depth, total, err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
