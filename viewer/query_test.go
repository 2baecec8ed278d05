package viewer_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/viewer"
)

type tallyArg struct {
	Times int `json:"times"`
}

// tally adds up the ints it receives and answers "sum" and "times".
var tally = actor.Workflow("tally", func(ctx *actor.Context, start int) (int, error) {
	sum := start
	if err := actor.HandleQuery(ctx, "sum", func(struct{}) (int, error) { return sum, nil }); err != nil {
		return 0, err
	}
	if err := actor.HandleQuery(ctx, "times", func(a tallyArg) (map[string]int, error) {
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

// The instance page's query form shows the answer of the live instance
// (read-only viewer too: a query writes nothing), and of a client System's
// replay with the program's workflows; a query it cannot take is a 400
// with the reason.
func TestQueryForm(t *testing.T) {
	t.Parallel()
	path := testutil.SQLitePath(t)
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, path), Workflows: actor.Register(tally)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, tally, 1, actor.WithID("tally-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Send(ctx, pid, 4); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the tally takes its message", func() bool {
		got, err := actor.Query[int](ctx, sys, pid, "sum", nil)
		return err == nil && got == 5
	})
	serve := func(s *actor.System, opts viewer.Options) string {
		h, err := viewer.New(s, opts)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	ask := func(base, name, arg string) (*http.Response, string) {
		return get(t, nil, base+"/instances/?"+url.Values{"id": {"tally-1"}, "query": {name}, "arg": {arg}}.Encode())
	}

	live := serve(sys, viewer.Options{})
	resp, body := get(t, nil, live+"/instances/tally-1")
	wantStatus(t, resp, body, http.StatusOK)
	if !strings.Contains(body, `id="query-form"`) || strings.Contains(body, `id="query-answer"`) {
		t.Fatal("the instance page lacks the query form, or shows an answer unasked")
	}
	resp, body = ask(live, "times", `{"times": 3}`)
	wantStatus(t, resp, body, http.StatusOK)
	wantText(t, body, `"product": 15`)
	for _, c := range []struct{ name, arg, want string }{
		{"nope", "", `unknown query "nope" on tally-1 (it handles: sum, times)`},
		{"times", `{"tims": 3}`, "unknown field"},
		{"times", `{`, "not JSON"},
		{"", "", "Give the name of a query"},
	} {
		resp, body := ask(live, c.name, c.arg)
		wantStatus(t, resp, body, http.StatusBadRequest)
		wantText(t, body, c.want)
	}

	// The norn command's viewer: a client System, the program's workflows.
	client := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, path), Client: true, NodeID: "viewer"})
	resp, body = ask(serve(client, viewer.Options{Workflows: []actor.Definition{tally}}), "sum", "")
	wantStatus(t, resp, body, http.StatusOK)
	if !strings.Contains(body, `<pre class="json" id="query-answer">5</pre>`) {
		t.Errorf("replayed answer missing:\n%s", text(body))
	}
	resp, body = ask(serve(client, viewer.Options{}), "sum", "")
	wantStatus(t, resp, body, http.StatusBadRequest)
	wantText(t, body, "unknown workflow")
}
