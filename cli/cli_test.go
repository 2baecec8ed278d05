package cli_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/cli"
	"github.com/nornlabs/norn/internal/clusternode"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/norntest/historyfile"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
)

func TestCommandsSQLite(t *testing.T) {
	url := filepath.Join(t.TempDir(), "norn.db")
	seed(t, url)
	commands(t, url)
}

func TestCommandsPostgres(t *testing.T) {
	url := testutil.PostgresURL(t)
	seed(t, url)
	commands(t, url)
}

// commands runs the read and write commands against a seeded store. The
// tables are the same on both stores, so they share their golden files.
func commands(t *testing.T, url string) {
	env := []string{cli.StoreEnv + "=" + url}

	t.Run("ls", func(t *testing.T) {
		golden(t, "ls", norn(t, env, "ls").ok(t).stdout)

		page := lsJSON(t, env, "--status", "waiting,failed")
		var ids []string
		for _, in := range page.Instances {
			ids = append(ids, in.ID+":"+in.Status)
			if in.Workflow != "order" || in.CreatedAt.IsZero() || in.HistoryLen == 0 {
				t.Errorf("ls --json row %+v", in)
			}
		}
		if want := []string{"order-4:waiting", "order-3:failed", "order-2:waiting"}; !slices.Equal(ids, want) {
			t.Errorf("ls --status waiting,failed = %v, want %v", ids, want)
		}
		var in Order
		if err := json.Unmarshal(page.Instances[0].Input, &in); err != nil || in != (Order{Item: "ink", Qty: 2}) ||
			page.Instances[1].Error == "" || page.Next != "" {
			t.Errorf("ls --json: input %s, error %q, next %q", page.Instances[0].Input, page.Instances[1].Error, page.Next)
		}

		// Pages: two rows, then the rest from the token.
		page = lsJSON(t, env, "--workflow", "order", "--limit", "2")
		if len(page.Instances) != 2 || page.Next == "" {
			t.Fatalf("ls --limit 2: %d rows, next %q", len(page.Instances), page.Next)
		}
		page = lsJSON(t, env, "--workflow", "order", "--limit", "2", "--page", page.Next)
		if len(page.Instances) != 2 || page.Instances[0].ID != "order-2" || page.Next != "" {
			t.Fatalf("second page: %+v, next %q", page.Instances, page.Next)
		}
		if all := lsJSON(t, env, "--workflow", "order", "--limit", "1", "--all"); len(all.Instances) != 4 || all.Next != "" {
			t.Errorf("ls --all --limit 1: %d instances, next %q", len(all.Instances), all.Next)
		}
		if r := norn(t, env, "ls", "--page", "garbage!"); r.code != cli.ExitUsage {
			t.Errorf("ls with a bad page token: exit %d, stderr %q", r.code, r.stderr)
		}

		// The other filters.
		for _, c := range []struct {
			args []string
			want []string
		}{
			{[]string{"--input", "item=pen"}, []string{"order-2"}},
			// The viewer's form: pairs separated by commas, all of which hold.
			{[]string{"--input", "item=pen,qty=3"}, []string{"order-2"}},
			{[]string{"--input", "item=pen, qty=2"}, nil},
			{[]string{"--input", "qty=2", "--input", "item=ink"}, []string{"order-4"}},
			{[]string{"--input", "qty=1", "--workflow", "order"}, []string{"order-3", "order-1"}},
			{[]string{"--workflow", "order", "--since", "1h"}, []string{"order-4", "order-3", "order-2", "order-1"}},
			{[]string{"--workflow", "order", "--before", "1h"}, nil},
			{[]string{"--workflow", "order", "--updated-since", "2000-01-01", "--status", "completed"}, []string{"order-1"}},
			{[]string{"--parent", "batch-1", "--since", "1h", "--workflow", "item"}, []string{"batch-1/child:2", "batch-1/child:1"}},
		} {
			var ids []string
			for _, in := range lsJSON(t, env, c.args...).Instances {
				ids = append(ids, in.ID)
			}
			if !slices.Equal(ids, c.want) {
				t.Errorf("ls %v = %v, want %v", c.args, ids, c.want)
			}
		}
		kids := lsJSON(t, env, "--parent", "batch-1")
		if len(kids.Instances) != 2 || kids.Instances[0].ID != "batch-1/child:2" || kids.Instances[1].Status != "completed" {
			t.Errorf("ls --parent batch-1: %+v", kids.Instances)
		}
		r := norn(t, env, "ls", "--workflow", "order", "--limit", "3").ok(t)
		if len(trimLines(r.stdout)) != 4 || !strings.Contains(r.stderr, "more: --page ") {
			t.Errorf("ls --limit 3 table:\n%s\nstderr: %s", r.stdout, r.stderr)
		}
	})

	t.Run("show", func(t *testing.T) {
		golden(t, "show", norn(t, env, "show", "order-2").ok(t).stdout)
		var info struct {
			ID            string
			Status        string
			Output        struct{ Total int }
			MailboxDepth  int `json:"mailbox_depth"`
			Subscriptions []struct{ Channel, Mode string }
			Timers        []struct{ Kind string }
			Children      []string
			Waits         []actor.Wait
		}
		r := norn(t, env, "show", "--json", "order-1").ok(t)
		if err := json.Unmarshal([]byte(r.stdout), &info); err != nil {
			t.Fatal(err)
		}
		if info.Status != "completed" || info.Output.Total != 5 {
			t.Errorf("show order-1 --json: %+v", info)
		}
		r = norn(t, env, "show", "order-4", "--json").ok(t)
		if err := json.Unmarshal([]byte(r.stdout), &info); err != nil {
			t.Fatal(err)
		}
		if info.MailboxDepth != 1 || len(info.Subscriptions) != 1 || info.Subscriptions[0].Mode != "broadcast" ||
			len(info.Timers) != 1 || info.Timers[0].Kind != "receive" {
			t.Errorf("show order-4 --json: %+v", info)
		}
		// What it waits for, read from the store by a command that does not
		// have the workflow's code.
		if len(info.Waits) != 1 || info.Waits[0].Kind != actor.WaitReceive || !slices.Contains(info.Waits[0].Types, "cli_test.Approval") ||
			info.Waits[0].Due.IsZero() {
			t.Errorf("show order-4 --json: waits %+v", info.Waits)
		}
		var batch struct{ Children []string }
		r = norn(t, env, "show", "batch-1", "--json").ok(t)
		if err := json.Unmarshal([]byte(r.stdout), &batch); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(batch.Children, []string{"batch-1/child:2", "batch-1/child:1"}) {
			t.Errorf("show batch-1 --json: children %v", batch.Children)
		}
	})

	t.Run("history", func(t *testing.T) {
		golden(t, "history", norn(t, env, "history", "order-3").ok(t).stdout)
		var events []struct {
			Seq     int64
			Kind    string
			Name    string
			Payload json.RawMessage
			Error   string
		}
		r := norn(t, env, "history", "order-1", "--json").ok(t)
		if err := json.Unmarshal([]byte(r.stdout), &events); err != nil {
			t.Fatal(err)
		}
		if len(events) < 3 || events[0].Kind != "started" || events[1].Kind != "activity" || events[1].Name != "price" ||
			string(events[1].Payload) != "5" || events[len(events)-1].Kind != "completed" {
			t.Errorf("history order-1 --json: %+v", events)
		}
		r = norn(t, env, "history", "order-1", "--after", "0", "--limit", "1", "--json").ok(t)
		if err := json.Unmarshal([]byte(r.stdout), &events); err != nil {
			t.Fatal(err)
		}
		if len(events) != 1 || events[0].Seq != 1 {
			t.Errorf("history --after 0 --limit 1: %+v", events)
		}
		// --export writes a history file that replays against the code
		// that wrote it and not against code that changed the calls.
		r = norn(t, env, "history", "--export", "order-1").ok(t)
		f, err := historyfile.Read(strings.NewReader(r.stdout))
		if err != nil {
			t.Fatalf("history --export: %v\n%s", err, r.stdout)
		}
		if f.Instance != "order-1" || f.Workflow != "order" || len(f.Events) < 3 || f.Events[0].Kind != "started" {
			t.Errorf("history --export: %+v", f)
		}
		if err := actor.Replay(t.Context(), orderFlow, f.History()); err != nil {
			t.Errorf("replay of the exported history: %v", err)
		}
		var nd *actor.NonDeterminismError
		if err := actor.Replay(t.Context(), orderFlowV2, f.History()); !errors.As(err, &nd) {
			t.Errorf("replay of the exported history by changed code = %v, want a *NonDeterminismError", err)
		}
		if r := norn(t, env, "history", "--export", "--limit", "2", "order-1"); r.code != cli.ExitUsage {
			t.Errorf("history --export --limit: exit %d, want %d (%s)", r.code, cli.ExitUsage, r.stderr)
		}
	})

	t.Run("mailbox", func(t *testing.T) {
		golden(t, "mailbox", norn(t, env, "mailbox", "order-2").ok(t).stdout)
		var msgs []struct {
			ID, Channel, Type string
			Payload           string
			Queued            bool
			Unmatched         bool
		}
		r := norn(t, env, "mailbox", "order-4", "--json").ok(t)
		if err := json.Unmarshal([]byte(r.stdout), &msgs); err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 1 || msgs[0].ID != "news-1" || msgs[0].Channel != "news" || msgs[0].Payload != "hello" || msgs[0].Queued ||
			!msgs[0].Unmatched {
			t.Errorf("mailbox order-4 --json: %+v", msgs)
		}
	})

	t.Run("timers", func(t *testing.T) {
		golden(t, "timers", norn(t, env, "timers", "order-2").ok(t).stdout)
		var timers []struct {
			ID, Kind, Name string
			Due            time.Time
		}
		r := norn(t, env, "timers", "order-4", "--json").ok(t)
		if err := json.Unmarshal([]byte(r.stdout), &timers); err != nil {
			t.Fatal(err)
		}
		if len(timers) != 1 || timers[0].Kind != "receive" || time.Until(timers[0].Due) < 23*time.Hour {
			t.Errorf("timers order-4 --json: %+v", timers)
		}
	})

	t.Run("channels", func(t *testing.T) {
		golden(t, "channels", norn(t, env, "channels").ok(t).stdout)
	})

	ctx := testutil.Ctx(t, time.Minute)
	st, err := storeurl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	t.Run("send", func(t *testing.T) {
		r := norn(t, env, "send", "order-2", `{"ok": true}`, "--id", "approve-2", "--type", "cli_test.Approval").ok(t)
		if r.stdout != "sent message approve-2 to order-2\n" {
			t.Errorf("send printed %q", r.stdout)
		}
		msgs, err := st.Mailbox(ctx, "order-2", 0)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(msgs, func(m persistence.Message) bool { return m.ID == "approve-2" })
		if i < 0 || string(msgs[i].Payload) != `{"ok":true}` || msgs[i].Type != "cli_test.Approval" || msgs[i].Target != "order-2" {
			t.Fatalf("mailbox of order-2 after send: %+v", msgs)
		}
		// The same ID again delivers nothing more.
		var sent struct {
			MessageID string `json:"message_id"`
			Duplicate bool
		}
		r = norn(t, env, "send", "order-2", `{"ok": true}`, "--id", "approve-2", "--json").ok(t)
		if err := json.Unmarshal([]byte(r.stdout), &sent); err != nil || !sent.Duplicate || sent.MessageID != "approve-2" {
			t.Errorf("resend: %+v %v", sent, err)
		}
		if again, _ := st.Mailbox(ctx, "order-2", 0); len(again) != len(msgs) {
			t.Errorf("resend with the same ID: mailbox %d messages, was %d", len(again), len(msgs))
		}
	})

	t.Run("publish", func(t *testing.T) {
		var sent struct {
			MessageID string `json:"message_id"`
			Channel   string
		}
		r := norn(t, env, "publish", "jobs", `{"job": 8}`, "--json").ok(t)
		if err := json.Unmarshal([]byte(r.stdout), &sent); err != nil || sent.Channel != "jobs" || sent.MessageID == "" {
			t.Fatalf("publish --json: %q %v", r.stdout, err)
		}
		file := filepath.Join(t.TempDir(), "job.json")
		if err := os.WriteFile(file, []byte(`{"job": 9}`), 0o644); err != nil {
			t.Fatal(err)
		}
		norn(t, env, "publish", "jobs", "@"+file).ok(t)
		stats, err := st.ChannelStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(stats, func(c persistence.ChannelStat) bool { return c.Channel == "jobs" })
		if i < 0 || stats[i].Waiting != 3 {
			t.Errorf("jobs after publish: %+v", stats)
		}
		// With an ID, a second publish delivers nothing and says so.
		for i, want := range []string{"sent message job-10 to channel jobs\n", "not sent: message job-10 was delivered to channel jobs before\n"} {
			if r := norn(t, env, "publish", "jobs", `{"job": 10}`, "--id", "job-10").ok(t); r.stdout != want {
				t.Errorf("publish #%d printed %q; want %q", i, r.stdout, want)
			}
		}
		stats, err = st.ChannelStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(stats, func(c persistence.ChannelStat) bool { return c.Channel == "jobs" }); i < 0 || stats[i].Waiting != 4 {
			t.Errorf("jobs after publishing one ID twice: %+v", stats)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		r := norn(t, env, "cancel", "order-4", "--reason", "customer asked").ok(t)
		if r.stdout != "cancelled 1, already ended 0, not found 0, failed 0\n" {
			t.Errorf("cancel printed %q", r.stdout)
		}
		in, err := st.Instance(ctx, "order-4")
		if err != nil || in.CancelReason != "customer asked" {
			t.Fatalf("order-4 after cancel: %+v %v", in, err)
		}
		// An ended instance, and one that does not exist: exit 3, and
		// the JSON says which is which.
		var res struct {
			Cancelled, Ended, NotFound []string
		}
		r = norn(t, env, "cancel", "order-1", "nope", "--json")
		if r.code != cli.ExitNotFound {
			t.Errorf("cancel of an ended and a missing instance: exit %d, want %d", r.code, cli.ExitNotFound)
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Cancelled) != 0 || !slices.Equal(res.Ended, []string{"order-1"}) {
			t.Errorf("cancel order-1 nope: %+v", res)
		}
	})
}

// lsPage is ls --json.
type lsPage struct {
	Instances []struct {
		ID, Workflow, Status string
		Input, Output        json.RawMessage
		Error                string
		HistoryLen           int64     `json:"history_len"`
		CreatedAt            time.Time `json:"created_at"`
	}
	Next string
}

func lsJSON(t *testing.T, env []string, args ...string) lsPage {
	t.Helper()
	var page lsPage
	r := norn(t, env, append([]string{"ls", "--json"}, args...)...).ok(t)
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil {
		t.Fatalf("ls --json: %v\n%s", err, r.stdout)
	}
	return page
}

// TestBulkCancel cancels by filters through the built command and checks
// every selected instance, and only those, in the store.
func TestBulkCancel(t *testing.T) {
	url := filepath.Join(t.TempDir(), "norn.db")
	bulk := []string{"bulk-1", "bulk-2", "bulk-3", "bulk-4", "bulk-5"}
	seed(t, url, bulk...)
	env := []string{cli.StoreEnv + "=" + url}

	r := norn(t, env, "cancel", "--workflow", "order", "--status", "waiting", "--dry-run").ok(t)
	newest := slices.Clone(bulk)
	slices.Reverse(newest)
	want := append(newest, "order-4", "order-2")
	if got := trimLines(r.stdout); !slices.Equal(got, want) {
		t.Fatalf("dry run selected %v", got)
	}
	var res struct{ Cancelled, Ended, NotFound []string }
	r = norn(t, env, "cancel", "--workflow", "order", "--reason", "bulk", "--json").ok(t)
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Cancelled, want) || len(res.Ended)+len(res.NotFound) != 0 {
		t.Fatalf("bulk cancel: %+v, want cancelled %v", res, want)
	}
	st := testutil.OpenSQLite(t, url)
	for _, id := range append(want, "order-1", "order-3") {
		in, err := st.Instance(testutil.Ctx(t, time.Minute), id)
		if err != nil {
			t.Fatal(err)
		}
		if live := !in.Status.Terminal(); live != (in.CancelReason == "bulk") {
			t.Errorf("%s (%s) has cancel reason %q", id, in.Status, in.CancelReason)
		}
	}
	// Not a terminal: plain counts, no bar.
	r = norn(t, env, "cancel", "--workflow", "order", "--status", "completed").ok(t)
	if r.stdout != "cancelled 0, already ended 1, not found 0, failed 0\n" || strings.Contains(r.stderr, "[") {
		t.Errorf("cancel of completed ones: stdout %q stderr %q", r.stdout, r.stderr)
	}
}

// TestExitCodes checks the documented exit codes and that errors go to
// stderr with nothing on stdout.
func TestExitCodes(t *testing.T) {
	url := filepath.Join(t.TempDir(), "norn.db")
	norn(t, nil, "migrate", "--store", url).ok(t)
	env := []string{cli.StoreEnv + "=" + url}
	for _, c := range []struct {
		name   string
		env    []string
		args   []string
		code   int
		stderr string
	}{
		{"not found", env, []string{"show", "nope"}, cli.ExitNotFound, "instance not found"},
		{"history not found", env, []string{"history", "nope"}, cli.ExitNotFound, "instance not found"},
		{"mailbox not found", env, []string{"mailbox", "nope"}, cli.ExitNotFound, "instance not found"},
		{"timers not found", env, []string{"timers", "nope"}, cli.ExitNotFound, "instance not found"},
		{"send not found", env, []string{"send", "nope", "{}"}, cli.ExitNotFound, "instance not found"},
		{"send without an ID", env, []string{"send", "", "jobs", "{}"}, cli.ExitUsage, "send needs an instance ID"},
		{"cancel not found", env, []string{"cancel", "nope"}, cli.ExitNotFound, "not found"},
		{"no command", env, nil, cli.ExitUsage, "no command"},
		{"unknown command", env, []string{"frobnicate"}, cli.ExitUsage, `unknown command "frobnicate"`},
		{"unknown flag", env, []string{"ls", "--colour"}, cli.ExitUsage, "flag provided but not defined"},
		{"missing argument", env, []string{"show"}, cli.ExitUsage, "show takes one instance ID"},
		{"bad JSON", env, []string{"publish", "jobs", "{nope"}, cli.ExitUsage, "not valid JSON"},
		{"bad status", env, []string{"ls", "--status", "sleepy"}, cli.ExitUsage, `unknown status "sleepy"`},
		{"bad time", env, []string{"ls", "--since", "yesterday"}, cli.ExitUsage, "--since"},
		{"bulk cancel without filters", env, []string{"cancel"}, cli.ExitUsage, "give instance IDs"},
		{"no store", nil, []string{"ls"}, cli.ExitUsage, "no store"},
		{"bad store scheme", nil, []string{"ls", "--store", "mysql://db/x"}, cli.ExitUsage, `unknown store scheme "mysql"`},
		{"missing store file", nil, []string{"ls", "--store", filepath.Join(t.TempDir(), "none.db")}, cli.ExitFailure, "does not exist"},
		{"unreachable store", nil, []string{"ls", "--store", "postgres://norn@127.0.0.1:1/db?connect_timeout=5&sslmode=disable"}, cli.ExitFailure, "open store"},
		{"replay without workflows", env, []string{"replay"}, cli.ExitUsage, "no workflow code"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := norn(t, append([]string{cli.StoreEnv + "="}, c.env...), c.args...)
			// Only cancel prints something (its counts) when it fails.
			if r.code != c.code || !strings.Contains(r.stderr, c.stderr) || (r.stdout != "" && c.args[0] != "cancel") {
				t.Errorf("norn %v: exit %d, stderr %q, stdout %q; want exit %d and %q on stderr only", c.args, r.code, r.stderr, r.stdout, c.code, c.stderr)
			}
		})
	}
	// A missing store file is not created by a read.
	if _, err := os.Stat(filepath.Join(filepath.Dir(url), "none.db")); err == nil {
		t.Error("ls created a store file")
	}
}

// TestHelp checks that help lists every command and that -h and help COMMAND
// print a command's flags and exit 0.
func TestHelp(t *testing.T) {
	r := norn(t, nil, "help").ok(t)
	for _, name := range []string{"ls", "show", "history", "mailbox", "timers", "channels", "send", "publish", "cancel", "replay", "migrate", "members", "version"} {
		if !strings.Contains(r.stdout, "\n  "+name+" ") {
			t.Errorf("help does not list %s:\n%s", name, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "3 instance not found") {
		t.Errorf("help does not document the exit codes:\n%s", r.stdout)
	}
	for _, args := range [][]string{{"ls", "-h"}, {"help", "ls"}, {"ls", "--help"}} {
		r := norn(t, nil, args...).ok(t)
		if !strings.Contains(r.stdout, "Usage: norn ls") || !strings.Contains(r.stdout, "-workflow") {
			t.Errorf("norn %v:\n%s", args, r.stdout)
		}
	}
	if r := norn(t, nil, "help", "replay").ok(t); !strings.Contains(r.stdout, "cli.Main(os.Args[1:]") || !strings.Contains(r.stdout, "Not available here") {
		t.Errorf("help replay does not explain how to get replay:\n%s", r.stdout)
	}
}

// TestMigrate creates a store and reports its schema version on both
// stores.
func TestMigrate(t *testing.T) {
	for name, url := range map[string]string{"sqlite": filepath.Join(t.TempDir(), "sub", "new.db"), "postgres": testutil.PostgresURL(t)} {
		t.Run(name, func(t *testing.T) {
			var out struct {
				Driver        string
				SchemaVersion int `json:"schema_version"`
				Norn          string
			}
			r := norn(t, nil, "migrate", "--store", url, "--json").ok(t)
			if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
				t.Fatal(err)
			}
			if out.Driver != name || out.SchemaVersion < 5 || out.Norn == "" {
				t.Errorf("migrate: %+v", out)
			}
			// The store is usable afterwards, and migrating again is a no-op.
			norn(t, nil, "ls", "--store", url).ok(t)
			r = norn(t, nil, "migrate", "--store", url).ok(t)
			if !strings.Contains(r.stdout, "Schema version:") {
				t.Errorf("migrate table:\n%s", r.stdout)
			}
		})
	}
}

// TestReplay runs the test binary as a program that embeds the command
// with its workflows (cli.Main): the code the instances ran replays their
// histories; a changed workflow diverges at the step it changed.
func TestReplay(t *testing.T) {
	url := filepath.Join(t.TempDir(), "norn.db")
	seed(t, url)
	env := func(version string) []string {
		return []string{cli.StoreEnv + "=" + url, workflowsEnv + "=" + version}
	}
	type replayed struct {
		ID, Workflow, Result, Detail string
		Seq                          *int64
	}
	parse := func(r result) []replayed {
		t.Helper()
		var out []replayed
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("replay --json: %v\n%s\n%s", err, r.stdout, r.stderr)
		}
		return out
	}

	r := run(t, os.Args[0], env("v1"), "replay").ok(t)
	golden(t, "replay", r.stdout)
	all := parse(run(t, os.Args[0], env("v1"), "replay", "--status", "completed,failed,waiting", "--json").ok(t))
	if len(all) != 7 {
		t.Fatalf("replay of every instance: %+v", all)
	}
	for _, x := range all {
		if x.Result != "ok" {
			t.Errorf("v1 replay of %s: %s %s", x.ID, x.Result, x.Detail)
		}
	}

	r = run(t, os.Args[0], env("v2"), "replay", "order-1", "order-2", "--json")
	if r.code != cli.ExitFailure || !strings.Contains(r.stderr, "2 of 2 instances do not replay") {
		t.Fatalf("v2 replay: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, x := range parse(r) {
		if x.Result != "diverged" || x.Seq == nil || *x.Seq != 1 || !strings.Contains(x.Detail, "quote") {
			t.Errorf("v2 replay of %s: %+v", x.ID, x)
		}
	}
	// A missing instance is a not found, not a divergence.
	if r := run(t, os.Args[0], env("v1"), "replay", "nope"); r.code != cli.ExitNotFound {
		t.Errorf("replay nope: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestMembers starts two cluster nodes as processes and lists them with
// members, which joins as a client and leaves again.
func TestMembers(t *testing.T) {
	url := filepath.Join(t.TempDir(), "norn.db")
	norn(t, nil, "migrate", "--store", url).ok(t)
	a := testutil.StartChild(t, "node", "NODE_STORE="+url, "NODE_ID=node-a")
	addr := strings.Fields(a.WaitLine(t, "ready ", time.Minute))[2]
	b := testutil.StartChild(t, "node", "NODE_STORE="+url, "NODE_ID=node-b", "NODE_SEEDS="+addr)
	b.WaitLine(t, "ready ", time.Minute)

	var members []struct {
		Name       string
		GossipAddr string `json:"gossip_addr"`
		Client     bool
		State      string
	}
	r := norn(t, nil, "members", "--seeds", addr, "--bind", "127.0.0.1", "--json").ok(t)
	if err := json.Unmarshal([]byte(r.stdout), &members); err != nil {
		t.Fatalf("members --json: %v\n%s", err, r.stdout)
	}
	var got []string
	for _, m := range members {
		role := "node"
		if m.Client {
			role = "client"
		}
		if strings.HasPrefix(m.Name, "norn-cli-") {
			m.Name = "norn-cli"
		}
		got = append(got, m.Name+" "+role+" "+m.State)
	}
	if want := []string{"node-a node alive", "node-b node alive", "norn-cli client alive"}; !slices.Equal(got, want) {
		t.Errorf("members = %v, want %v", got, want)
	}
	if members[0].GossipAddr != addr {
		t.Errorf("node-a gossip address %q, want %q", members[0].GossipAddr, addr)
	}
	if r := norn(t, nil, "members"); r.code != cli.ExitUsage {
		t.Errorf("members without --seeds: exit %d", r.code)
	}
	if r := norn(t, nil, "members", "--seeds", "127.0.0.1:1", "--bind", "127.0.0.1", "--timeout", "5s"); r.code != cli.ExitFailure {
		t.Errorf("members with a dead seed: exit %d, stderr %q", r.code, r.stderr)
	}
	a.Signal(t, syscall.SIGTERM)
	b.Signal(t, syscall.SIGTERM)
	<-a.Exited()
	<-b.Exited()
}

// TestMembersTLS: a cluster whose remote endpoints use TLS takes the
// command as a client member with the cluster's CA and a certificate of
// its own (--tls-ca, --tls-cert, --tls-key, or their environment
// variables), and refuses it without them, saying why.
func TestMembersTLS(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteCerts(t, dir, "node", "client")
	url := filepath.Join(dir, "norn.db")
	norn(t, nil, "migrate", "--store", url).ok(t)
	a := testutil.StartChild(t, "node", "NODE_STORE="+url, "NODE_ID=node-a", "NODE_TLS_DIR="+dir)
	addr := strings.Fields(a.WaitLine(t, "ready ", time.Minute))[2]

	tlsFlags := []string{"--tls-ca", filepath.Join(dir, "ca.pem"), "--tls-cert", filepath.Join(dir, "client.pem"), "--tls-key", filepath.Join(dir, "client-key.pem")}
	r := norn(t, nil, append([]string{"members", "--seeds", addr, "--bind", "127.0.0.1"}, tlsFlags...)...).ok(t)
	if !strings.Contains(r.stdout, "node-a") || !strings.Contains(r.stdout, "client") {
		t.Errorf("members with TLS:\n%s", r.stdout)
	}
	env := []string{"NORN_TLS_CA=" + filepath.Join(dir, "ca.pem"), "NORN_TLS_CERT=" + filepath.Join(dir, "client.pem"), "NORN_TLS_KEY=" + filepath.Join(dir, "client-key.pem")}
	if r := norn(t, env, "members", "--seeds", addr, "--bind", "127.0.0.1"); r.code != cli.ExitOK || !strings.Contains(r.stdout, "node-a") {
		t.Errorf("members with TLS from the environment: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := norn(t, nil, "members", "--seeds", addr, "--bind", "127.0.0.1", "--timeout", "20s"); r.code != cli.ExitFailure || !strings.Contains(r.stderr, "TLS") {
		t.Errorf("members without TLS in a TLS cluster: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := norn(t, nil, "members", "--seeds", addr, "--bind", "127.0.0.1", "--tls-ca", filepath.Join(dir, "ca.pem")); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "go together") {
		t.Errorf("members with --tls-ca alone: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := norn(t, nil, append([]string{"members", "--seeds", addr, "--bind", "127.0.0.1"}, tlsFlags[:4]...)...); r.code != cli.ExitUsage {
		t.Errorf("members without --tls-key: exit %d, stderr %q", r.code, r.stderr)
	}
	a.Signal(t, syscall.SIGTERM)
	<-a.Exited()
}

// TestProgressBar runs a bulk cancel in process with stderr taken for a
// terminal: a bar is drawn and ends at the total.
func TestProgressBar(t *testing.T) {
	url := filepath.Join(t.TempDir(), "norn.db")
	seed(t, url, "bulk-1", "bulk-2", "bulk-3")
	var stdout, stderr strings.Builder
	tty := true
	code := cli.Run(testutil.Ctx(t, time.Minute), []string{"cancel", "--store", url, "--workflow", "order"},
		cli.Options{Stdout: &stdout, Stderr: &stderr, StderrIsTerminal: &tty})
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.HasPrefix(stderr.String(), "\rcancelling [") || !strings.HasSuffix(stderr.String(), "[##############################] 5/5\n") {
		t.Errorf("progress on a terminal: %q", stderr.String())
	}
	if stdout.String() != "cancelled 5, already ended 0, not found 0, failed 0\n" {
		t.Errorf("counts: %q", stdout.String())
	}
}

// TestClusterWake cancels instances parked on a cluster node that shares
// an SQLite file with the command. The node holds their leases and sleeps
// for an hour, so its scans skip them: only a wake-up makes it act on the
// cancel, either the one the command sends as a client member (--seeds) or
// the wake request it leaves in the file without --seeds.
func TestClusterWake(t *testing.T) {
	url := filepath.Join(t.TempDir(), "norn.db")
	norn(t, nil, "migrate", "--store", url).ok(t)
	node := testutil.StartChild(t, "node", "NODE_STORE="+url, "NODE_ID=node-a", "NODE_RECOVERY=200ms")
	addr := strings.Fields(node.WaitLine(t, "ready ", time.Minute))[2]

	ctx := testutil.Ctx(t, time.Minute)
	st := testutil.OpenSQLite(t, url)
	sys := testutil.StartNode(t, actor.Config{Store: st, Client: true})
	for _, id := range []string{"sleeper-1", "sleeper-2"} {
		if _, err := actor.Spawn(ctx, sys, clusternode.Sleeper("node-a"), clusternode.SleepInput{Until: time.Now().Add(time.Hour)},
			actor.WithID(id)); err != nil {
			t.Fatal(err)
		}
		node.WaitLine(t, "activated node-a "+id, time.Minute)
		testutil.Eventually(t, 30*time.Second, id+" has its timer", func() bool {
			ts, err := sys.Timers(ctx, actor.PID(id))
			return err == nil && len(ts) == 1
		})
	}

	norn(t, nil, "cancel", "sleeper-1", "--store", url, "--seeds", addr, "--bind", "127.0.0.1").ok(t)
	norn(t, nil, "cancel", "sleeper-2", "--store", url).ok(t)
	for _, id := range []string{"sleeper-1", "sleeper-2"} {
		testutil.Eventually(t, 30*time.Second, id+" cancelled by its node", func() bool {
			in, err := st.Instance(ctx, id)
			return err == nil && in.Status == persistence.StatusCancelled
		})
	}
	node.Signal(t, syscall.SIGTERM)
	<-node.Exited()
}

// TestSendReachesWorkflow sends two messages with the command to an
// instance a node in the test process runs: one under another type name,
// which its Receive[Approval] leaves, and one under Approval's, which it
// takes and completes with.
func TestSendReachesWorkflow(t *testing.T) {
	url := filepath.Join(t.TempDir(), "norn.db")
	ctx := testutil.Ctx(t, time.Minute)
	st := testutil.OpenSQLite(t, url)
	// Short passivation and scans: the node learns of the command's
	// writes to the SQLite file only by scanning.
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(orderFlow, batchFlow, itemFlow),
		PassivateAfter: 10 * time.Millisecond, RecoveryInterval: 50 * time.Millisecond})
	pid, err := actor.Spawn(ctx, sys, orderFlow, Order{Item: "pen", Qty: 2}, actor.WithID("order-9"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "order-9 waiting", func() bool {
		in, err := st.Instance(ctx, "order-9")
		return err == nil && in.Status == persistence.StatusWaiting
	})
	env := []string{cli.StoreEnv + "=" + url}
	// The command warns that order-9's receive does not take the first.
	r := norn(t, env, "send", "order-9", `{"ok": false}`, "--type", "other.Thing", "--id", "wrong").ok(t)
	if !strings.Contains(r.stderr, "warning: order-9 waits for a message of type cli_test.Approval") {
		t.Errorf("send of another type: stderr %q, want a warning", r.stderr)
	}
	r = norn(t, env, "send", "order-9", `{"ok": true}`, "--type", "cli_test.Approval", "--id", "right").ok(t)
	if r.stderr != "" {
		t.Errorf("send of the awaited type: stderr %q", r.stderr)
	}
	out, err := actor.Await(ctx, sys, orderFlow, pid)
	if err != nil || out.Total != 10 {
		t.Fatalf("order-9 = %+v, %v", out, err)
	}
	hist, err := sys.History(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(hist, func(e actor.HistoryEvent) bool { return e.Kind == actor.EventReceived })
	if i < 0 || !strings.Contains(string(hist[i].Payload), "right") {
		t.Errorf("order-9 received %+v; want the message with ID right", hist)
	}
}

// TestViewerCommand serves the viewer from the built command over a seeded
// store, reads the list page and an instance page over HTTP, checks that
// it is read-only by default and that the token is required, and stops it
// with SIGINT.
func TestViewerCommand(t *testing.T) {
	url := filepath.Join(t.TempDir(), "norn.db")
	seed(t, url)
	cmd := exec.Command(nornBin, "viewer", "--store", url, "--addr", "127.0.0.1:0", "--token", "s3cret")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	var line string
	select {
	case line = <-lines:
	case <-time.After(time.Minute):
		t.Fatalf("no address printed; stderr:\n%s", stderr.String())
	}
	f := strings.Fields(line)
	if len(f) < 3 || !strings.HasPrefix(f[2], "http://") || !strings.Contains(line, "read-only") {
		t.Fatalf("first line %q; want the viewer's address, read-only", line)
	}
	base := f[2]
	get := func(path, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("", ""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d; want 401", code)
	}
	code, body := get("", "s3cret")
	if code != http.StatusOK || !strings.Contains(body, "order-2") || !strings.Contains(body, "batch-1") {
		t.Fatalf("list page: %d, seeded instances missing:\n%.2000s", code, body)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"cancel", strings.NewReader("id=order-2"))
	req.Header.Set("Authorization", "Bearer s3cret")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST to a read-only viewer: %d; want 403", resp.StatusCode)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("viewer exit after SIGINT: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("viewer did not stop on SIGINT")
	}
}
