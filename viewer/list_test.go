package viewer_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/viewer"
)

var rowRE = regexp.MustCompile(`<td class="id"><a href="[^"]+">([^<]+)</a>`)
var nextRE = regexp.MustCompile(`<a href="([^"]+)" id="next-page"`)

// rows lists the instance IDs of a list page and the link to the next.
func rows(body string) (ids []string, next string) {
	for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	if m := nextRE.FindStringSubmatch(body); m != nil {
		next = strings.ReplaceAll(m[1], "&amp;", "&")
	}
	return ids, next
}

func TestListFiltersAndPages(t *testing.T) {
	f := newFixture(t)
	ctx := testutil.Ctx(t, 60*time.Second)
	const ships = 110
	mid := time.Now().UTC()
	for i := range ships {
		pid, err := actor.Spawn(ctx, f.sys, ship, Order{Customer: fmt.Sprintf("c%03d", i), Amount: i})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := actor.Await(ctx, f.sys, ship, pid); err != nil {
			t.Fatal(err)
		}
	}
	srv := f.serve(t, viewer.Options{})
	list := func(query string) []string {
		t.Helper()
		resp, body := get(t, nil, srv.URL+"/?"+query)
		wantStatus(t, resp, body, http.StatusOK)
		ids, _ := rows(body)
		return ids
	}

	// Every ship instance once, over pages of 50, newest first.
	var all []string
	var pages []int
	next := "/?workflow=ship"
	for next != "" {
		resp, body := get(t, nil, srv.URL+next)
		wantStatus(t, resp, body, http.StatusOK)
		ids, n := rows(body)
		all, pages, next = append(all, ids...), append(pages, len(ids)), n
		if len(pages) > 1 && !strings.Contains(body, `id="first-page"`) {
			t.Error("a later page has no link to the first")
		}
	}
	if !slices.Equal(pages, []int{50, 50, ships + 1 - 100}) {
		t.Fatalf("page sizes %v", pages)
	}
	seen := map[string]bool{}
	for _, id := range all {
		if seen[id] {
			t.Fatalf("%s listed twice", id)
		}
		seen[id] = true
	}
	if !seen[f.kid] || seen[f.done] {
		t.Fatalf("workflow filter: kid listed %v, order listed %v", seen[f.kid], seen[f.done])
	}

	if got := list("status=failed"); !slices.Equal(got, []string{f.failed}) {
		t.Errorf("status=failed: %v", got)
	}
	if got := list("status=failed&status=waiting&workflow=approval"); !slices.Equal(got, []string{f.waiting}) {
		t.Errorf("status failed|waiting of approval: %v", got)
	}
	if got := list("input=" + url.QueryEscape("customer=c007")); len(got) != 1 || !strings.HasPrefix(got[0], "ship-") {
		t.Errorf("input customer=c007: %v", got)
	}
	// The order and its child have the same input.
	if got := list("input=" + url.QueryEscape("customer = ann, amount=42")); !slices.Equal(got, []string{f.kid, f.done}) {
		t.Errorf("input customer=ann, amount=42: %v", got)
	}
	if got := list("workflow=order&input=" + url.QueryEscape("customer=ann")); !slices.Equal(got, []string{f.done}) {
		t.Errorf("order with customer=ann: %v", got)
	}
	if got := list("parent=" + url.QueryEscape(f.done)); !slices.Equal(got, []string{f.kid}) {
		t.Errorf("parent: %v", got)
	}
	// Time ranges: the fixture's four came before mid, the ships after.
	before := list("created_before=" + url.QueryEscape(mid.Format(time.RFC3339Nano)))
	if !slices.Equal(before, []string{f.waiting, f.failed, f.kid, f.done}) {
		t.Errorf("created before mid: %v", before)
	}
	if got := list("workflow=order&created_after=" + url.QueryEscape(mid.Format(time.RFC3339Nano))); len(got) != 0 {
		t.Errorf("orders created after mid: %v", got)
	}
	if got := list("status=waiting&updated_before=2000-01-01"); len(got) != 0 {
		t.Errorf("not updated since 2000: %v", got)
	}
	if got := list("status=waiting&updated_before=2999-01-01T00:00"); !slices.Equal(got, []string{f.waiting}) {
		t.Errorf("waiting, not updated since 2999: %v", got)
	}
	resp, body := get(t, nil, srv.URL+"/?created_after=yesterday")
	wantStatus(t, resp, body, http.StatusBadRequest)
	wantText(t, body, "yesterday is not a time")

	_, body = get(t, nil, srv.URL+"/?workflow=nothing")
	wantText(t, body, "No instances match the filters.")

	resp, body = get(t, nil, srv.URL+"/?page=not-a-token")
	wantStatus(t, resp, body, http.StatusBadRequest)
	wantText(t, body, "The page token is not valid")
	resp, body = get(t, nil, srv.URL+"/?input=justaword")
	wantStatus(t, resp, body, http.StatusBadRequest)
	wantText(t, body, "justaword")
}

// A long history shows its first and last events; "more" pages on.
func TestLongHistoryIsPaged(t *testing.T) {
	f := newFixture(t)
	ctx := testutil.Ctx(t, 60*time.Second)
	const n = 1000
	pid, err := actor.Spawn(ctx, f.sys, chatty, n, actor.WithID("chatty"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Await(ctx, f.sys, chatty, pid); err != nil {
		t.Fatal(err)
	}
	srv := f.serve(t, viewer.Options{})
	seqs := func(body string) []int {
		var out []int
		for _, m := range regexp.MustCompile(`id="ev-(\d+)"`).FindAllStringSubmatch(body, -1) {
			var s int
			fmt.Sscan(m[1], &s)
			out = append(out, s)
		}
		return out
	}
	span := func(from, to int) []int {
		var out []int
		for i := from; i <= to; i++ {
			out = append(out, i)
		}
		return out
	}
	more := regexp.MustCompile(`<a href="([^"]+)" id="more"`)

	resp, body := get(t, nil, srv.URL+"/instances/chatty")
	wantStatus(t, resp, body, http.StatusOK)
	if got, want := seqs(body), append(span(0, 99), span(900, 999)...); !slices.Equal(got, want) {
		t.Fatalf("first page shows events %v…, want 0-99 and 900-999", got[:min(len(got), 5)])
	}
	wantText(t, body, "800 events not shown", "completed")
	m := more.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no link to more events")
	}
	resp, body = get(t, nil, srv.URL+m[1])
	wantStatus(t, resp, body, http.StatusOK)
	if got := seqs(body); !slices.Equal(got, span(100, 599)) {
		t.Fatalf("page after more shows %d events from %v", len(got), got[:min(len(got), 1)])
	}
	if m = more.FindStringSubmatch(body); m == nil {
		t.Fatal("no link to the next events")
	}
	_, body = get(t, nil, srv.URL+m[1])
	if got := seqs(body); !slices.Equal(got, span(600, 999)) || more.MatchString(body) {
		t.Fatalf("last page shows %d events, more link %v", len(got), more.MatchString(body))
	}
}

// An instance page asked for an ID that can never exist (a control
// character) is a 400 that says why, not a server error.
func TestInstancePageBadID(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := f.serve(t, viewer.Options{})
	resp, body := get(t, nil, srv.URL+"/instances/a%0Ab")
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400: %s", resp.StatusCode, body)
	}
	wantText(t, body, "control character")
}
