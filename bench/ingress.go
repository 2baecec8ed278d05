package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/events"
)

// runIngress: C concurrent HTTP clients post N binary-mode CloudEvents to
// the events ingress on a loopback server; each request is timed until its
// 202 (which the handler sends only after the commit). Then the store is
// asked where the events are: nobody consumes the type, so every accepted
// event must wait in the type's channel queue; the shortfall is "lost".
func runIngress(ctx context.Context, r *runner) (result, error) {
	n := size(10000, r.opts.N)
	clients := size(16, r.opts.Clients)
	res := result{N: fmtInt(int64(n)), Unit: "events/s", Metrics: map[string]float64{}}
	nd, err := r.start(ctx, actor.Config{PassivateAfter: r.opts.PassivateAfter})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()
	h, err := events.NewHandler(nd.sys)
	if err != nil {
		return res, err
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConns: clients, MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: r.opts.Timeout}
	typ := "bench.ingress-" + runID()

	r.logf("posting %d binary events from %d clients to %s", n, clients, srv.URL)
	lat := make([]time.Duration, n)
	cpu0 := processCPU()
	t0 := time.Now()
	err = parallel(ctx, n, clients, func(ctx context.Context, i int) error {
		id := strconv.Itoa(i)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, bytes.NewReader([]byte(`{"n":`+id+`}`)))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("ce-specversion", "1.0")
		req.Header.Set("ce-id", id)
		req.Header.Set("ce-source", "/bench")
		req.Header.Set("ce-type", typ)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		lat[i] = time.Since(start)
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("event %d: status %d: %s", i, resp.StatusCode, bytes.TrimSpace(body))
		}
		return nil
	})
	wall := time.Since(t0)
	// CPU per event (the whole process: clients, server, store) varies far
	// less than the rate with the machine's load.
	cpu := processCPU() - cpu0
	if err != nil {
		return res, fmt.Errorf("post: %w", err)
	}

	// Every event was acknowledged; count what the store holds.
	stats, err := nd.sys.ChannelStats(ctx)
	if err != nil {
		return res, err
	}
	stored := 0
	for _, s := range stats {
		if s.Channel == typ {
			stored = s.Waiting
		}
	}
	lost := max(0, n-stored)
	l := summarize(lat)
	res.Throughput, res.P50, res.P99, res.Wall = rate(n, wall), l.P50, l.P99, wall
	res.Metrics["lost"], res.Metrics["stored"] = float64(lost), float64(stored)
	res.Metrics["cpu_us_per_event"] = float64(cpu.Microseconds()) / float64(n)
	res.Extra = fmt.Sprintf("POST → 202 (committed); %d clients, binary mode, loopback; max %s; CPU %.0fµs/event (clients included); store check: %d of %d in the type's queue, %d lost",
		clients, fmtDur(l.Max), res.Metrics["cpu_us_per_event"], stored, n, lost)
	if stored != n {
		return res, errors.New("store check failed: acknowledged events missing from the store")
	}
	return res, nil
}
