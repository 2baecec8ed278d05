package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be a cluster node of the failover and
// crosspingpong workloads, as the bench binary is.
func TestMain(m *testing.M) {
	if code, ok := nodeRole(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestWorkloads runs every workload at a tiny size on a temp SQLite file, so
// that `go test ./...` notices when one stops running. It asserts counts
// (nothing duplicated, lost or missing; recur: the final run number), never
// times.
func TestWorkloads(t *testing.T) {
	opts := options{
		N: 20, M: 20, P: 3, Publishers: 2, S: 5, K: 20, Pending: 20,
		SleepMin: 20 * time.Millisecond, SleepMax: 100 * time.Millisecond,
		PassivateAfter: 200 * time.Millisecond,
		Spawners:       8, Timeout: 30 * time.Second, BaselineBatch: 50, SpawnBatch: 7,
		OnVictim: true, KillBefore: 100 * time.Millisecond,
	}
	targets, err := parseTargets("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	var results []result
	for _, w := range workloads() {
		t.Run(w.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res := runOne(ctx, w, opts, targets[0], nil)
			if res.Err != nil {
				t.Fatalf("%s: %v (%s)", w.name, res.Err, res.Extra)
			}
			if res.Throughput <= 0 {
				t.Errorf("%s: throughput %v", w.name, res.Throughput)
			}
			for _, k := range map[string][]string{
				"queue":    {"dup", "lost", "unknown"},
				"fanout":   {"missing"},
				"ingress":  {"lost"},
				"mcp":      {"wrong"},
				"outbox":   {"dup", "lost", "unknown"},
				"failover": {"fired_twice", "lost", "ran_on_killed"},
			}[w.name] {
				if v, ok := res.Metrics[k]; !ok || v != 0 {
					t.Errorf("%s: %s = %v, %v; want 0", w.name, k, v, ok)
				}
			}
			switch w.name {
			case "chain":
				if res.Metrics["baseline_rows_per_s"] <= 0 {
					t.Errorf("chain: no baseline (%s)", res.Extra)
				}
				if p50, p99 := res.Metrics["spawn_p50_ms"], res.Metrics["spawn_p99_ms"]; p50 <= 0 || p99 < p50 {
					t.Errorf("chain: spawn latency p50 %v ms, p99 %v ms", p50, p99)
				}
			case "timers":
				if res.Metrics["pending_waiting"] != 20 {
					t.Errorf("timers: %v of 20 pending sleepers passivated", res.Metrics["pending_waiting"])
				}
			case "idle":
				if res.Metrics["waiting"] != 20 {
					t.Errorf("idle: %v of 20 instances passivated", res.Metrics["waiting"])
				}
			case "failover":
				if res.Metrics["taken_over"] != 20 {
					t.Errorf("failover: %v of 20 sleepers on the killed node", res.Metrics["taken_over"])
				}
			case "history":
				if res.Metrics["activation_ms_20"] <= 0 {
					t.Errorf("history: no activation time for 20 events (%s)", res.Extra)
				}
			case "recur":
				if res.Metrics["run"] != 20 || res.Metrics["history_len"] > 3 {
					t.Errorf("recur: final run %v with %v history events; want run 20, at most 3 events",
						res.Metrics["run"], res.Metrics["history_len"])
				}
			}
			results = append(results, res)
		})
	}
	var b bytes.Buffer
	printTable(&b, results)
	if got := strings.Count(b.String(), "\n"); got != len(results)+2 {
		t.Errorf("table has %d lines for %d results:\n%s", got, len(results), b.String())
	}
	t.Logf("\n%s", b.String())
}

// TestTimersDueWithin: -due-within has every timer pending at once, and
// they all fire, none early.
func TestTimersDueWithin(t *testing.T) {
	opts := options{K: 50, SleepMin: 8 * time.Second, DueWithin: 300 * time.Millisecond, Spawners: 8, Timeout: 30 * time.Second}
	targets, _ := parseTargets("sqlite")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := runOne(ctx, workload{"timers", runTimers}, opts, targets[0], nil)
	if res.Err != nil {
		t.Fatalf("%v (%s)", res.Err, res.Extra)
	}
	if res.Throughput <= 0 || !strings.Contains(res.Extra, "pending at once") {
		t.Fatalf("throughput %v, extra %q", res.Throughput, res.Extra)
	}
}

// TestCompare: -compare measures a raw baseline beside a run that has none
// and prints each store's ratio to the first.
func TestCompare(t *testing.T) {
	targets, _ := parseTargets("sqlite")
	rs := []result{
		{Workload: "queue", Store: "a", Throughput: 100, Unit: "msg/s", P50: time.Millisecond, Metrics: map[string]float64{}},
		{Workload: "queue", Store: "b", Throughput: 200, Unit: "msg/s", P50: 3 * time.Millisecond,
			Metrics: map[string]float64{"baseline_rows_per_s": 1000}},
	}
	// A few hundred rows check the measurement (a -compare run writes
	// compareRows, too many for a race-enabled test binary).
	withBaseline(context.Background(), &rs[0], targets[0], 500, 100, io.Discard)
	if rs[0].Metrics["baseline_rows_per_s"] <= 0 {
		t.Fatalf("no baseline measured: %v", rs[0].Metrics)
	}
	var b bytes.Buffer
	printCompare(&b, rs)
	for _, want := range []string{"| queue | b | 200 msg/s | 1,000 | 200.00 | 2.00× |", "| 3.00× |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("compare table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestParseTargets(t *testing.T) {
	ts, err := parseTargets("sqlite, postgres://u:secret@db:5432/bench,sqlite,/tmp/x.db")
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, tg := range ts {
		labels = append(labels, tg.label)
	}
	if got := strings.Join(labels, " "); got != "sqlite postgres@db:5432/bench sqlite#2 sqlite:x.db" {
		t.Fatalf("labels = %q", got)
	}
	if !ts[0].temp() || !ts[1].postgres() || ts[3].sqlitePath() != "/tmp/x.db" {
		t.Fatalf("targets = %+v", ts)
	}
	if _, err := parseTargets("mysql://x"); err == nil {
		t.Fatal("mysql accepted")
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := summarize(ds)
	if l.P50 != 50*time.Millisecond || l.P99 != 99*time.Millisecond || l.Max != 100*time.Millisecond || l.N != 100 {
		t.Fatalf("summary = %+v", l)
	}
	if fmtInt(1234567) != "1,234,567" || fmtInt(-1000) != "-1,000" || fmtDur(1500*time.Microsecond) != "1.50ms" {
		t.Fatal("formatting")
	}
}

// TestPostgresBaseline checks the PostgreSQL side of the chain baseline
// against NORN_BENCH_POSTGRES_URL (an empty database), if set.
func TestPostgresBaseline(t *testing.T) {
	url := os.Getenv("NORN_BENCH_POSTGRES_URL")
	if url == "" {
		t.Skip("NORN_BENCH_POSTGRES_URL not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := pgBaseline(ctx, url, 1000, 5, 300)
	if err != nil || b.rowsPerSec <= 0 {
		t.Fatalf("baseline = %+v, %v", b, err)
	}
	nd := &node{t: target{label: "postgres", url: url}}
	if size, err := nd.diskBytes(ctx); err != nil || size <= 0 {
		t.Fatalf("database size = %d, %v", size, err)
	}
}

// TestBaselineIDsAreNorns: the raw baseline's instance IDs are built as
// Norn's are (workflow name, Unix milliseconds in 11 hex digits, 12 random
// hex digits), so its rows land in the primary key where Norn's do. Random
// IDs would scatter them and make the baseline slower than the store it is
// compared with.
func TestBaselineIDsAreNorns(t *testing.T) {
	shape := regexp.MustCompile(`^chain-([0-9a-f]{11})[0-9a-f]{12}$`)
	before := time.Now().UnixMilli()
	rows := baselineRows(50, 5)
	after := time.Now().UnixMilli()
	for _, r := range rows {
		m := shape.FindStringSubmatch(r.instance)
		if m == nil {
			t.Fatalf("baseline ID %q is not shaped like Norn's", r.instance)
		}
		ms, err := strconv.ParseInt(m[1], 16, 64)
		if err != nil || ms < before || ms > after {
			t.Fatalf("baseline ID %q: time %d not within [%d, %d] (%v)", r.instance, ms, before, after, err)
		}
	}
}
