package viewer_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence/postgres"
	"github.com/nornlabs/norn/viewer"
)

// get fetches a page without following redirects.
func get(t *testing.T, c *http.Client, u string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if c == nil {
		c = noRedirect(nil)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func noRedirect(jar http.CookieJar) *http.Client {
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func wantStatus(t *testing.T, resp *http.Response, body string, want int) {
	t.Helper()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d; body:\n%s", resp.Request.Method, resp.Request.URL, resp.StatusCode, want, body)
	}
}

// text is a page's visible text, roughly: tags dropped, entities decoded,
// spaces folded.
func text(body string) string {
	body = regexp.MustCompile(`(?s)<(script|style)[^>]*>.*?</(script|style)>`).ReplaceAllString(body, " ")
	body = regexp.MustCompile(`<[^>]*>`).ReplaceAllString(body, " ")
	return strings.Join(strings.Fields(html.UnescapeString(body)), " ")
}

func wantText(t *testing.T, body string, wants ...string) {
	t.Helper()
	txt := text(body)
	for _, w := range wants {
		if !strings.Contains(txt, w) {
			t.Errorf("page lacks %q; its text:\n%s", w, txt)
		}
	}
}

func TestInstancePages(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t, viewer.Options{})

	resp, body := get(t, nil, srv.URL+"/instances/"+f.done)
	wantStatus(t, resp, body, http.StatusOK)
	wantText(t, body, "order-ann", "completed", "activity reserve", "2 attempts", "attempt failed",
		"stock service busy", "activity charge", "child spawned", f.kid, "child ended: completed", `output "shipped to ann"`, `"charged": 42`, `"customer": "ann"`)
	if !strings.Contains(body, `href="/instances/order-ann/child:1"`) {
		t.Errorf("no link to the child")
	}
	// The timeline chart: the retried activity's bar with its recorded
	// start, the child's from spawn to end.
	wantText(t, body, "reserve: from +", "child order-ann/child:1: from +", "completed: at +")
	if !strings.Contains(body, `<svg class="chart"`) {
		t.Errorf("no timeline chart")
	}

	// A notice in the address is a key: no text of the link's choosing.
	_, body = get(t, nil, srv.URL+"/instances/"+f.done+"?done="+url.QueryEscape("Call 555-0100 now"))
	if strings.Contains(body, "555-0100") || strings.Contains(body, `id="flash"`) {
		t.Error("the page shows text from its address")
	}

	resp, body = get(t, nil, srv.URL+"/instances/"+f.kid)
	wantStatus(t, resp, body, http.StatusOK)
	wantText(t, body, "ship", "completed", "Parent order-ann", "shipped to ann")

	// A message it does not take (a string, not an Approval) waits in its mailbox.
	if err := f.sys.Send(testutil.Ctx(t, 5*time.Second), actor.PID(f.waiting), "not an approval"); err != nil {
		t.Fatal(err)
	}
	resp, body = get(t, nil, srv.URL+"/instances/"+f.waiting)
	wantStatus(t, resp, body, http.StatusOK)
	wantText(t, body, "approval-cid", "subscribed approvals", "receive waits", "Pending timers", "receive timeout",
		"approvals broadcast", "receive:1: since +", "not ended", "Mailbox 1", "direct · string · from outside",
		`"not an approval"`)
	// What it waits for, and that no waiting receive takes the string.
	wantText(t, body, "Waits for", "a message of type viewer_test.Approval", "untyped messages only if they decode into it")
	testutil.Eventually(t, 10*time.Second, "the string marked as not awaited", func() bool {
		_, body = get(t, nil, srv.URL+"/instances/"+f.waiting)
		return strings.Contains(body, ">not awaited</span>")
	})

	resp, body = get(t, nil, srv.URL+"/instances/"+f.failed)
	wantStatus(t, resp, body, http.StatusOK)
	wantText(t, body, "fragile-bob", "failed", "card declined", "activity failed explode")
}

func TestUnknownInstanceIs404(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t, viewer.Options{})
	resp, body := get(t, nil, srv.URL+"/instances/no-such-thing")
	wantStatus(t, resp, body, http.StatusNotFound)
	wantText(t, body, "Instance not found", "no-such-thing")
	resp, body = get(t, nil, srv.URL+"/nowhere")
	wantStatus(t, resp, body, http.StatusNotFound)
	// Search by ID opens the instance's page.
	resp, _ = get(t, nil, srv.URL+"/?id="+url.QueryEscape(f.kid))
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/instances/"+f.kid {
		t.Fatalf("search: %d to %q", resp.StatusCode, loc)
	}
}

func TestTokenIsRequired(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t, viewer.Options{Token: "s3cret", BasePath: "/norn"})
	page := srv.URL + "/norn/instances/" + f.done

	resp, body := get(t, nil, page)
	wantStatus(t, resp, body, http.StatusUnauthorized)
	if strings.Contains(body, "order-ann") && strings.Contains(body, "reserve") {
		t.Fatal("401 page shows the instance")
	}
	resp, body = get(t, nil, page, "Authorization", "Bearer wrong")
	wantStatus(t, resp, body, http.StatusUnauthorized)
	resp, body = get(t, nil, page+"?token=wrong")
	wantStatus(t, resp, body, http.StatusUnauthorized)

	resp, body = get(t, nil, page, "Authorization", "Bearer s3cret")
	wantStatus(t, resp, body, http.StatusOK)
	wantText(t, body, "activity charge")

	// ?token= sets a cookie and drops the token from the address.
	jar, _ := cookiejar.New(nil)
	c := noRedirect(jar)
	resp, body = get(t, c, page+"?token=s3cret&after=0")
	wantStatus(t, resp, body, http.StatusSeeOther)
	if loc := resp.Header.Get("Location"); loc != "/norn/instances/"+f.done+"?after=0" {
		t.Fatalf("redirect to %q", loc)
	}
	resp, body = get(t, c, srv.URL+"/norn/")
	wantStatus(t, resp, body, http.StatusOK)
	resp, body = get(t, c, srv.URL+"/norn/static/viewer.css")
	wantStatus(t, resp, body, http.StatusOK)
	// The stylesheet is public, so that the 401 page is styled.
	resp, body = get(t, nil, srv.URL+"/norn/static/viewer.css")
	wantStatus(t, resp, body, http.StatusOK)
}

// csrfOf finds the hidden token of a form on a page.
func csrfOf(t *testing.T, body, action string) string {
	t.Helper()
	re := regexp.MustCompile(`(?s)action="[^"]*/` + action + `".*?name="csrf" value="([0-9a-f]+)"`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no %s form on the page", action)
	}
	return m[1]
}

func post(t *testing.T, u string, form url.Values, hdr ...string) (*http.Response, string) {
	t.Helper()
	return postWith(t, nil, u, form, hdr...)
}

// cookieClient is a client that keeps cookies (the viewer's session) and does
// not follow redirects.
func cookieClient(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return noRedirect(jar)
}

// postWith posts with client c (nil: a fresh one without cookies).
func postWith(t *testing.T, c *http.Client, u string, form url.Values, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if c == nil {
		c = noRedirect(nil)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestReadOnlyRefusesActions(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t, viewer.Options{})
	_, body := get(t, nil, srv.URL+"/instances/"+f.waiting)
	if strings.Contains(body, `action="/cancel"`) || strings.Contains(body, `action="/send"`) {
		t.Fatal("read-only page shows action forms")
	}
	wantText(t, body, "read-only")
	for _, action := range []string{"cancel", "send"} {
		resp, body := post(t, srv.URL+"/"+action, url.Values{"id": {f.waiting}, "payload": {`{"by":"x"}`}})
		wantStatus(t, resp, body, http.StatusForbidden)
	}
	info, err := f.sys.Inspect(testutil.Ctx(t, 5*time.Second), actor.PID(f.waiting))
	if err != nil {
		t.Fatal(err)
	}
	if info.CancelReason != "" || info.Status.Terminal() || info.MailboxDepth != 0 {
		t.Fatalf("read-only viewer changed the instance: %+v", info.Instance)
	}
}

func TestCancelAndSend(t *testing.T) {
	f := newFixture(t)
	ctx := testutil.Ctx(t, 20*time.Second)
	srv := f.serve(t, viewer.Options{AllowActions: true})
	c := cookieClient(t)
	_, body := get(t, c, srv.URL+"/instances/"+f.waiting)
	cancelTok, sendTok := csrfOf(t, body, "cancel"), csrfOf(t, body, "send")

	// Refused: no token, a token for another action or instance, another origin.
	for _, form := range []url.Values{
		{"id": {f.waiting}},
		{"id": {f.waiting}, "csrf": {sendTok}},
		{"id": {f.done}, "csrf": {cancelTok}},
	} {
		resp, body := postWith(t, c, srv.URL+"/cancel", form)
		wantStatus(t, resp, body, http.StatusForbidden)
	}
	resp, body := postWith(t, c, srv.URL+"/cancel", url.Values{"id": {f.waiting}, "csrf": {cancelTok}},
		"Sec-Fetch-Site", "cross-site")
	wantStatus(t, resp, body, http.StatusForbidden)
	resp, body = postWith(t, c, srv.URL+"/send", url.Values{"id": {f.waiting}, "csrf": {sendTok}, "payload": {"{not json"}})
	wantStatus(t, resp, body, http.StatusBadRequest)
	if info, _ := f.sys.Inspect(ctx, actor.PID(f.waiting)); info.CancelReason != "" || info.MailboxDepth != 0 {
		t.Fatalf("a refused action changed the instance: %+v", info.Instance)
	}

	// A direct send on a broadcast channel is the sender's mistake.
	resp, body = postWith(t, c, srv.URL+"/send", url.Values{"id": {f.waiting}, "csrf": {sendTok},
		"type": {"viewer_test.Approval"}, "channel": {"approvals"}, "payload": {`{"by": "yan"}`}})
	wantStatus(t, resp, body, http.StatusConflict)
	// Send the approval it waits for, with its type.
	resp, body = postWith(t, c, srv.URL+"/send", url.Values{"id": {f.waiting}, "csrf": {sendTok},
		"type": {"viewer_test.Approval"}, "payload": {`{"by": "zed"}`}})
	wantStatus(t, resp, body, http.StatusSeeOther)
	out, err := actor.Await(ctx, f.sys, approvalFlow, actor.PID(f.waiting))
	if err != nil || out != "approved by zed" {
		t.Fatalf("after send: %q, %v", out, err)
	}
	_, body = get(t, c, srv.URL+resp.Header.Get("Location"))
	wantText(t, body, "Message sent.", "completed", "message received (direct to PID)", "viewer_test.Approval", "from outside")

	// Cancel a fresh waiting instance.
	pid, err := actor.Spawn(ctx, f.sys, approvalFlow, Order{Customer: "dee"}, actor.WithID("approval-dee"))
	if err != nil {
		t.Fatal(err)
	}
	_, body = get(t, c, srv.URL+"/instances/approval-dee")
	tok := csrfOf(t, body, "cancel")
	resp, body = postWith(t, c, srv.URL+"/cancel", url.Values{"id": {string(pid)}, "csrf": {tok}, "reason": {"test says so"}})
	wantStatus(t, resp, body, http.StatusSeeOther)
	inst, err := f.sys.AwaitDone(ctx, pid)
	if err != nil || inst.Status != actor.StatusCancelled || inst.Error != "test says so" {
		t.Fatalf("after cancel: %+v, %v", inst, err)
	}
	// An ended instance has no actions; a stale form is answered politely.
	_, body = get(t, c, srv.URL+"/instances/approval-dee")
	if strings.Contains(body, `id="cancel-form"`) {
		t.Fatal("ended instance shows the cancel form")
	}
	wantText(t, body, "cancelled", "test says so")
	resp, body = postWith(t, c, srv.URL+"/cancel", url.Values{"id": {string(pid)}, "csrf": {tok}})
	wantStatus(t, resp, body, http.StatusSeeOther)
	_, body = get(t, c, srv.URL+resp.Header.Get("Location"))
	wantText(t, body, "Not cancelled: the instance has already ended.")
}

// The norn command serves the viewer from a client System (one that runs
// no instances) on the program's store: it reads everything, and its cancel
// is recorded in the store for the node that runs the instance. (On SQLite
// that node is not woken across Systems; it sees the request when the
// instance next activates, so the test checks the durable request.)
func TestClientSystem(t *testing.T) {
	f := newFixture(t)
	ctx := testutil.Ctx(t, 30*time.Second)
	client := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, f.path), Client: true})
	h, err := viewer.New(client, viewer.Options{AllowActions: true, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := cookieClient(t)

	_, body := get(t, c, srv.URL+"/")
	ids, _ := rows(body)
	if !slices.Contains(ids, f.done) || !slices.Contains(ids, f.waiting) || !slices.Contains(ids, f.failed) {
		t.Fatalf("client lists %v", ids)
	}
	resp, body := get(t, c, srv.URL+"/instances/"+f.done)
	wantStatus(t, resp, body, http.StatusOK)
	wantText(t, body, "activity charge", "2 attempts")

	_, body = get(t, c, srv.URL+"/instances/"+f.waiting)
	resp, body = postWith(t, c, srv.URL+"/cancel", url.Values{"id": {f.waiting}, "csrf": {csrfOf(t, body, "cancel")}})
	wantStatus(t, resp, body, http.StatusSeeOther)
	inst, err := f.sys.Instance(ctx, actor.PID(f.waiting))
	if err != nil || inst.CancelReason != "cancelled from the viewer" {
		t.Fatalf("cancel from the client: %+v, %v", inst, err)
	}
}

// Instance IDs are free text; every one gets a working link.
func TestOddIDs(t *testing.T) {
	f := newFixture(t)
	ctx := testutil.Ctx(t, 20*time.Second)
	srv := f.serve(t, viewer.Options{})
	for _, id := range []string{"a//b", "x/../y", "/lead", "trail/", "./dot", "sp ace?q=1#h%41", "ünï/cødé"} {
		pid, err := actor.Spawn(ctx, f.sys, ship, Order{Customer: id}, actor.WithID(id))
		if err != nil {
			t.Fatalf("spawn %q: %v", id, err)
		}
		if _, err := actor.Await(ctx, f.sys, ship, pid); err != nil {
			t.Fatal(err)
		}
	}
	_, body := get(t, nil, srv.URL+"/?workflow=ship")
	links := regexp.MustCompile(`<td class="id"><a href="([^"]+)">([^<]+)</a>`).FindAllStringSubmatch(body, -1)
	if len(links) != 8 {
		t.Fatalf("%d rows", len(links))
	}
	for _, l := range links {
		href, id := html.UnescapeString(l[1]), html.UnescapeString(l[2])
		resp, page := get(t, nil, srv.URL+href)
		wantStatus(t, resp, page, http.StatusOK)
		if !strings.Contains(page, `<span id="instance-id">`+html.EscapeString(id)+`</span>`) {
			t.Errorf("link %s of %q opens another page", href, id)
		}
	}
}

// On PostgreSQL, a client System's viewer reads what a node wrote, and its
// cancel wakes the node (a NOTIFY) at once.
func TestPostgres(t *testing.T) {
	pgURL := testutil.PostgresURL(t)
	open := func() *postgres.Store {
		st, err := postgres.Open(context.Background(), pgURL, postgres.Options{Logger: testutil.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	f := newFixtureOn(t, open())
	ctx := testutil.Ctx(t, 30*time.Second)
	client := testutil.StartNode(t, actor.Config{Store: open(), Client: true})
	h, err := viewer.New(client, viewer.Options{AllowActions: true, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := cookieClient(t)

	_, body := get(t, c, srv.URL+"/?status=completed")
	if ids, _ := rows(body); !slices.Equal(ids, []string{f.kid, f.done}) {
		t.Fatalf("completed: %v", ids)
	}
	resp, body := get(t, c, srv.URL+"/instances/"+f.done)
	wantStatus(t, resp, body, http.StatusOK)
	wantText(t, body, "activity reserve", "2 attempts", "child ended: completed", `"charged": 42`)
	resp, body = get(t, c, srv.URL+"/instances/"+f.waiting)
	wantStatus(t, resp, body, http.StatusOK)
	wantText(t, body, "receive timeout", "approvals broadcast")

	resp, body = postWith(t, c, srv.URL+"/cancel", url.Values{"id": {f.waiting}, "csrf": {csrfOf(t, body, "cancel")}})
	wantStatus(t, resp, body, http.StatusSeeOther)
	inst, err := f.sys.AwaitDone(ctx, actor.PID(f.waiting))
	if err != nil || inst.Status != actor.StatusCancelled {
		t.Fatalf("cancel from the client: %+v, %v", inst, err)
	}
}

// With a token, a form rendered by one viewer is accepted by another with
// the same token (a restart, a second replica), and not by one with another.
func TestFormTokensFollowTheToken(t *testing.T) {
	f := newFixture(t)
	one := f.serve(t, viewer.Options{AllowActions: true, Token: "t1"})
	two := f.serve(t, viewer.Options{AllowActions: true, Token: "t1"})
	other := f.serve(t, viewer.Options{AllowActions: true, Token: "t2"})
	_, body := get(t, nil, one.URL+"/instances/"+f.waiting, "Authorization", "Bearer t1")
	form := url.Values{"id": {f.waiting}, "csrf": {csrfOf(t, body, "send")}, "type": {"note"}, "payload": {`"hi"`}}
	resp, body := post(t, other.URL+"/send", form, "Authorization", "Bearer t2")
	wantStatus(t, resp, body, http.StatusForbidden)
	resp, body = post(t, two.URL+"/send", form, "Authorization", "Bearer t1")
	wantStatus(t, resp, body, http.StatusSeeOther)
	// Typed "note", it is not the Approval the instance waits for: it stays.
	msgs, err := f.sys.Mailbox(testutil.Ctx(t, 5*time.Second), actor.PID(f.waiting), 10)
	if err != nil || len(msgs) != 1 || string(msgs[0].Payload) != `"hi"` || msgs[0].Type != "note" {
		t.Fatalf("mailbox after the send: %+v, %v", msgs, err)
	}
	// The send form suggests the types the instance has seen and the one
	// it waits for.
	_, body = get(t, nil, two.URL+"/instances/"+f.waiting, "Authorization", "Bearer t1")
	if !strings.Contains(body, `<datalist id="msg-types"><option value="note"><option value="viewer_test.Approval"></datalist>`) {
		t.Error("the send form does not suggest the type in the mailbox and the awaited one")
	}
}
