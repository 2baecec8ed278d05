// Command river is the River peer harness of Norn's bench: it runs River's
// client (github.com/riverqueue/river) through the shape of Norn's queue
// workload, and compares the two on one PostgreSQL server.
//
//	go run . compare -url postgres://postgres@127.0.0.1:5432/postgres
//	go run . river -url postgres://postgres@127.0.0.1:5432/emptydb -m 20000 -publishers 4
//
// It is a module of its own so that Norn's users do not get River as a
// dependency. See README.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage:
  river compare -url ADMIN_URL [-rounds 5] [-m 20000] [-p 8] [-cases one1,one4,batch,drain] [-norn-root ../../..] [-json FILE]
  river river -url DB_URL [-m 20000] [-p 8] [-publishers 4] [-publish-batch 1] [-backlog] [-fast] [-fetch-cooldown 1ms] [-json FILE]

Run "river compare -h" or "river river -h" for the flags.`)
}

func run(args []string) int {
	if len(args) == 0 {
		usage()
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "river":
		return runRiverCmd(ctx, args[1:])
	case "compare":
		return runCompareCmd(ctx, args[1:])
	default:
		usage()
		return 2
	}
}

func runRiverCmd(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("river", flag.ContinueOnError)
	dbURL := fs.String("url", "", "postgres:// URL of the database (River's migrations are run unless -migrate=false)")
	var o queueOpts
	fs.IntVar(&o.M, "m", 20000, "jobs")
	fs.IntVar(&o.P, "p", 8, "workers (MaxWorkers of the queue)")
	fs.IntVar(&o.Publishers, "publishers", 4, "inserting goroutines")
	fs.IntVar(&o.PublishBatch, "publish-batch", 1, "jobs per InsertMany (1: Insert one by one)")
	fs.BoolVar(&o.Backlog, "backlog", false, "insert every job before the client starts (measures draining)")
	fs.BoolVar(&o.Fast, "fast", false, "with -publish-batch > 1: InsertManyFast (COPY) instead of InsertMany")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "bound of the consumption wait")
	fs.BoolVar(&o.Migrate, "migrate", true, "run River's migrations first")
	fs.DurationVar(&o.FetchCooldown, "fetch-cooldown", time.Millisecond, "River's Config.FetchCooldown (River's default is 100ms, which caps P workers at 10·P jobs/s; 1ms is its minimum)")
	jsonOut := fs.String("json", "", "also write the result as JSON to this file")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return 2
	}
	if !strings.HasPrefix(*dbURL, "postgres://") && !strings.HasPrefix(*dbURL, "postgresql://") {
		fmt.Fprintln(os.Stderr, "river: -url must be a postgres:// URL")
		return 2
	}
	if o.M <= 0 || o.P <= 0 || o.Publishers <= 0 || o.PublishBatch <= 0 || o.Timeout <= 0 || o.FetchCooldown < time.Millisecond {
		fmt.Fprintln(os.Stderr, "river: -m, -p, -publishers, -publish-batch and -timeout must be positive, -fetch-cooldown at least 1ms")
		return 2
	}
	res, err := runRiver(ctx, *dbURL, o, os.Stderr)
	if err != nil {
		res.Error = err.Error()
	}
	fmt.Printf("river: %d jobs, %.0f worked/s, p50 %.1f ms, p99 %.1f ms; %s\n", o.M, res.Throughput, res.P50ms, res.P99ms, res.Extra)
	if *jsonOut != "" {
		b, jerr := json.MarshalIndent(res, "", "  ")
		if jerr == nil {
			jerr = os.WriteFile(*jsonOut, append(b, '\n'), 0o644)
		}
		if jerr != nil {
			fmt.Fprintln(os.Stderr, "river:", jerr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "river:", err)
		return 1
	}
	return 0
}

func runCompareCmd(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	var o compareOpts
	fs.StringVar(&o.AdminURL, "url", "", "postgres:// URL of a database on the server, as a role that may CREATE and DROP databases (each run gets a fresh database)")
	fs.IntVar(&o.Rounds, "rounds", 5, "interleaved rounds (the table has the medians)")
	fs.IntVar(&o.M, "m", 20000, "messages/jobs per run")
	fs.IntVar(&o.P, "p", 8, "consumers/workers")
	names := fs.String("cases", "one1,one4,batch,drain", "workloads: one1 (one by one, 1 publisher), one4 (4 publishers), batch (batches of 1,000), drain (a full queue)")
	fs.StringVar(&o.NornRoot, "norn-root", "../../..", "Norn's repository, whose ./bench is built and run")
	fs.StringVar(&o.NornBench, "norn-bench", "", "a built Norn bench binary to run instead of building -norn-root's")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "bound of each run's consumption wait")
	fs.StringVar(&o.JSON, "json", "", "also write every run's figures as JSON to this file")
	fs.DurationVar(&o.FetchCooldown, "fetch-cooldown", time.Millisecond, "River's Config.FetchCooldown (see river -h)")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return 2
	}
	if !strings.HasPrefix(o.AdminURL, "postgres://") && !strings.HasPrefix(o.AdminURL, "postgresql://") {
		fmt.Fprintln(os.Stderr, "compare: -url must be a postgres:// URL")
		return 2
	}
	if o.Rounds <= 0 || o.M <= 0 || o.P <= 0 || o.Timeout <= 0 || o.FetchCooldown < time.Millisecond {
		fmt.Fprintln(os.Stderr, "compare: -rounds, -m, -p and -timeout must be positive, -fetch-cooldown at least 1ms")
		return 2
	}
	for _, n := range strings.Split(*names, ",") {
		found := false
		for _, c := range cases {
			if c.Name == strings.TrimSpace(n) {
				o.Cases, found = append(o.Cases, c), true
			}
		}
		if !found {
			fmt.Fprintf(os.Stderr, "compare: unknown case %q (want one1, one4, batch, drain)\n", n)
			return 2
		}
	}
	if err := runCompare(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	return 0
}
