package cli_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/cli"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// A store path that is a directory, or a file that does not exist, names
// the SQLite files that are there (the examples write norn-data/norn.db).
func TestStorePathErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"orders.db", "saga.db"} {
		norn(t, nil, "migrate", "--store", filepath.Join(dir, name)).ok(t)
	}
	r := norn(t, []string{cli.StoreEnv + "=" + dir}, "ls")
	if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "is a directory") ||
		!strings.Contains(r.stderr, filepath.Join(dir, "orders.db")) || !strings.Contains(r.stderr, filepath.Join(dir, "saga.db")) {
		t.Errorf("ls on a directory: exit %d, stderr %q", r.code, r.stderr)
	}
	missing := filepath.Join(dir, "norn.db")
	r = norn(t, []string{cli.StoreEnv + "=" + missing}, "ls")
	if r.code != cli.ExitFailure || !strings.Contains(r.stderr, missing+" does not exist") || !strings.Contains(r.stderr, filepath.Join(dir, "orders.db")) {
		t.Errorf("ls on a missing file: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ls created %s: %v", missing, err)
	}
}

// No command but migrate creates a schema, on either store: on an empty
// database they fail alike, and the database stays empty.
func TestReadCommandsCreateNoSchema(t *testing.T) {
	t.Parallel()
	empty := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, u := range map[string]string{"sqlite": empty, "postgres": testutil.PostgresURL(t)} {
		for _, args := range [][]string{{"ls"}, {"show", "x"}, {"channels"}, {"send", "x", "{}"}, {"cancel", "x"}, {"version"}} {
			r := norn(t, []string{cli.StoreEnv + "=" + u}, args...)
			if r.code != cli.ExitFailure || !strings.Contains(r.stderr, "holds no Norn schema") || !strings.Contains(r.stderr, "migrate") {
				t.Errorf("%s: norn %v on an empty database: exit %d, stderr %q", name, args, r.code, r.stderr)
			}
		}
		if _, err := storeurl.OpenExisting(testutil.Ctx(t, time.Minute), u); !errors.Is(err, persistence.ErrNoSchema) {
			t.Errorf("%s: after the commands the database has a schema (%v)", name, err)
		}
	}
}

// Errors name the program once ("norn: "), however deep the runtime's own
// "norn: " was wrapped, and bad arguments exit 2 with nothing done.
func TestErrorPaths(t *testing.T) {
	t.Parallel()
	url := filepath.Join(t.TempDir(), "norn.db")
	norn(t, nil, "migrate", "--store", url).ok(t)
	env := []string{cli.StoreEnv + "=" + url}
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"publish", "", "1"}, cli.ExitUsage, "publish needs a channel name"},
		{[]string{"publish", "jobs\n", "1"}, cli.ExitUsage, "channel: contains a control character"},
		{[]string{"publish", "jobs", "1", "--meta", "k=" + strings.Repeat("x", 5000)}, cli.ExitUsage, "--meta k: 5000 bytes long"},
		{[]string{"send", "a\tb", "{}"}, cli.ExitUsage, "instance ID: contains a control character (U+0009 at byte 1)"},
		{[]string{"send", "x", "chan\x1b", "{}"}, cli.ExitUsage, "channel: contains a control character"},
		{[]string{"send", "x", "{}", "--id", "m\n1"}, cli.ExitUsage, "--id: contains a control character"},
		{[]string{"send", "x", "{\"a\":\n 1,}"}, cli.ExitUsage, "line 2, column 4, byte offset 9"},
		{[]string{"publish", "jobs", "{\"a\": [1, 2"}, cli.ExitUsage, "at the end: line 1, column 12"},
		{[]string{"publish", "jobs", "@" + filepath.Join(t.TempDir(), "none.json")}, cli.ExitUsage, "read message"},
		{[]string{"show", "a\nb"}, cli.ExitUsage, "contains a control character"},
		{[]string{"history", "a\rb"}, cli.ExitUsage, "contains a control character"},
		{[]string{"mailbox", ""}, cli.ExitUsage, "mailbox takes one instance ID"},
		{[]string{"timers", "x\x7f"}, cli.ExitUsage, "contains a control character"},
		{[]string{"cancel", "ok", "a\nb"}, cli.ExitUsage, "contains a control character"},
		{[]string{"cancel", ""}, cli.ExitUsage, "the instance ID is empty"},
		{[]string{"cancel", "x", "--reason", strings.Repeat("r", 5000)}, cli.ExitUsage, "--reason"},
		{[]string{"ls", "--workflow", "a\tb"}, cli.ExitUsage, "--workflow: contains a control character"},
		{[]string{"ls", "--parent", "p\n"}, cli.ExitUsage, "--parent: contains a control character"},
		{[]string{"ls", "--input", "item"}, cli.ExitUsage, `"item" is not field=value`},
		{[]string{"ls", "--input", "a..b=1"}, cli.ExitUsage, "field names separated by dots"},
		{[]string{"start", "order", "{}"}, cli.ExitUsage, "no workflow code"},
		{[]string{"version", "extra"}, cli.ExitUsage, "version takes no arguments"},
		{[]string{"viewer", "--actions", "--addr", "0.0.0.0:0"}, cli.ExitUsage, "--actions without a token only on a loopback address"},
		{[]string{"viewer", "--actions", "--addr", ":0"}, cli.ExitUsage, "--actions without a token only on a loopback address"},
		{[]string{"show", "nope"}, cli.ExitNotFound, "show nope: instance not found"},
		{[]string{"send", "nope", "{}"}, cli.ExitNotFound, "instance not found"},
	} {
		r := norn(t, env, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.stderr) || r.stdout != "" && c.args[0] != "cancel" {
			t.Errorf("norn %q: exit %d, stderr %q, stdout %q; want exit %d and %q", c.args, r.code, r.stderr, r.stdout, c.code, c.stderr)
		}
		if first := strings.SplitN(r.stderr, "\n", 2)[0]; strings.Count(r.stderr, "norn:") != 1 || !strings.HasPrefix(first, "norn: ") {
			t.Errorf("norn %q: stderr names norn other than once, first:\n%s", c.args, r.stderr)
		}
	}
}

// The ls and show tables say their times are UTC, and a time copied from
// them is accepted back by the filters.
func TestTimesShowTheirZone(t *testing.T) {
	t.Parallel()
	url := filepath.Join(t.TempDir(), "norn.db")
	seed(t, url)
	env := []string{cli.StoreEnv + "=" + url}
	stamp := regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC`)
	for _, args := range [][]string{{"ls"}, {"show", "order-2"}, {"history", "order-2"}, {"mailbox", "order-2"}, {"timers", "order-2"}, {"channels"}} {
		out := norn(t, env, args...).ok(t).stdout
		if !stamp.MatchString(out) {
			t.Errorf("norn %v shows no time with its zone:\n%s", args, out)
		}
	}
	show := norn(t, env, "show", "order-4").ok(t).stdout
	created := stamp.FindString(show[strings.Index(show, "Created:"):])
	since := lsJSON(t, env, "--workflow", "order", "--since", created)
	before := lsJSON(t, env, "--workflow", "order", "--before", created)
	if len(since.Instances) == 0 || since.Instances[0].ID != "order-4" {
		t.Errorf("ls --since %q (order-4's creation, as shown) lacks order-4", created)
	}
	for _, in := range before.Instances {
		if in.ID == "order-4" {
			t.Errorf("ls --before %q (order-4's creation, as shown) has order-4", created)
		}
	}
}

// version prints the module version (never "(devel)") and the store's
// schema version labelled with its driver.
func TestVersion(t *testing.T) {
	t.Parallel()
	r := norn(t, []string{cli.StoreEnv + "="}, "version").ok(t)
	if !regexp.MustCompile(`^norn (v\d+\.\d+\.\d+\S*|devel( [0-9a-f]{12}(-dirty)?( \(\S+\))?)?)\n$`).MatchString(r.stdout) {
		t.Errorf("version: %q", r.stdout)
	}
	for name, u := range map[string]string{"sqlite": filepath.Join(t.TempDir(), "v.db"), "postgres": testutil.PostgresURL(t)} {
		norn(t, nil, "migrate", "--store", u).ok(t)
		r := norn(t, []string{cli.StoreEnv + "=" + u}, "version").ok(t)
		if !regexp.MustCompile(`\nstore: ` + name + ` schema \d+ \(`).MatchString(r.stdout) {
			t.Errorf("version with a %s store:\n%s", name, r.stdout)
		}
		var out struct {
			Norn  string
			Store struct {
				Driver        string
				SchemaVersion int `json:"schema_version"`
			}
		}
		r = norn(t, []string{cli.StoreEnv + "=" + u}, "version", "--json").ok(t)
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Store.Driver != name || out.Store.SchemaVersion < 5 || out.Norn == "" {
			t.Errorf("version --json with %s: %+v, %v", name, out, err)
		}
	}
}

// start, in a build with the workflows, starts an instance that a node
// then runs; with --id a second start reports the instance and starts
// nothing.
func TestStart(t *testing.T) {
	t.Parallel()
	url := filepath.Join(t.TempDir(), "norn.db")
	norn(t, nil, "migrate", "--store", url).ok(t)
	env := []string{cli.StoreEnv + "=" + url, workflowsEnv + "=v1"}
	bin := os.Args[0]

	r := run(t, bin, env, "start", "order", `{"item": "pen", "qty": 1}`, "--id", "o-9").ok(t)
	if r.stdout != "started o-9 (order)\n" {
		t.Errorf("start: %q", r.stdout)
	}
	r = run(t, bin, env, "start", "--json", "order", `{"item": "ink", "qty": 7}`, "--id", "o-9").ok(t)
	var again struct {
		ID, Workflow string
		Existed      bool
	}
	if err := json.Unmarshal([]byte(r.stdout), &again); err != nil || !again.Existed || again.ID != "o-9" || again.Workflow != "order" {
		t.Errorf("second start of o-9: %q (%v)", r.stdout, err)
	}
	r = run(t, bin, env, "start", "order", `{"item": "cup", "qty": 1}`).ok(t)
	if !strings.HasPrefix(r.stdout, "started order-") {
		t.Errorf("start without --id: %q", r.stdout)
	}
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"start", "ordr", "{}"}, cli.ExitUsage, `unknown workflow "ordr" (this build has batch, item, order)`},
		{[]string{"start", "order", "{\"item\": \"pen\",\n\"qty\": }"}, cli.ExitUsage, "the input is not valid JSON: invalid character '}' looking for beginning of value (line 2, column 8"},
		{[]string{"start", "order", `{"item": "pen", "qty": "two"}`}, cli.ExitUsage, "the input does not fit workflow order"},
		{[]string{"start", "order", `{"itme": "pen"}`}, cli.ExitUsage, `unknown field "itme"`},
		{[]string{"start", "order", "{}", "--id", "o\n1"}, cli.ExitUsage, "--id: contains a control character"},
		{[]string{"start", "batch", `["a"]`, "--id", "o-9"}, cli.ExitFailure, `belongs to an instance of workflow "order"`},
		{[]string{"start", "order"}, cli.ExitUsage, "start takes WORKFLOW JSON"},
	} {
		r := run(t, bin, env, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.stderr) || strings.Count(r.stderr, "norn:") != 1 {
			t.Errorf("norn %q: exit %d, stderr %q; want exit %d and %q", c.args, r.code, r.stderr, c.code, c.stderr)
		}
	}
	if r := run(t, bin, env, "start", "order", `{"item": "pen", "qty": "two"}`); !strings.Contains(r.stderr, "byte offset") {
		t.Errorf("a type error gives no position: %q", r.stderr)
	}

	// A node runs what start created.
	ctx := testutil.Ctx(t, time.Minute)
	st, err := storeurl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(orderFlow, batchFlow, itemFlow)})
	out, err := actor.Await(ctx, sys, orderFlow, "o-9")
	if err != nil || out.Total != 5 {
		t.Fatalf("o-9 ran to %+v, %v; want the first start's input (total 5)", out, err)
	}
	if page := lsJSON(t, env[:1], "--workflow", "order"); len(page.Instances) != 2 {
		t.Errorf("two starts created %d instances", len(page.Instances))
	}
}
