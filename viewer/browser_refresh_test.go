package viewer_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/viewer"
)

// TestBrowserRefresh: an open instance page follows the instance by
// itself (no reload: a value the test leaves in the page survives), the
// header's counts with it; pausing holds across pages.
func TestBrowserRefresh(t *testing.T) {
	f := newFixture(t)
	ctx := testutil.Ctx(t, 60*time.Second)
	srv := f.serve(t, viewer.Options{})
	tab := browser(t)

	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/instances/"+f.waiting),
		chromedp.WaitVisible(chromedp.CSS("#status.waiting"))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(tab, chromedp.Evaluate[string](`window.nornTestMark = "same page"`)); err != nil {
		t.Fatal(err)
	}
	wantIn(t, "header counts", textOf(t, tab, "#header-counts"), "waiting 1", "completed 2")
	wantIn(t, "chart", textOf(t, tab, "#chart"), "Timeline")

	if _, err := f.sys.Publish(ctx, "approvals", Approval{By: "eve"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sys.AwaitDone(ctx, actor.PID(f.waiting)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tab, chromedp.WaitVisible(chromedp.CSS("#status.completed"))); err != nil {
		t.Fatal(err)
	}
	mark, err := chromedp.Run(tab, chromedp.Evaluate[string](`window.nornTestMark`))
	if err != nil {
		t.Fatal(err)
	}
	if mark != "same page" {
		t.Fatalf("the page was reloaded, not refreshed (mark %q)", mark)
	}
	wantIn(t, "timeline", textOf(t, tab, "#timeline"), "approved by eve")
	// The header's counts are cached a few seconds; they follow.
	testutil.Eventually(t, 30*time.Second, "the header counts the completed approval", func() bool {
		n, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(`#header-counts [data-status="completed"]`)))
		return err == nil && n == "3"
	})
	screenshot(t, tab, "instance-refreshed")

	// Pause: the choice holds on the next page.
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS("#refresh-toggle")),
		chromedp.Navigate(srv.URL+"/channels"), chromedp.WaitVisible(chromedp.CSS("#channels"))); err != nil {
		t.Fatal(err)
	}
	pressed, err := chromedp.Run(tab, chromedp.AttributeValue(chromedp.CSS("#refresh-toggle"), "aria-pressed"))
	if err != nil {
		t.Fatal(err)
	}
	if pressed.Value != "true" {
		t.Fatalf("after pausing, the next page's toggle is aria-pressed=%q", pressed.Value)
	}
	wantIn(t, "toggle", textOf(t, tab, "#refresh-toggle"), "refresh paused")
	screenshot(t, tab, "channels")
}
