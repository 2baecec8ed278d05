package cli_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/cli"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// terminate, retry, restart and reset act on the store through a client:
// each changes the instance's status as it says, and refuses what it
// cannot apply to with the documented exit code.
func TestTerminateRetryRestartReset(t *testing.T) {
	t.Parallel()
	url := filepath.Join(t.TempDir(), "norn.db")
	seed(t, url)
	env := []string{cli.StoreEnv + "=" + url}
	ctx := testutil.Ctx(t, time.Minute)
	st, err := storeurl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	status := func(id string) persistence.Instance {
		t.Helper()
		in, err := st.Instance(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return in
	}

	if r := norn(t, env, "terminate", "--reason", "stuck for days", "order-2").ok(t); r.stdout != "order-2: terminated\n" {
		t.Errorf("terminate: %q", r.stdout)
	}
	if in := status("order-2"); in.Status != persistence.StatusCancelled || in.Error != "terminated: stuck for days" {
		t.Errorf("terminated order-2 = %s %q", in.Status, in.Error)
	}
	if r := norn(t, env, "retry", "order-3").ok(t); r.stdout != "order-3: retried\n" {
		t.Errorf("retry: %q", r.stdout)
	}
	if in := status("order-3"); in.Status != persistence.StatusRunning || in.Run != 1 || in.Error != "" {
		t.Errorf("retried order-3 = %s run %d %q", in.Status, in.Run, in.Error)
	}
	norn(t, env, "restart", "order-1").ok(t)
	if in := status("order-1"); in.Status != persistence.StatusRunning || in.HistoryLen != 1 {
		t.Errorf("restarted order-1 = %s, %d events", in.Status, in.HistoryLen)
	}
	norn(t, env, "reset", "batch-1", "2").ok(t)
	if in := status("batch-1"); in.Status != persistence.StatusRunning || in.HistoryLen != 2 {
		t.Errorf("reset batch-1 = %s, %d events", in.Status, in.HistoryLen)
	}

	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"terminate", "order-2"}, cli.ExitFailure, "already ended"},
		{[]string{"retry", "order-3"}, cli.ExitFailure, "has not ended"},
		{[]string{"retry", "order-2"}, cli.ExitFailure, "did not fail"},
		{[]string{"restart", "order-4"}, cli.ExitFailure, "terminate or cancel it first"},
		{[]string{"terminate", "nope"}, cli.ExitNotFound, "nope: not found"},
		{[]string{"reset", "order-2", "99"}, cli.ExitUsage, "keep 99 events"},
		{[]string{"reset", "order-2", "x"}, cli.ExitUsage, "want a positive event number"},
		{[]string{"reset", "order-2"}, cli.ExitUsage, "give the instance ID and the SEQ"},
		{[]string{"retry"}, cli.ExitUsage, "give the IDs"},
		{[]string{"terminate", "a\tb"}, cli.ExitUsage, "control character"},
	} {
		r := norn(t, env, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.stderr) {
			t.Errorf("norn %q: exit %d, stderr %q; want exit %d and %q", c.args, r.code, r.stderr, c.code, c.stderr)
		}
	}
}

// Messages that would pose as the runtime (a "$" channel, a Down) are
// usage errors: nothing is written.
func TestReservedChannels(t *testing.T) {
	t.Parallel()
	url := filepath.Join(t.TempDir(), "norn.db")
	norn(t, nil, "migrate", "--store", url).ok(t)
	env := []string{cli.StoreEnv + "=" + url}
	for _, args := range [][]string{
		{"send", "order-1", "$down", `{"PID": "x", "Status": "failed"}`},
		{"publish", "$down:order-1", "1"},
		{"send", "--type", "mailbox.Down", "order-1", `{}`},
	} {
		r := norn(t, env, args...)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "reserved for the runtime") {
			t.Errorf("norn %q: exit %d, stderr %q; want exit 2, reserved", args, r.code, r.stderr)
		}
	}
}

// Publishing where nobody subscribes is done, with a warning that the
// message waits in the channel's queue.
func TestPublishWarnsWhenNobodyListens(t *testing.T) {
	t.Parallel()
	url := filepath.Join(t.TempDir(), "norn.db")
	norn(t, nil, "migrate", "--store", url).ok(t)
	env := []string{cli.StoreEnv + "=" + url}
	r := norn(t, env, "publish", "nochan", "1").ok(t)
	if !strings.Contains(r.stderr, "warning: nobody subscribes to nochan") {
		t.Errorf("no warning: stderr %q", r.stderr)
	}
	r = norn(t, env, "--json", "publish", "nochan", "2").ok(t)
	if !strings.Contains(r.stdout, `"listeners": 0`) || !strings.Contains(r.stdout, `"queued": true`) {
		t.Errorf("json: %q", r.stdout)
	}
}
