package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/viewer"
)

// viewerRenders is how many times each viewer page is fetched.
const viewerRenders = 30

var viewerStep = actor.Activity("step", func(ctx context.Context, i int) (int, error) { return i * 2, nil })

// viewerWorkflow writes about n history events: every tenth is an activity
// result (committed on its own), the others clock reads (committed with the
// next activity); then it waits for a message with an hour's timeout, so
// that its page also shows a pending timer.
var viewerWorkflow = actor.Workflow("viewer-long", func(ctx *actor.Context, n int) (int, error) {
	for i := 1; i < n-1; i++ {
		if i%10 == 0 {
			if _, err := viewerStep.Run(ctx, i); err != nil {
				return 0, err
			}
			continue
		}
		ctx.Now()
	}
	_, err := actor.Receive[string](ctx, mailbox.Timeout(time.Hour))
	return n, err
})

// runViewer: one instance with n history events (10,000 by default); the
// viewer's page for it is fetched over HTTP viewerRenders times (the first
// and last events, diagram, timers), then as many times the page after
// "more". Reports the time from request to the last byte of the page.
func runViewer(ctx context.Context, r *runner) (result, error) {
	n := size(10000, r.opts.N)
	res := result{N: fmtInt(int64(n)) + " events", Unit: "pages/s", Metrics: map[string]float64{}}
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(viewerWorkflow)})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()
	pid, err := actor.Spawn(ctx, nd.sys, viewerWorkflow, n)
	if err != nil {
		return res, err
	}
	build := time.Now()
	deadline := time.Now().Add(r.opts.Timeout)
	for {
		info, err := nd.sys.Inspect(ctx, pid)
		if err != nil {
			return res, err
		}
		if info.HistoryLen >= int64(n) {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("instance has %d of %d events after %v", info.HistoryLen, n, r.opts.Timeout)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	r.logf("history of %d events written in %v", n, time.Since(build).Round(time.Millisecond))

	h, err := viewer.New(nd.sys, viewer.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return res, err
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	page := srv.URL + "/instances/" + string(pid)
	fetch := func(u, want string) (time.Duration, int, error) {
		start := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			return 0, 0, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", u, resp.Status)
		}
		if err == nil && n > 1000 && !strings.Contains(string(b), want) {
			err = fmt.Errorf("GET %s: the page lacks %q", u, want)
		}
		return d, len(b), err
	}
	var first, more []time.Duration
	size := 0
	start := time.Now()
	for range viewerRenders {
		d, b, err := fetch(page, "events not shown")
		if err != nil {
			return res, err
		}
		first, size = append(first, d), b
	}
	for range viewerRenders {
		d, _, err := fetch(page+"?after=99", "show the next ones")
		if err != nil {
			return res, err
		}
		more = append(more, d)
	}
	wall := time.Since(start)
	f, m := summarize(first), summarize(more)
	res.Throughput = rate(2*viewerRenders, wall)
	res.P50, res.P99 = f.P50, f.P99
	res.Wall = wall
	res.Metrics["page_p50_ms"] = float64(f.P50) / float64(time.Millisecond)
	res.Metrics["page_max_ms"] = float64(f.Max) / float64(time.Millisecond)
	res.Metrics["more_p50_ms"] = float64(m.P50) / float64(time.Millisecond)
	res.Metrics["page_bytes"] = float64(size)
	res.Extra = fmt.Sprintf("instance page p50 %s max %s (%s KiB); page after \"more\" p50 %s max %s",
		fmtDur(f.P50), fmtDur(f.Max), fmtInt(int64(size/1024)), fmtDur(m.P50), fmtDur(m.Max))
	return res, nil
}
