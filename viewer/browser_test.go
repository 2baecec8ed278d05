package viewer_test

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/viewer"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "copy the instance page's screenshot to docs/viewer.png")

// browser starts a headless Chromium for the test. Without one the test
// fails, unless NORN_SKIP_BROWSER=1 says that this machine has none on
// purpose (CI installs Debian's chromium package).
func browser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("NORN_CHROMIUM")
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		if skipBrowser() {
			t.Skip("no chromium on this machine and NORN_SKIP_BROWSER=1")
		}
		t.Fatal("chromium not found: install Debian's chromium package, set NORN_CHROMIUM to a Chromium binary, or set NORN_SKIP_BROWSER=1 to skip the browser tests")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 1000),
	)
	t.Cleanup(cancelAlloc)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(tab); err != nil { // starts the browser
		t.Fatalf("start chromium %s: %v", path, err)
	}
	return tab
}

// acceptDialogs answers every confirm() of the page with OK and counts them.
func acceptDialogs(t *testing.T, tab context.Context) <-chan string {
	seen := make(chan string, 8)
	dialogs := chromedp.Events(tab, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			select {
			case seen <- ev.Message:
			default:
			}
			if _, err := chromedp.Call(tab, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true}); err != nil {
				return
			}
		}
	}()
	return seen
}

func screenshot(t *testing.T, tab context.Context, name string) string {
	t.Helper()
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100)) // quality 100 makes a PNG
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(t.TempDir(), name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
	// NORN_VIEWER_SHOTS keeps them for a look after the test.
	if dir := os.Getenv("NORN_VIEWER_SHOTS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
			t.Error(err)
		}
	}
	return p
}

func textOf(t *testing.T, tab context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// waitLocation waits until the tab's address contains part: a submitted
// form's page has replaced the one it was on.
func waitLocation(t *testing.T, tab context.Context, part string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "the address holds "+part, func() bool {
		loc, err := chromedp.Run(tab, chromedp.Location())
		return err == nil && strings.Contains(loc, part)
	})
}

func wantIn(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q; it reads:\n%s", what, w, got)
		}
	}
}

// TestBrowserListInstanceCancel drives a real Chromium through the viewer:
// the token login, the list, an instance page, and cancelling an instance.
func TestBrowserListInstanceCancel(t *testing.T) {
	f := newFixture(t)
	ctx := testutil.Ctx(t, 60*time.Second)
	srv := f.serve(t, viewer.Options{Token: "tok-123", BasePath: "/norn", AllowActions: true})
	tab := browser(t)
	dialogs := acceptDialogs(t, tab)

	// The token in the address logs in (a cookie) and is dropped from it.
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/norn/?token=tok-123"),
		chromedp.WaitVisible(chromedp.CSS("#instances"))); err != nil {
		t.Fatal(err)
	}
	loc, err := chromedp.Run(tab, chromedp.Location())
	if err != nil || strings.Contains(loc, "token") {
		t.Fatalf("location %q, %v", loc, err)
	}
	list := textOf(t, tab, "#instances")
	wantIn(t, "list", list, f.done, f.kid, f.waiting, f.failed, "completed", "waiting", "failed", "card declined")
	screenshot(t, tab, "list")

	// Filter by status: only the failed one is left.
	// The unfiltered page shows the failed one too, so wait for the
	// filtered page to replace it before looking.
	if err := chromedp.Do(tab,
		chromedp.Click(chromedp.CSS(`#filters input[name="status"][value="failed"]`)),
		chromedp.Submit(chromedp.CSS("#filters"))); err != nil {
		t.Fatal(err)
	}
	waitLocation(t, tab, "status=failed")
	if err := chromedp.Do(tab, chromedp.WaitVisible(chromedp.CSS(`#instances a[href="/norn/instances/`+f.failed+`"]`))); err != nil {
		t.Fatal(err)
	}
	list = textOf(t, tab, "#instances")
	if strings.Contains(list, f.done) || strings.Contains(list, f.waiting) {
		t.Errorf("status filter failed shows others:\n%s", list)
	}
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/norn/"), chromedp.WaitVisible(chromedp.CSS("#instances"))); err != nil {
		t.Fatal(err)
	}

	// list → the completed order.
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(`#instances a[href="/norn/instances/`+f.done+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#timeline"))); err != nil {
		t.Fatal(err)
	}
	wantIn(t, "status", textOf(t, tab, "#status"), "completed")
	wantIn(t, "timeline", textOf(t, tab, "#timeline"), "activity reserve", "2 attempts", "activity charge", "child spawned")
	shot := screenshot(t, tab, "instance-completed")
	if *updateScreenshot {
		b, err := os.ReadFile(shot)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "docs", "viewer.png"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Search opens the waiting instance; cancel it.
	if err := chromedp.Do(tab,
		chromedp.SetValue(chromedp.CSS("#search-id"), f.waiting),
		chromedp.Submit(chromedp.CSS("#search-id")),
		chromedp.WaitVisible(chromedp.CSS("#cancel-form"))); err != nil {
		t.Fatal(err)
	}
	wantIn(t, "status", textOf(t, tab, "#status"), "waiting")
	wantIn(t, "timers", textOf(t, tab, "#timers"), "receive timeout")
	screenshot(t, tab, "instance-waiting")
	if err := chromedp.Do(tab,
		chromedp.SetValue(chromedp.CSS(`#cancel-form input[name="reason"]`), "clicked in a browser"),
		chromedp.Click(chromedp.CSS("#cancel")),
		chromedp.WaitVisible(chromedp.CSS("#flash"))); err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-dialogs:
		wantIn(t, "confirm dialog", msg, "Cancel "+f.waiting)
	default:
		t.Error("cancel did not ask for confirmation")
	}
	wantIn(t, "flash", textOf(t, tab, "#flash"), "Cancel requested.")
	inst, err := f.sys.AwaitDone(ctx, actor.PID(f.waiting))
	if err != nil || inst.Status != actor.StatusCancelled || inst.Error != "clicked in a browser" {
		t.Fatalf("after the click: %+v, %v", inst, err)
	}
	// The page shows the end after a reload.
	if err := chromedp.Do(tab, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#timeline"))); err != nil {
		t.Fatal(err)
	}
	wantIn(t, "status", textOf(t, tab, "#status"), "cancelled")
	wantIn(t, "timeline", textOf(t, tab, "#timeline"), "cancelled")
	screenshot(t, tab, "instance-cancelled")
}
