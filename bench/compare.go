package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// compareRows is the size of the raw baseline each -compare run is set
// against: enough rows that the rate is stable, few enough that it takes
// about a second.
const compareRows = 50000

// rawBaseline measures the raw write rate of history-shaped rows on t's
// kind of store, next to its data: the yardstick -compare divides by, so
// that a machine busy with other work slows both sides of the ratio.
func rawBaseline(ctx context.Context, t target, rows, batch int) (baselineResult, error) {
	if t.postgres() {
		return pgBaseline(ctx, t.url, rows, 5, batch)
	}
	dir := os.TempDir()
	if p := t.sqlitePath(); p != "" {
		dir = filepath.Dir(p)
	}
	return sqliteBaseline(ctx, filepath.Join(dir, "norn-bench-baseline-"+runID()+".db"), rows, 5, batch)
}

// withBaseline adds the raw rate of rows rows (compareRows in a -compare
// run) measured right after a run to its metrics (a chain run has measured
// one of its own already).
func withBaseline(ctx context.Context, res *result, t target, rows, batch int, progress io.Writer) {
	if res.Err != nil || res.Metrics["baseline_rows_per_s"] > 0 {
		return
	}
	fmt.Fprintf(progress, "  [%s] raw baseline: %d history rows\n", t.label, rows)
	base, err := rawBaseline(ctx, t, rows, batch)
	if err != nil {
		fmt.Fprintf(progress, "  [%s] raw baseline failed: %v\n", t.label, err)
		return
	}
	if res.Metrics == nil {
		res.Metrics = map[string]float64{}
	}
	res.Metrics["baseline_rows_per_s"] = base.rowsPerSec
}

// printCompare writes the -compare table: per workload and store, the
// throughput, the raw baseline measured beside it, the throughput per
// 1,000 raw rows/s (comparable between runs on a busy machine), and the
// ratio of each store to the first one (PG/SQLite with the usual order).
func printCompare(w io.Writer, rs []result) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| workload | store | throughput | raw rows/s | per 1k raw rows/s | vs first store | per-raw vs first store | p50 vs first store |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	first := map[string]result{}
	for _, r := range rs {
		if r.Err != nil || r.Throughput <= 0 {
			fmt.Fprintf(w, "| %s | %s | failed | - | - | - | - | - |\n", r.Workload, r.Store)
			continue
		}
		base := r.Metrics["baseline_rows_per_s"]
		perRaw := func(x result) float64 {
			if b := x.Metrics["baseline_rows_per_s"]; b > 0 {
				return 1000 * x.Throughput / b
			}
			return 0
		}
		f, ok := first[r.Workload]
		if !ok {
			first[r.Workload] = r
			f = r
		}
		cells := []string{r.Workload, r.Store, fmtRate(r.Throughput) + " " + r.Unit, "-", "-", ratio(r.Throughput, f.Throughput),
			ratio(perRaw(r), perRaw(f)), ratio(float64(r.P50), float64(f.P50))}
		if base > 0 {
			cells[3], cells[4] = fmtRate(base), fmt.Sprintf("%.2f", perRaw(r))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}
