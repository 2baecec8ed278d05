package cli_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/cli"
	"github.com/nornlabs/norn/internal/testutil"
)

type purgeOut struct {
	DryRun   bool `json:"dry_run"`
	Selected []struct {
		Status string
		Count  int
	}
	Count int
}

func purgeJSON(t *testing.T, env []string, args ...string) purgeOut {
	t.Helper()
	r := norn(t, env, append([]string{"purge", "--json"}, args...)...).ok(t)
	var out purgeOut
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("purge %v --json: %v\n%s", args, err, r.stdout)
	}
	return out
}

// lsIDs lists every instance's ID, newest first.
func lsIDs(t *testing.T, env []string) []string {
	t.Helper()
	var ids []string
	for _, in := range lsJSON(t, env, "--all").Instances {
		ids = append(ids, in.ID)
	}
	return ids
}

func TestPurgeSQLite(t *testing.T) {
	t.Parallel()
	url := filepath.Join(t.TempDir(), "norn.db")
	seed(t, url)
	purgeCommands(t, url)
}

func TestPurgePostgres(t *testing.T) {
	t.Parallel()
	url := testutil.PostgresURL(t)
	seed(t, url)
	purgeCommands(t, url)
}

// purgeCommands purges the seeded store step by step: ended instances go
// by the filters given, the waiting ones stay whatever is asked.
func purgeCommands(t *testing.T, url string) {
	env := []string{cli.StoreEnv + "=" + url}
	all := lsIDs(t, env)
	if len(all) != 7 {
		t.Fatalf("seeded instances = %v", all)
	}
	// Everything ended a moment ago: an hour's cut-off selects nothing.
	if out := purgeJSON(t, env, "--older-than", "1h", "--dry-run"); !out.DryRun || out.Count != 0 {
		t.Fatalf("dry run with an hour's cut-off: %+v", out)
	}
	out := purgeJSON(t, env, "--older-than", "1ms", "--status", "failed", "--dry-run")
	if out.Count != 1 || len(out.Selected) != 1 || out.Selected[0].Status != "failed" || out.Selected[0].Count != 1 {
		t.Fatalf("dry run of failed ones: %+v", out)
	}
	r := norn(t, env, "purge", "--older-than", "1ms", "--workflow", "order", "--dry-run").ok(t)
	if lines := trimLines(r.stdout); len(lines) != 4 || !strings.HasPrefix(lines[0], "completed  1") ||
		!strings.HasPrefix(lines[1], "failed     1") || !strings.HasPrefix(lines[2], "cancelled  0") ||
		!strings.HasPrefix(lines[3], "would purge 2 instances that ended before ") {
		t.Fatalf("dry run table:\n%s", r.stdout)
	}
	if got := lsIDs(t, env); !slices.Equal(got, all) {
		t.Fatalf("a dry run purged: %v left of %v", got, all)
	}

	// The orders that ended: order-1 (completed) and order-3 (failed).
	r = norn(t, env, "purge", "--older-than", "1ms", "--workflow", "order", "--fast").ok(t)
	if !strings.HasPrefix(r.stdout, "purged 2 instances that ended before ") || strings.Contains(r.stderr, "[") {
		t.Fatalf("purge of orders: stdout %q stderr %q (no bar off a terminal)", r.stdout, r.stderr)
	}
	if r := norn(t, env, "show", "order-1"); r.code != cli.ExitNotFound {
		t.Fatalf("show of a purged instance: exit %d, stderr %q", r.code, r.stderr)
	}
	// The rest that ended: batch-1 and its two children, with --before.
	if out := purgeJSON(t, env, "--before", time.Now().UTC().Format(time.RFC3339Nano)); out.Count != 3 {
		t.Fatalf("purge of the rest: %+v", out)
	}
	// The waiting orders stay, however old the cut-off says they are.
	if got := lsIDs(t, env); !slices.Equal(got, []string{"order-4", "order-2"}) {
		t.Fatalf("after purging: %v, want the waiting orders", got)
	}
	if out := purgeJSON(t, env, "--older-than", "1ms"); out.Count != 0 {
		t.Fatalf("second purge: %+v", out)
	}
	r = norn(t, env, "show", "--json", "order-2").ok(t)
	if !strings.Contains(r.stdout, `"waiting"`) {
		t.Fatalf("order-2 after the purges:\n%s", r.stdout)
	}
}

// TestPurgeUsage: a purge without a clear cut-off, with a live status or
// with arguments is refused with exit 2, before anything is opened.
func TestPurgeUsage(t *testing.T) {
	t.Parallel()
	url := filepath.Join(t.TempDir(), "norn.db")
	norn(t, nil, "migrate", "--store", url).ok(t)
	env := []string{cli.StoreEnv + "=" + url}
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{nil, "give a cut-off"},
		{[]string{"--older-than", "1h", "--before", "2020-01-01"}, "not both"},
		{[]string{"--older-than", "soon"}, "--older-than"},
		{[]string{"--older-than", "-5m"}, "positive"},
		{[]string{"--older-than", "0s"}, "positive"},
		{[]string{"--older-than", "1.5d"}, "whole number of days"},
		{[]string{"--before", "yesterday"}, "--before"},
		{[]string{"--before", "2999-01-01"}, "in the future"},
		{[]string{"--older-than", "1h", "--status", "running"}, "live instances are never purged"},
		{[]string{"--older-than", "1h", "--status", "completed,waiting"}, `"waiting" is not an ended status`},
		{[]string{"--older-than", "1h", "order-1"}, "takes no arguments"},
		{[]string{"--older-than", "1h", "--workflow", strings.Repeat("w", 300)}, "Workflow"},
	} {
		r := norn(t, env, append([]string{"purge"}, c.args...)...)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, c.stderr) || r.stdout != "" {
			t.Errorf("purge %v: exit %d, stderr %q, stdout %q; want exit 2 and %q", c.args, r.code, r.stderr, r.stdout, c.stderr)
		}
	}
	// 30d is a cut-off in days.
	if r := norn(t, env, "purge", "--older-than", "30d", "--dry-run").ok(t); !strings.HasPrefix(r.stdout, "completed  0") {
		t.Errorf("purge --older-than 30d --dry-run:\n%s", r.stdout)
	}
	r := norn(t, nil, "help").ok(t)
	if !strings.Contains(r.stdout, "\n  purge ") {
		t.Errorf("help does not list purge:\n%s", r.stdout)
	}
	if r := norn(t, nil, "help", "purge").ok(t); !strings.Contains(r.stdout, "-older-than") || !strings.Contains(r.stdout, "-dry-run") {
		t.Errorf("help purge:\n%s", r.stdout)
	}
}

// TestPurgeProgressBar runs a purge in process with stderr taken for a
// terminal: a bar is drawn and ends at the total.
func TestPurgeProgressBar(t *testing.T) {
	t.Parallel()
	url := filepath.Join(t.TempDir(), "norn.db")
	seed(t, url)
	var stdout, stderr strings.Builder
	tty := true
	code := cli.Run(testutil.Ctx(t, time.Minute), []string{"purge", "--store", url, "--older-than", "1ms"},
		cli.Options{Stdout: &stdout, Stderr: &stderr, StderrIsTerminal: &tty})
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.HasPrefix(stderr.String(), "\rpurging [") || !strings.HasSuffix(stderr.String(), "[##############################] 5/5\n") {
		t.Errorf("progress on a terminal: %q", stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "purged 5 instances") {
		t.Errorf("counts: %q", stdout.String())
	}
}
