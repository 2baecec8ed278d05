package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornlabs/norn/persistence/storeurl"
)

// workloadCase is one row group of the comparison: the same shape for Norn's
// queue workload and for River.
type workloadCase struct {
	Name         string
	Label        string
	Publishers   int
	PublishBatch int
	Backlog      bool
}

var cases = []workloadCase{
	{Name: "one1", Label: "one by one, 1 publisher", Publishers: 1, PublishBatch: 1},
	{Name: "one4", Label: "one by one, 4 publishers", Publishers: 4, PublishBatch: 1},
	{Name: "batch", Label: "batches of 1,000 (`PublishBatch` / `InsertMany`)", Publishers: 4, PublishBatch: 1000},
	{Name: "drain", Label: "drain of a full queue (Norn without prefetch)", Publishers: 4, PublishBatch: 1000, Backlog: true},
}

// measurement is one run of one system on one case.
type measurement struct {
	System     string  `json:"system"`
	Case       string  `json:"case"`
	Round      int     `json:"round"`
	Consumed   float64 `json:"consumed_per_s"`
	Publish    float64 `json:"publish_per_s"`
	Completed  float64 `json:"completed_per_s,omitempty"` // River: until its last durable completion
	Xacts      int64   `json:"server_xacts"`
	ServerCPU  float64 `json:"server_cpu_s"` // -1: not measurable (server not local)
	ClientCPU  float64 `json:"client_cpu_s"`
	LoadBefore float64 `json:"load1_before"`
	LoadAfter  float64 `json:"load1_after"`
	Error      string  `json:"error,omitempty"`
}

type compareOpts struct {
	AdminURL  string // a database on the server where databases may be created
	Rounds    int
	M, P      int
	NornBench string // Norn's bench binary; built from NornRoot when empty
	NornRoot  string
	Cases     []workloadCase
	Timeout   time.Duration
	JSON      string
	// FetchCooldown is passed to the River runs.
	FetchCooldown time.Duration
}

// runCompare runs Norn's queue workload and River's in interleaved rounds
// against one server, each run on a database of its own, and prints the
// medians as a Markdown table.
func runCompare(ctx context.Context, o compareOpts, out, progress io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if o.NornBench == "" {
		dir, err := os.MkdirTemp("", "norn-river-compare-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.NornBench = filepath.Join(dir, "nornbench")
		fmt.Fprintf(progress, "building Norn's bench from %s\n", o.NornRoot)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", o.NornBench, "./bench")
		cmd.Dir, cmd.Stdout, cmd.Stderr = o.NornRoot, progress, progress
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building Norn's bench: %w", err)
		}
	}
	srv, err := newServer(ctx, o.AdminURL)
	if err != nil {
		return err
	}
	defer srv.close()
	if !srv.cpuOK {
		fmt.Fprintln(progress, "server CPU: the server's processes are not readable in /proc (not on this host?): not measured")
	}

	var all []measurement
	for round := 1; round <= o.Rounds; round++ {
		for _, c := range o.Cases {
			// Alternate who goes first, so that a drift of the machine's
			// load within a round does not favour one side.
			systems := []string{"norn", "river"}
			if round%2 == 0 {
				systems = []string{"river", "norn"}
			}
			for _, sys := range systems {
				fmt.Fprintf(progress, "round %d/%d, %s, %s ...\n", round, o.Rounds, c.Label, sys)
				m := measurement{System: sys, Case: c.Name, Round: round}
				if err := runMeasured(ctx, srv, o, c, sys, self, &m, progress); err != nil {
					m.Error = err.Error()
					fmt.Fprintf(progress, "  %s failed: %v\n", sys, err)
				} else {
					completed := ""
					if m.Completed > 0 {
						completed = fmt.Sprintf(" (completed %.0f/s)", m.Completed)
					}
					fmt.Fprintf(progress, "  %s: %.0f consumed/s%s, publish %.0f/s, %d server xacts, server CPU %.2fs, client CPU %.2fs, load %.1f\n",
						sys, m.Consumed, completed, m.Publish, m.Xacts, m.ServerCPU, m.ClientCPU, m.LoadAfter)
				}
				all = append(all, m)
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	if o.JSON != "" {
		b, err := json.MarshalIndent(all, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.JSON, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	printComparison(out, o, all)
	for _, m := range all {
		if m.Error != "" {
			return errors.New("some runs failed (see above)")
		}
	}
	return nil
}

// runMeasured runs one system on one case on a fresh database, and fills m
// with what the run printed and what the server counted meanwhile.
func runMeasured(ctx context.Context, srv *server, o compareOpts, c workloadCase, sys, self string, m *measurement, progress io.Writer) error {
	db := fmt.Sprintf("nornriver_%s_%s_%d_%d", sys, c.Name, m.Round, time.Now().UnixNano()%1e6)
	dbURL, err := srv.create(ctx, db)
	if err != nil {
		return err
	}
	defer func() {
		if err := srv.drop(context.WithoutCancel(ctx), db); err != nil {
			fmt.Fprintf(progress, "  dropping %s: %v\n", db, err)
		}
	}()
	// Both schemas are created before the measured window, so that the
	// server's counters hold the workload only.
	switch sys {
	case "norn":
		st, err := storeurl.Open(ctx, dbURL)
		if err != nil {
			return fmt.Errorf("norn migrations: %w", err)
		}
		if err := st.Close(); err != nil {
			return err
		}
	case "river":
		if err := migrateRiver(ctx, dbURL); err != nil {
			return err
		}
	}
	if _, err := srv.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := srv.quiet(ctx, db); err != nil {
		return err
	}
	x0, err := srv.xacts(ctx, db)
	if err != nil {
		return err
	}
	cpu0 := srv.cpu()
	m.LoadBefore = loadAvg()

	jsonFile := filepath.Join(os.TempDir(), db+".json")
	defer os.Remove(jsonFile)
	common := []string{"-m", strconv.Itoa(o.M), "-p", strconv.Itoa(o.P),
		"-publishers", strconv.Itoa(c.Publishers), "-publish-batch", strconv.Itoa(c.PublishBatch),
		"-timeout", o.Timeout.String(), "-json", jsonFile}
	if c.Backlog {
		common = append(common, "-backlog")
	}
	var cmd *exec.Cmd
	if sys == "norn" {
		cmd = exec.CommandContext(ctx, o.NornBench, append([]string{"-workload", "queue", "-store", dbURL}, common...)...)
	} else {
		cmd = exec.CommandContext(ctx, self, append([]string{"river", "-url", dbURL, "-migrate=false", "-fetch-cooldown", o.FetchCooldown.String()}, common...)...)
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	runErr := cmd.Run()
	if cmd.ProcessState != nil {
		m.ClientCPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	}
	// The client's connections are closed; wait until their backends have
	// gone (and so reported their counts) before reading the counters.
	if err := srv.quiet(ctx, db); err != nil {
		return err
	}
	x1, err := srv.settledXacts(ctx, db)
	if err != nil {
		return err
	}
	m.Xacts = x1 - x0
	m.ServerCPU = -1
	if srv.cpuOK {
		m.ServerCPU = srv.cpu() - cpu0
	}
	m.LoadAfter = loadAvg()
	if runErr != nil {
		return fmt.Errorf("%s run: %w\n%s", sys, runErr, tail(stderr.String(), 2000))
	}
	return readResult(jsonFile, m)
}

// readResult reads the -json file both programs write: Norn's bench writes
// an array of rows, the River harness one object of the same fields.
func readResult(path string, m *measurement) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rows []queueResult
	if err := json.Unmarshal(b, &rows); err != nil {
		var one queueResult
		if err2 := json.Unmarshal(b, &one); err2 != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		rows = []queueResult{one}
	}
	if len(rows) != 1 {
		return fmt.Errorf("%s: want one result, got %d", path, len(rows))
	}
	r := rows[0]
	if r.Error != "" {
		return fmt.Errorf("run failed: %s", r.Error)
	}
	m.Consumed, m.Publish, m.Completed = r.Throughput, r.Metrics["publish_per_s"], r.Metrics["completed_per_s"]
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// server is the PostgreSQL server the runs share: an admin connection, and
// the postmaster's PID when its processes can be read from /proc.
type server struct {
	admin      *pgx.Conn
	adminURL   *url.URL
	postmaster int
	cpuOK      bool
}

func newServer(ctx context.Context, adminURL string) (*server, error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		return nil, fmt.Errorf("parsing -url: %w", err)
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", u.Redacted(), err)
	}
	s := &server{admin: conn, adminURL: u}
	var dataDir string
	if err := conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dataDir); err == nil {
		if b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid")); err == nil {
			first, _, _ := strings.Cut(string(b), "\n")
			if pid, err := strconv.Atoi(strings.TrimSpace(first)); err == nil {
				if _, err := procCPU(pid); err == nil {
					s.postmaster, s.cpuOK = pid, true
				}
			}
		}
	}
	return s, nil
}

func (s *server) close() { _ = s.admin.Close(context.Background()) }

func (s *server) create(ctx context.Context, db string) (string, error) {
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		return "", fmt.Errorf("creating database %s: %w", db, err)
	}
	u := *s.adminURL
	u.Path, u.RawPath = "/"+db, ""
	return u.String(), nil
}

func (s *server) drop(ctx context.Context, db string) error {
	_, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)")
	return err
}

// quiet waits until no backend is connected to db.
func (s *server) quiet(ctx context.Context, db string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := s.admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", db).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d backends still connected to %s", n, db)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *server) xacts(ctx context.Context, db string) (int64, error) {
	var n int64
	err := s.admin.QueryRow(ctx, "SELECT coalesce(sum(xact_commit + xact_rollback), 0)::bigint FROM pg_stat_database WHERE datname = $1", db).Scan(&n)
	return n, err
}

// settledXacts reads the counters until two reads 100 ms apart agree: a
// backend leaves pg_stat_activity a moment before it flushes its counts.
func (s *server) settledXacts(ctx context.Context, db string) (int64, error) {
	prev, err := s.xacts(ctx, db)
	if err != nil {
		return 0, err
	}
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		n, err := s.xacts(ctx, db)
		if err != nil {
			return 0, err
		}
		if n == prev {
			return n, nil
		}
		prev = n
	}
	return prev, nil
}

// cpu is the server's CPU time so far, in seconds: the postmaster's own and
// that of the children it has reaped (exited backends), plus its live
// children's.
func (s *server) cpu() float64 {
	total, err := procCPU(s.postmaster)
	if err != nil {
		return 0
	}
	total += childrenCPU(s.postmaster)
	return total
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times (100 on Linux).
const clockTicks = 100

// procStat returns ppid and utime+stime+cutime+cstime of pid, in seconds.
func procStat(pid int) (ppid int, cpu float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name may hold spaces; the fields start after its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	// f[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17.
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, err
	}
	var ticks int64
	for _, s := range f[11:15] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		ticks += v
	}
	return ppid, float64(ticks) / clockTicks, nil
}

func procCPU(pid int) (float64, error) {
	_, cpu, err := procStat(pid)
	return cpu, err
}

func childrenCPU(parent int) float64 {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var total float64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, cpu, err := procStat(pid); err == nil && ppid == parent {
			total += cpu
		}
	}
	return total
}

// loadAvg is the machine's one-minute load average (0 if unreadable).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// printComparison writes the medians over the successful rounds as one
// Markdown table, Norn against River.
func printComparison(w io.Writer, o compareOpts, all []measurement) {
	pick := func(sys, c string, f func(measurement) float64) (float64, int) {
		var vs []float64
		for _, m := range all {
			if m.System == sys && m.Case == c && m.Error == "" {
				vs = append(vs, f(m))
			}
		}
		return median(vs), len(vs)
	}
	var loads []float64
	for _, m := range all {
		loads = append(loads, m.LoadBefore, m.LoadAfter)
	}
	fmt.Fprintf(w, "| %s messages/jobs, %d consumers/workers (medians of %d rounds) | Norn PG | River PG | Norn/River |\n",
		group(o.M), o.P, o.Rounds)
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	row := func(label string, c workloadCase, f func(measurement) float64, unit string, decimals int) {
		n, nn := pick("norn", c.Name, f)
		r, rn := pick("river", c.Name, f)
		if nn == 0 || rn == 0 || n < 0 || r < 0 {
			fmt.Fprintf(w, "| %s | %s | %s | - |\n", label, cell(n, nn, unit, decimals), cell(r, rn, unit, decimals))
			return
		}
		ratio := "-"
		if r != 0 {
			ratio = fmt.Sprintf("%.2f", n/r)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", label, cell(n, nn, unit, decimals), cell(r, rn, unit, decimals), ratio)
	}
	perMsg := func(m measurement) float64 { return float64(m.Xacts) / float64(o.M) }
	for _, c := range o.Cases {
		row(c.Label+": consumed/s", c, func(m measurement) float64 { return m.Consumed }, "", 0)
		if c.PublishBatch > 1 && !c.Backlog {
			row("same: publish/insert rate", c, func(m measurement) float64 { return m.Publish }, " /s", 0)
		}
		row("same: server transactions per message", c, perMsg, "", 2)
		row("same: server CPU", c, func(m measurement) float64 { return m.ServerCPU }, " s", 2)
		row("same: client process CPU", c, func(m measurement) float64 { return m.ClientCPU }, " s", 2)
	}
	fmt.Fprintf(w, "\nLoad average (1 min) around the runs: %.1f–%.1f. Server CPU and transactions: the whole run's (inserts, work, completion, the check at the end), schema migrations excluded.\n",
		slices.Min(append(loads, 1e9)), slices.Max(append(loads, 0)))
}

func cell(v float64, n int, unit string, decimals int) string {
	if n == 0 || v < 0 {
		return "-"
	}
	if decimals == 0 {
		return group(int(v+0.5)) + unit
	}
	return strconv.FormatFloat(v, 'f', decimals, 64) + unit
}

// group formats n with thousands separators.
func group(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
