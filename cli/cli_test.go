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
		if want := []string{"order-2:waiting", "order-3:failed", "order-4:waiting"}; !slices.Equal(ids, want) {
			t.Errorf("ls --status waiting,failed = %v, want %v", ids, want)
		}
		if page.Instances[0].Input["item"] != "pen" || page.Instances[1].Error == "" || page.Next != "" {
			t.Errorf("ls --json: input %v, error %q, next %q", page.Instances[0].Input, page.Instances[1].Error, page.Next)
		}

		// Pages: two rows, then the rest from the token.
		page = lsJSON(t, env, "--limit", "2")
		if len(page.Instances) != 2 || page.Next == "" {
			t.Fatalf("ls --limit 2: %d rows, next %q", len(page.Instances), page.Next)
		}
		page = lsJSON(t, env, "--limit", "2", "--page", page.Next)
		if len(page.Instances) != 2 || page.Instances[0].ID != "order-3" || page.Next != "" {
			t.Fatalf("second page: %+v, next %q", page.Instances, page.Next)
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
		if info.MailboxDepth != 1 || len(info.Subscriptions) != 1 || info.Subscriptions[0].Mode != "broadcast" {
			t.Errorf("show order-4 --json: %+v", info)
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
		stats, err := st.ChannelStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(stats, func(c persistence.ChannelStat) bool { return c.Channel == "jobs" })
		if i < 0 || stats[i].Waiting != 2 {
			t.Errorf("jobs after publish: %+v", stats)
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
		Input                map[string]any
		Output               map[string]any
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
	if got := trimLines(r.stdout); !slices.Equal(got, append(slices.Clone(bulk), "order-2", "order-4")) {
		t.Fatalf("dry run selected %v", got)
	}
	var res struct{ Cancelled, Ended, NotFound []string }
	r = norn(t, env, "cancel", "--workflow", "order", "--reason", "bulk", "--json").ok(t)
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(bulk), "order-2", "order-4")
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
