package cli_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/cli"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence/storeurl"
)

type tallyArg struct{ Times int }

// tallyFlow adds up the ints it receives and answers the queries "sum"
// and "times" (the sum times its argument's Times).
var tallyFlow = actor.Workflow("tally", func(ctx *actor.Context, start int) (int, error) {
	sum := start
	if err := actor.HandleQuery(ctx, "sum", func(struct{}) (int, error) { return sum, nil }); err != nil {
		return 0, err
	}
	if err := actor.HandleQuery(ctx, "times", func(a tallyArg) (map[string]int, error) {
		if a.Times < 0 {
			return nil, errors.New("negative times")
		}
		return map[string]int{"product": sum * a.Times}, nil
	}); err != nil {
		return 0, err
	}
	for {
		m, err := actor.Receive[int](ctx)
		if err != nil {
			return 0, err
		}
		sum += m.Value
	}
})

// TestQuery runs the test binary as a program that embeds the command with
// its workflows: query replays the instance's history and prints the
// handler's answer; the stock command says why it cannot.
func TestQuery(t *testing.T) {
	url := filepath.Join(t.TempDir(), "norn.db")
	ctx := testutil.Ctx(t, time.Minute)
	st, err := storeurl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // after the node stops
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(tallyFlow), PassivateAfter: 10 * time.Millisecond})
	pid, err := actor.Spawn(ctx, sys, tallyFlow, 2, actor.WithID("t1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{3, 4} {
		if err := sys.Send(ctx, pid, n); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, time.Minute, "t1 takes both messages", func() bool {
		got, err := actor.Query[int](ctx, sys, pid, "sum", nil)
		return err == nil && got == 9
	})
	env := []string{cli.StoreEnv + "=" + url, workflowsEnv + "=query"}

	if r := run(t, os.Args[0], env, "query", "t1", "sum").ok(t); strings.TrimSpace(r.stdout) != "9" {
		t.Errorf("query t1 sum: %q, want 9", r.stdout)
	}
	r := run(t, os.Args[0], env, "query", "t1", "times", `{"Times": 3}`).ok(t)
	if !strings.Contains(r.stdout, `"product": 27`) {
		t.Errorf("query t1 times: %q, want product 27", r.stdout)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"unknown query", []string{"query", "t1", "nope"}, cli.ExitUsage, `unknown query "nope" on t1 (it handles: sum, times)`},
		{"misspelt argument", []string{"query", "t1", "times", `{"Tims": 3}`}, cli.ExitUsage, "unknown field"},
		{"not JSON", []string{"query", "t1", "times", `{`}, cli.ExitUsage, "not valid JSON"},
		{"handler error", []string{"query", "t1", "times", `{"Times": -1}`}, cli.ExitFailure, "negative times"},
		{"missing instance", []string{"query", "nope", "sum"}, cli.ExitNotFound, "not found"},
		{"no name", []string{"query", "t1"}, cli.ExitUsage, "query takes an instance ID"},
	} {
		r := run(t, os.Args[0], env, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d with %q", c.name, r.code, r.stderr, c.code, c.msg)
		}
	}
	if r := norn(t, []string{cli.StoreEnv + "=" + url}, "query", "t1", "sum"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "no workflow code") {
		t.Errorf("stock norn query: exit %d, stderr %q; want a usage error saying why", r.code, r.stderr)
	}
}
