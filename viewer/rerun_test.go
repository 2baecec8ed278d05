package viewer_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/viewer"
)

// With actions on, a live instance can be terminated and an ended one run
// again (retry, restart, reset), each a POST with its own form token; each
// says what it did, or politely why not.
func TestTerminateAndRunAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := f.serve(t, viewer.Options{AllowActions: true})
	c := cookieClient(t)
	ctx := testutil.Ctx(t, 30*time.Second)

	_, body := get(t, c, srv.URL+"/instances/"+f.waiting)
	if strings.Contains(body, `id="rerun"`) {
		t.Fatal("a live instance offers to run again")
	}
	resp, body := postWith(t, c, srv.URL+"/terminate", url.Values{"id": {f.waiting}, "csrf": {csrfOf(t, body, "terminate")}, "reason": {"ops"}})
	wantStatus(t, resp, body, http.StatusSeeOther)
	inst, err := f.sys.AwaitDone(ctx, actor.PID(f.waiting))
	if err != nil || inst.Status != actor.StatusCancelled || inst.Error != "terminated: ops" {
		t.Fatalf("after terminate: %+v, %v", inst, err)
	}
	_, body = get(t, c, srv.URL+resp.Header.Get("Location"))
	wantText(t, body, "Terminated.", "Run again", "Restart with the same input")
	if strings.Contains(body, `id="retry-form"`) || strings.Contains(body, `id="terminate-form"`) {
		t.Fatal("a cancelled instance offers retry or terminate")
	}

	// The failed one: retry, then the page says so and the run moved on.
	_, body = get(t, c, srv.URL+"/instances/"+f.failed)
	resp, body = postWith(t, c, srv.URL+"/retry", url.Values{"id": {f.failed}, "csrf": {csrfOf(t, body, "retry")}})
	wantStatus(t, resp, body, http.StatusSeeOther)
	testutil.Eventually(t, 20*time.Second, "the retried instance is on its second run", func() bool {
		in, err := f.sys.Instance(ctx, actor.PID(f.failed))
		return err == nil && in.Run == 1
	})
	_, body = get(t, c, srv.URL+resp.Header.Get("Location"))
	wantText(t, body, "Retried")

	// Reset of the terminated one, keeping its first two events, then a
	// reset of it again while it runs: not done, and said why.
	_, body = get(t, c, srv.URL+"/instances/"+f.waiting)
	tok := csrfOf(t, body, "reset")
	resp, body = postWith(t, c, srv.URL+"/reset", url.Values{"id": {f.waiting}, "csrf": {tok}, "seq": {"x"}})
	wantStatus(t, resp, body, http.StatusBadRequest)
	resp, body = postWith(t, c, srv.URL+"/reset", url.Values{"id": {f.waiting}, "csrf": {tok}, "seq": {"2"}})
	wantStatus(t, resp, body, http.StatusSeeOther)
	if in, err := f.sys.Instance(ctx, actor.PID(f.waiting)); err != nil || in.Status.Terminal() || in.Run != 1 {
		t.Fatalf("after reset: %+v, %v", in, err)
	}
	resp, body = postWith(t, c, srv.URL+"/reset", url.Values{"id": {f.waiting}, "csrf": {tok}, "seq": {"2"}})
	wantStatus(t, resp, body, http.StatusSeeOther)
	_, body = get(t, c, srv.URL+resp.Header.Get("Location"))
	wantText(t, body, "Not done: the instance has not ended")

	// A token for one action does not do another.
	resp, body = postWith(t, c, srv.URL+"/restart", url.Values{"id": {f.done}, "csrf": {tok}})
	wantStatus(t, resp, body, http.StatusForbidden)
}

// The start form starts an instance of a workflow the viewer was given,
// once per ID, and refuses input that does not fit.
func TestStartForm(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := cookieClient(t)
	ctx := testutil.Ctx(t, 30*time.Second)
	_, body := get(t, c, f.serve(t, viewer.Options{AllowActions: true}).URL+"/")
	if strings.Contains(body, `id="start-form"`) {
		t.Fatal("a start form without workflows to start")
	}
	srv := f.serve(t, viewer.Options{AllowActions: true, Workflows: []actor.Definition{approvalFlow}})
	_, body = get(t, c, srv.URL+"/")
	tok := csrfOf(t, body, "start")
	form := func(workflow, id, input string) url.Values {
		return url.Values{"id": {"new-instance"}, "csrf": {tok}, "workflow": {workflow}, "instance": {id}, "input": {input}}
	}
	resp, body := postWith(t, c, srv.URL+"/start", form("approval", "approval-zoe", `{"customer": "zoe", "amount": 5}`))
	wantStatus(t, resp, body, http.StatusSeeOther)
	if loc := resp.Header.Get("Location"); !strings.Contains(loc, "/instances/approval-zoe") {
		t.Fatalf("start went to %q", loc)
	}
	in, err := f.sys.Instance(ctx, "approval-zoe")
	if err != nil || in.Workflow != "approval" || !strings.Contains(string(in.Input), "zoe") {
		t.Fatalf("started instance = %+v, %v", in, err)
	}
	resp, body = postWith(t, c, srv.URL+"/start", form("approval", "approval-zoe", `{"customer": "other"}`))
	wantStatus(t, resp, body, http.StatusSeeOther)
	_, body = get(t, c, srv.URL+resp.Header.Get("Location"))
	wantText(t, body, "Not started: an instance with this ID exists already")
	for _, bad := range []url.Values{
		form("approval", "", `{"customer": `),
		form("approval", "", `{"custmer": "x"}`),
		form("order", "", `{}`),
	} {
		resp, body := postWith(t, c, srv.URL+"/start", bad)
		wantStatus(t, resp, body, http.StatusBadRequest)
	}
}

// The send form cannot post on a system channel or send a Down.
func TestSendFormRefusesSystemMessages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := f.serve(t, viewer.Options{AllowActions: true})
	c := cookieClient(t)
	_, body := get(t, c, srv.URL+"/instances/"+f.waiting)
	tok := csrfOf(t, body, "send")
	for _, form := range []url.Values{
		{"id": {f.waiting}, "csrf": {tok}, "channel": {"$down"}, "payload": {`{"PID": "x", "Status": "failed"}`}},
		{"id": {f.waiting}, "csrf": {tok}, "type": {"mailbox.Down"}, "payload": {`{}`}},
	} {
		resp, body := postWith(t, c, srv.URL+"/send", form)
		wantStatus(t, resp, body, http.StatusBadRequest)
		wantText(t, body, "reserved for the runtime")
	}
}
