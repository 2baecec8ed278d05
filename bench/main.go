// Command bench runs Norn's benchmark workloads and prints one results table.
//
//	go run ./bench -workload chain -n 10000
//	go run ./bench -workload all -store sqlite,postgres://user:pw@host/fresh_db -json out.json
//
// See bench/README.md for what each workload does and what the figures mean.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	_ "net/http/pprof" // served only with -pprof
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/nornlabs/norn/actor"
)

// options are the workload parameters. Zero means "the workload's default".
type options struct {
	N            int  // main size: chain workflows, idle instances, recur iterations; fallback for -m / -k
	M            int  // messages (pingpong round trips, queue, fanout)
	P            int  // queue consumers
	Publishers   int  // queue publishers
	Prefetch     int  // queue: mailbox.Prefetch of each consumer
	PublishBatch int  // queue: messages per PublishBatch
	Relay        bool // queue: publishers send to relay workflows, which publish
	SpawnBatch   int  // spawn: inputs per SpawnBatch
	TimerWarmUp  time.Duration
	Backlog      bool // queue: publish everything before the consumers start; outbox: emit everything before the relayer starts
	S            int  // fanout subscribers
	K            int  // timers instances
	Pending      int  // timers second phase: instances sleeping an hour (0 skips)

	SleepMin, SleepMax time.Duration // timers sleep range
	DueWithin          time.Duration // timers: all due within this window, -sleep-min after the start
	PassivateAfter     time.Duration // Config.PassivateAfter; 0: the workload's choice
	Spawners           int           // goroutines spawning instances
	Clients            int           // ingress: concurrent HTTP clients; mcp: MCP clients
	Timeout            time.Duration // bound of each waiting phase
	BaselineBatch      int           // rows per transaction of the raw baseline
	HeapProfile        string        // written where idle/timers measure passivated memory
	Observe            string        // hooks on while measuring: metrics, tracing, both

	OnVictim   bool          // failover: place every sleeper on the node to kill
	KillBefore time.Duration // failover: the kill comes this long before the timers are due
	Lead       time.Duration // failover: spawn → due; 0: 3s + 3ms per sleeper

	PrefillEnded  int    // ended chain instances in the store before the workload starts
	PrefillParked int    // idle instances parked on prefillChannel before the workload starts
	PrefillCache  string // directory of the seeded SQLite files
}

// size picks the first positive value, else def.
func size(def int, vals ...int) int {
	for _, v := range vals {
		if v > 0 {
			return v
		}
	}
	return def
}

func (o options) passivate(def time.Duration) time.Duration {
	if o.PassivateAfter > 0 {
		return o.PassivateAfter
	}
	return def
}

// result is one row of the table.
type result struct {
	Workload   string
	Store      string
	N          string
	Throughput float64
	Unit       string
	P50, P99   time.Duration
	Extra      string
	Wall       time.Duration
	// Metrics are the figures behind Extra, for -json and for tests.
	Metrics map[string]float64
	Err     error
}

// runner carries what a workload needs for one run on one store.
type runner struct {
	opts     options
	t        target
	progress io.Writer
}

func (r *runner) logf(format string, args ...any) {
	if r.progress != nil {
		fmt.Fprintf(r.progress, "  [%s] %s\n", r.t.label, fmt.Sprintf(format, args...))
	}
}

// start opens the target's store and starts a System on it.
func (r *runner) start(ctx context.Context, cfg actor.Config) (*node, error) {
	cfg.TimerWarmUp = r.opts.TimerWarmUp
	if r.opts.Observe != "" {
		h, err := observeHooks(r.opts.Observe, cfg.Hooks)
		if err != nil {
			return nil, err
		}
		cfg.Hooks = h
	}
	return startNode(ctx, r.t, cfg)
}

// heapProfile writes a heap profile if -heapprofile was given.
func (r *runner) heapProfile() {
	if r.opts.HeapProfile == "" {
		return
	}
	f, err := os.Create(r.opts.HeapProfile)
	if err == nil {
		err = errors.Join(pprof.WriteHeapProfile(f), f.Close())
	}
	if err != nil {
		r.logf("heap profile: %v", err)
	}
}

type workload struct {
	name string
	run  func(ctx context.Context, r *runner) (result, error)
}

func workloads() []workload {
	return []workload{
		{"chain", runChain},
		{"chaintx", runChainTx},
		{"pingpong", runPingPong},
		{"queue", runQueue},
		{"fanout", runFanout},
		{"timers", runTimers},
		{"idle", runIdle},
		{"recur", runRecur},
		{"ingress", runIngress},
		{"outbox", runOutbox},
		{"failover", runFailover},
		{"crosspingpong", runCrossPingPong},
		{"list", runList},
		{"stats", runStats},
		{"cli", runCLI},
		{"viewer", runViewer},
		{"history", runHistory},
		{"retry", runRetry},
		{"purge", runPurge},
		{"call", runCall},
		{"crosscall", runCrossCall},
		{"query", runQuery},
		{"mcp", runMCP},
		{"spawn", runSpawn},
	}
}

// runOne runs one workload on one target in a fresh state: memory settled,
// peak RSS reset, a System of its own.
func runOne(ctx context.Context, w workload, opts options, t target, progress io.Writer) result {
	settle()
	resetPeakRSS()
	start := time.Now()
	t, done, err := prefillTarget(ctx, t, opts, progress)
	if err != nil {
		return result{Workload: w.name, Store: t.label, Err: err, Wall: time.Since(start)}
	}
	defer done()
	r := &runner{opts: opts, t: t, progress: progress}
	start = time.Now()
	res, err := w.run(ctx, r)
	res.Workload, res.Store, res.Err = w.name, t.label, err
	if res.Wall == 0 {
		res.Wall = time.Since(start)
	}
	return res
}

func main() {
	if code, ok := nodeRole(); ok {
		os.Exit(code)
	}
	os.Exit(run())
}

// run is main without os.Exit, so that deferred work (the CPU profile) happens.
func run() int {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	var o options
	name := fs.String("workload", "", "workload to run: chain, chaintx, pingpong, queue, fanout, timers, idle, recur, ingress, outbox, failover, crosspingpong, list, stats, cli, viewer, history, retry, purge, mcp, spawn, or all")
	stores := fs.String("store", "sqlite", "comma-separated stores: sqlite (a fresh temp file per run), sqlite://PATH, or postgres://... (an empty database)")
	jsonOut := fs.String("json", "", "also write the results as JSON to this file")
	compare := fs.Bool("compare", false, "after each run measure the raw store baseline beside it, and print a second table of ratios: throughput per 1k raw rows/s, and each store against the first (e.g. -store sqlite,postgres://…: PG/SQLite)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	fs.StringVar(&o.HeapProfile, "heapprofile", "", "write a heap profile to this file where idle and timers measure memory after passivation (the last such point wins)")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on this address (e.g. localhost:6060) while running")
	fs.IntVar(&o.N, "n", 0, "size: chain workflows (10000), idle instances (100000), recur iterations (1000000), ingress and outbox events (10000), failover sleepers (1000), list, stats and cli instances (100000), viewer history events (10000), history length (1k, 10k and 100k), retry failed instances (2000), purge seeded ended instances (100000), spawn jobs (10000); also the default of -m and -k")
	fs.IntVar(&o.M, "m", 0, "messages: pingpong and crosspingpong round trips (2000), queue messages (10000), fanout messages (200), purge chain workflows per phase (2000)")
	fs.IntVar(&o.P, "p", 0, "queue: consumers (8); outbox: the relayer's concurrent sends (16); crosspingpong: pinger/ponger pairs (1)")
	fs.IntVar(&o.Publishers, "publishers", 0, "queue: publishing goroutines (4)")
	fs.IntVar(&o.PublishBatch, "publish-batch", 1, "queue: messages each publisher commits at once (PublishBatch; 1: Publish one by one)")
	fs.BoolVar(&o.Relay, "relay", false, "queue: each publisher sends its messages by PID to a relay workflow of its own, which publishes each on the channel (ctx.Publish, one per commit while it keeps up)")
	fs.IntVar(&o.SpawnBatch, "spawn-batch", 1000, "spawn: inputs per SpawnBatch")
	fs.IntVar(&o.Prefetch, "prefetch", 1, "queue: messages each consumer takes per claim (mailbox.Prefetch; 1: one at a time)")
	fs.BoolVar(&o.Backlog, "backlog", false, "queue: publish all messages before starting the consumers; outbox: emit all events before starting the relayer (measures draining)")
	fs.IntVar(&o.S, "s", 0, "fanout: subscribers (100)")
	fs.IntVar(&o.Clients, "clients", 0, "ingress: concurrent HTTP clients (16); mcp: concurrent MCP clients (8)")
	fs.IntVar(&o.K, "k", 0, "timers: sleeping instances (10000)")
	fs.IntVar(&o.Pending, "pending", 100000, "timers: instances sleeping an hour in the second phase (0 skips it)")
	fs.DurationVar(&o.SleepMin, "sleep-min", time.Second, "timers: shortest sleep")
	fs.DurationVar(&o.SleepMax, "sleep-max", 5*time.Second, "timers: longest sleep")
	fs.DurationVar(&o.DueWithin, "due-within", 0, "timers: spawn every sleeper first and have all their timers come due spread over this window, opening -sleep-min after the start (e.g. -k 100000 -sleep-min 2m -due-within 1m); replaces -sleep-max")
	fs.DurationVar(&o.TimerWarmUp, "timer-warmup", 0, "Config.TimerWarmUp (0: Norn's default of 1s; negative: off)")
	fs.DurationVar(&o.PassivateAfter, "passivate-after", 0, "Config.PassivateAfter (default: idle 2s, timers second phase 1s, everything else Norn's default of 1m)")
	fs.IntVar(&o.Spawners, "spawners", 64, "goroutines spawning instances concurrently")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "bound of each waiting phase (consumption, completion, passivation)")
	fs.BoolVar(&o.OnVictim, "on-victim", true, "failover: place every sleeper on the node that is killed (false: spread over the three nodes)")
	fs.DurationVar(&o.KillBefore, "kill-before", 250*time.Millisecond, "failover: kill the node this long before the sleepers' timers are due")
	fs.DurationVar(&o.Lead, "lead", 0, "failover: time from the first spawn to the timers' due time (default 3s + 3ms per sleeper)")
	fs.IntVar(&o.BaselineBatch, "baseline-batch", 5000, "chain: rows per transaction of the raw SQLite/PostgreSQL baseline")
	fs.IntVar(&o.PrefillEnded, "prefill-ended", 0, "put this many ended chain instances (5 history events each) in the store before the workload runs: seeded once, then copied for every run (sqlite: a file in -prefill-cache; postgres: a template database norn_bench_seed_ended_N beside the -store database, copied into a database of the run's own that is dropped afterwards)")
	fs.IntVar(&o.PrefillParked, "prefill-parked", 0, "idle: park this many idle instances (subscribed to a broadcast channel, passivated) in the store instead of spawning -n; seeded and copied as -prefill-ended (database norn_bench_seed_parked_N)")
	fs.StringVar(&o.PrefillCache, "prefill-cache", filepath.Join(os.TempDir(), "norn-bench-seed"), "directory of the seeded SQLite files of -prefill-ended (kept between runs; delete to reseed)")
	fs.StringVar(&o.Observe, "observe", "", "run with hooks on: metrics (package metrics), tracing (package tracing, spans through the OpenTelemetry SDK to an exporter that drops them), both")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./bench -workload NAME [flags]\n\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	if *name == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	var selected []workload
	for _, w := range workloads() {
		if *name == "all" || *name == w.name {
			selected = append(selected, w)
		}
	}
	if len(selected) == 0 {
		fmt.Fprintf(os.Stderr, "bench: unknown workload %q\n", *name)
		return 2
	}
	targets, err := parseTargets(*stores)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if o.SleepMin <= 0 || (o.SleepMax < o.SleepMin && o.DueWithin <= 0) {
		fmt.Fprintln(os.Stderr, "bench: want 0 < -sleep-min <= -sleep-max")
		return 2
	}
	if o.PrefillEnded > 0 && o.PrefillParked > 0 {
		fmt.Fprintln(os.Stderr, "bench: -prefill-ended and -prefill-parked do not go together")
		return 2
	}
	if o.Timeout <= 0 || o.Spawners <= 0 {
		fmt.Fprintln(os.Stderr, "bench: -timeout and -spawners must be positive")
		return 2
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: cpu profile:", err)
			return 2
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if *pprofAddr != "" {
		go func() {
			if err := http.ListenAndServe(*pprofAddr, nil); err != nil {
				fmt.Fprintln(os.Stderr, "bench: pprof:", err)
			}
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var results []result
	failed := false
	for _, w := range selected {
		for _, t := range targets {
			if ctx.Err() != nil {
				break
			}
			fmt.Fprintf(os.Stderr, "%s on %s ...\n", w.name, t.label)
			res := runOne(ctx, w, o, t, os.Stderr)
			if *compare {
				withBaseline(ctx, &res, t, compareRows, size(5000, o.BaselineBatch), os.Stderr)
			}
			if res.Err != nil {
				failed = true
				fmt.Fprintf(os.Stderr, "  [%s] %s failed: %v\n", t.label, w.name, res.Err)
			}
			results = append(results, res)
		}
	}
	printTable(os.Stdout, results)
	if *compare {
		printCompare(os.Stdout, results)
	}
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, results); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			failed = true
		}
	}
	if failed || ctx.Err() != nil {
		return 1
	}
	return 0
}

// printTable writes the results as one aligned Markdown table.
func printTable(w io.Writer, rs []result) {
	header := []string{"workload", "store", "n", "throughput", "p50", "p99", "extra"}
	rows := [][]string{header}
	for _, r := range rs {
		tp, p50, p99, extra := "-", "-", "-", r.Extra
		if r.Throughput > 0 {
			tp = fmtRate(r.Throughput) + " " + r.Unit
		}
		if r.P50 > 0 || r.P99 > 0 {
			p50, p99 = fmtDur(r.P50), fmtDur(r.P99)
		}
		if r.Err != nil {
			msg := "ERROR: " + strings.ReplaceAll(r.Err.Error(), "\n", " ")
			if extra != "" {
				msg += "; " + extra
			}
			extra = msg
		}
		rows = append(rows, []string{r.Workload, r.Store, r.N, tp, p50, p99, strings.ReplaceAll(extra, "|", "/")})
	}
	widths := make([]int, len(header))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range cells {
			pad := widths[i] - len([]rune(c))
			if i == len(cells)-1 {
				fmt.Fprintf(&b, " %s%s |", c, strings.Repeat(" ", pad))
				continue
			}
			// numbers right-aligned, words left-aligned
			if i >= 2 && i <= 5 {
				fmt.Fprintf(&b, " %s%s |", strings.Repeat(" ", pad), c)
			} else {
				fmt.Fprintf(&b, " %s%s |", c, strings.Repeat(" ", pad))
			}
		}
		fmt.Fprintln(w, b.String())
	}
	line(rows[0])
	sep := make([]string, len(header))
	for i := range sep {
		if i >= 2 && i <= 5 {
			sep[i] = strings.Repeat("-", widths[i]-1) + ":"
		} else {
			sep[i] = strings.Repeat("-", widths[i])
		}
	}
	line(sep)
	for _, row := range rows[1:] {
		line(row)
	}
}

type jsonResult struct {
	Workload    string             `json:"workload"`
	Store       string             `json:"store"`
	N           string             `json:"n"`
	Throughput  float64            `json:"throughput"`
	Unit        string             `json:"unit"`
	P50ms       float64            `json:"p50_ms"`
	P99ms       float64            `json:"p99_ms"`
	WallSeconds float64            `json:"wall_seconds"`
	Extra       string             `json:"extra"`
	Metrics     map[string]float64 `json:"metrics,omitempty"`
	Error       string             `json:"error,omitempty"`
}

func writeJSON(path string, rs []result) error {
	out := make([]jsonResult, 0, len(rs))
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, r := range rs {
		j := jsonResult{Workload: r.Workload, Store: r.Store, N: r.N, Throughput: r.Throughput, Unit: r.Unit,
			P50ms: ms(r.P50), P99ms: ms(r.P99), WallSeconds: r.Wall.Seconds(), Extra: r.Extra, Metrics: r.Metrics}
		if r.Err != nil {
			j.Error = r.Err.Error()
		}
		out = append(out, j)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
