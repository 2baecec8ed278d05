package viewer_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/viewer"
)

// TestChannelsPage lists the fixture's subscribed channel and a queue
// nobody consumes, with its waiting messages and their age.
func TestChannelsPage(t *testing.T) {
	f := newFixture(t)
	ctx := testutil.Ctx(t, 10*time.Second)
	for range 3 {
		if _, err := f.sys.Publish(ctx, "invoices", "unread"); err != nil {
			t.Fatal(err)
		}
	}
	srv := f.serve(t, viewer.Options{BasePath: "/norn"})
	resp, body := get(t, nil, srv.URL+"/norn/channels")
	wantStatus(t, resp, body, http.StatusOK)
	wantText(t, body, "Channels and queues", "approvals broadcast 1 0", "invoices none 0 3 no consumer", "ago", "2 channels 3")
	if !strings.Contains(body, `<tr class="stuck">`) {
		t.Error("the queue nobody consumes is not marked")
	}
	if !strings.Contains(body, `data-refresh="5"`) || !strings.Contains(body, `id="refresh-toggle"`) {
		t.Error("the channels page does not refresh itself")
	}
}

// TestCountsInHeaderAndPage: every page's header counts the instances by
// status, linking to the filtered list; the counts page has the workflow ×
// status table.
func TestCountsInHeaderAndPage(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t, viewer.Options{})
	// The fixture: order and its child completed, fragile failed,
	// approval waiting (parked in its receive).
	for _, path := range []string{"/", "/instances/" + f.done, "/channels", "/counts"} {
		resp, body := get(t, nil, srv.URL+path)
		wantStatus(t, resp, body, http.StatusOK)
		wantText(t, body, "waiting 1 completed 2 failed 1 total 4")
		if !strings.Contains(body, `href="/?status=failed"`) {
			t.Errorf("%s: the header's failed count does not link to the failed instances", path)
		}
	}
	resp, body := get(t, nil, srv.URL+"/counts")
	wantStatus(t, resp, body, http.StatusOK)
	wantText(t, body, "approval 0 1 0 0 0 0 1", "fragile 0 0 0 0 1 0 1", "order 0 0 0 1 0 0 1", "ship 0 0 0 1 0 0 1")
	if !strings.Contains(body, `href="/?status=failed&amp;workflow=fragile"`) {
		t.Error("a count does not link to its instances")
	}
	// Error pages (an unauthorised request) show no counts.
	srv2 := f.serve(t, viewer.Options{Token: "secret"})
	resp, body = get(t, nil, srv2.URL+"/counts")
	wantStatus(t, resp, body, http.StatusUnauthorized)
	if strings.Contains(body, "header-counts") {
		t.Error("the 401 page shows the counts")
	}
}
