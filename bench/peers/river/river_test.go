package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.StopPostgres()
	os.Exit(code)
}

// TestRiverQueue runs River through each shape of the comparison at a tiny
// size and checks what the jobs table says: every job worked once and
// completed.
func TestRiverQueue(t *testing.T) {
	t.Parallel()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			url := testutil.PostgresURL(t)
			o := queueOpts{M: 300, P: 4, Publishers: c.Publishers, PublishBatch: min(c.PublishBatch, 50),
				Backlog: c.Backlog, Timeout: 2 * time.Minute, Migrate: true, FetchCooldown: time.Millisecond}
			var progress bytes.Buffer
			res, err := runRiver(context.Background(), url, o, &progress)
			if err != nil {
				t.Fatalf("runRiver: %v\n%s", err, progress.String())
			}
			if res.Metrics["completed_rows"] != 300 || res.Metrics["dup"] != 0 || res.Metrics["lost"] != 0 {
				t.Fatalf("metrics = %v, want 300 completed rows, no job run twice or never", res.Metrics)
			}
			if res.Throughput <= 0 || res.Metrics["publish_per_s"] <= 0 {
				t.Fatalf("throughput %v, insert rate %v: want both positive", res.Throughput, res.Metrics["publish_per_s"])
			}
		})
	}
}

// TestCompare builds Norn's bench from this repository and runs one tiny
// round of two cases against one server: the table must have both systems'
// figures and a ratio on every row, and the server must have counted
// transactions for both.
func TestCompare(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Norn's bench")
	}
	t.Parallel()
	admin := testutil.PostgresAdminURL(t)
	bin := filepath.Join(t.TempDir(), "nornbench")
	build := exec.Command("go", "build", "-o", bin, "./bench")
	build.Dir = filepath.Join("..", "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building Norn's bench: %v\n%s", err, out)
	}
	// The compare command runs River in a child process of the running
	// binary; a test binary cannot be that child, so build this command too.
	self := filepath.Join(t.TempDir(), "river")
	if out, err := exec.Command("go", "build", "-o", self, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the harness: %v\n%s", err, out)
	}
	jsonOut := filepath.Join(t.TempDir(), "runs.json")
	cmd := exec.Command(self, "compare", "-url", admin, "-rounds", "1", "-m", "200", "-p", "4",
		"-cases", "one4,batch", "-norn-bench", bin, "-json", jsonOut)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("compare: %v\n%s", err, stderr.String())
	}
	table := stdout.String()
	for _, want := range []string{"| one by one, 4 publishers: consumed/s |", "| same: publish/insert rate |", "| same: server transactions per message |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| one by one") && !strings.HasPrefix(line, "| batches") && !strings.HasPrefix(line, "| same: server transactions") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 4 || cells[1] == "-" || cells[2] == "-" || cells[3] == "-" || cells[1] == "0.00" || cells[2] == "0.00" {
			t.Errorf("row without both figures and a ratio: %q", line)
		}
	}
	if _, err := os.Stat(jsonOut); err != nil {
		t.Errorf("-json file: %v", err)
	}
}

func TestProcStatOfOwnProcess(t *testing.T) {
	t.Parallel()
	ppid, cpu, err := procStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if ppid != os.Getppid() || cpu < 0 {
		t.Fatalf("ppid %d (want %d), cpu %v", ppid, os.Getppid(), cpu)
	}
}

func TestMedianAndGroup(t *testing.T) {
	t.Parallel()
	if m := median([]float64{5, 1, 3}); m != 3 {
		t.Errorf("median odd = %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median even = %v", m)
	}
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 20000: "20,000", 1234567: "1,234,567", -4200: "-4,200"} {
		if got := group(n); got != want {
			t.Errorf("group(%d) = %q, want %q", n, got, want)
		}
	}
}
