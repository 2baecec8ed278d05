package viewer_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/viewer"
)

// A form token is bound to the browser session it was rendered for and
// expires after ActionTokenTTL: a replay from another session, without the
// session cookie, or too late is refused, and changes nothing.
func TestActionTokensExpireAndBindToTheSession(t *testing.T) {
	f := newFixture(t)
	start := time.Now()
	var offset atomic.Int64 // what the viewer's clock is ahead by
	h, err := viewer.New(f.sys, viewer.Options{AllowActions: true, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	viewer.SetClock(h, func() time.Time { return start.Add(time.Duration(offset.Load())) })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	alice, mallory := cookieClient(t), cookieClient(t)
	_, body := get(t, alice, srv.URL+"/instances/"+f.waiting)
	form := url.Values{"id": {f.waiting}, "csrf": {csrfOf(t, body, "send")}, "type": {"note"}, "payload": {`"hi"`}}
	get(t, mallory, srv.URL+"/") // mallory has a session of her own

	resp, body := postWith(t, mallory, srv.URL+"/send", form)
	wantStatus(t, resp, body, http.StatusForbidden)
	wantText(t, body, "not valid for this browser session")
	resp, body = post(t, srv.URL+"/send", form) // no session cookie at all
	wantStatus(t, resp, body, http.StatusForbidden)

	offset.Store(int64(viewer.DefaultActionTokenTTL + time.Second))
	resp, body = postWith(t, alice, srv.URL+"/send", form)
	wantStatus(t, resp, body, http.StatusForbidden)
	wantText(t, body, "Form expired", "older than 15m0s")
	msgs, err := f.sys.Mailbox(testutil.Ctx(t, 5*time.Second), actor.PID(f.waiting), 10)
	if err != nil || len(msgs) != 0 {
		t.Fatalf("refused sends delivered %+v, %v", msgs, err)
	}

	// Within its lifetime, in its session, the same token works.
	offset.Store(int64(viewer.DefaultActionTokenTTL - time.Second))
	resp, body = postWith(t, alice, srv.URL+"/send", form)
	wantStatus(t, resp, body, http.StatusSeeOther)
	msgs, err = f.sys.Mailbox(testutil.Ctx(t, 5*time.Second), actor.PID(f.waiting), 10)
	if err != nil || len(msgs) != 1 || msgs[0].Type != "note" {
		t.Fatalf("mailbox after the send: %+v, %v", msgs, err)
	}
}

// ActionTokenTTL sets the lifetime; a negative one is refused.
func TestActionTokenTTLOption(t *testing.T) {
	f := newFixture(t)
	if _, err := viewer.New(f.sys, viewer.Options{ActionTokenTTL: -time.Minute}); err == nil {
		t.Fatal("New accepted a negative ActionTokenTTL")
	}
	start := time.Now()
	var offset atomic.Int64
	h, err := viewer.New(f.sys, viewer.Options{AllowActions: true, ActionTokenTTL: time.Minute, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	viewer.SetClock(h, func() time.Time { return start.Add(time.Duration(offset.Load())) })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := cookieClient(t)
	_, body := get(t, c, srv.URL+"/instances/"+f.waiting)
	form := url.Values{"id": {f.waiting}, "csrf": {csrfOf(t, body, "cancel")}}
	offset.Store(int64(2 * time.Minute))
	resp, body := postWith(t, c, srv.URL+"/cancel", form)
	wantStatus(t, resp, body, http.StatusForbidden)
	wantText(t, body, "older than 1m0s")
}

// An action naming an ID no instance can have is a bad request.
func TestActionRefusesControlCharactersInIDs(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t, viewer.Options{AllowActions: true})
	c := cookieClient(t)
	_, body := get(t, c, srv.URL+"/instances/"+f.waiting)
	for _, action := range []string{"cancel", "send"} {
		resp, body := postWith(t, c, srv.URL+"/"+action, url.Values{"id": {f.waiting + "\n"}, "csrf": {csrfOf(t, body, action)}, "payload": {"1"}})
		wantStatus(t, resp, body, http.StatusBadRequest)
		wantText(t, body, "Bad instance ID")
	}
	// A cancel reason the store refuses is the sender's mistake too.
	resp, body := postWith(t, c, srv.URL+"/cancel", url.Values{"id": {f.waiting}, "csrf": {csrfOf(t, body, "cancel")}, "reason": {"a\x00b"}})
	wantStatus(t, resp, body, http.StatusBadRequest)
}
