package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/cli"
	"github.com/nornlabs/norn/persistence"
)

// cliRepeats is how often each command is timed.
const cliRepeats = 20

// runCLI measures the norn command's answers over a store holding -n
// instances (default 100,000), loaded as the list workload loads them:
// ls's first page, unfiltered, by workflow and status, and by workflow
// and an input field, and show and history of an instance with a history.
// Each figure is the whole command as cli.Run runs it in this process
// (open the store, start a client System, query, print, stop), without
// starting a process.
func runCLI(ctx context.Context, r *runner) (result, error) {
	n := size(100_000, r.opts.N)
	res := result{N: fmtInt(int64(n)) + " instances", Unit: "commands/s"}
	node, err := r.start(ctx, actor.Config{Client: true})
	if err != nil {
		return res, err
	}
	defer func() { _ = node.Close() }()
	u := node.t.url
	if node.t.temp() {
		u = node.path
	}
	r.logf("loading %d instances", n)
	start := time.Now()
	if err := loadInstances(ctx, node.t, node.path, n, listRows(n, time.Now())); err != nil {
		return res, fmt.Errorf("load instances: %w", err)
	}
	r.logf("loaded %d instances in %v", n, time.Since(start).Round(time.Millisecond))
	one := "cli-" + runID()
	if err := writeHistory(ctx, node.store, one, 20); err != nil {
		return res, fmt.Errorf("write %s: %w", one, err)
	}

	commands := []struct {
		label string
		args  []string
	}{
		{"ls", []string{"ls"}},
		{"ls --workflow --status", []string{"ls", "--workflow", "payment", "--status", "waiting"}},
		// One order in 90,000 has this customer: the page reads every
		// order's input.
		{"ls --workflow --input", []string{"ls", "--workflow", "order", "--input", "customer.id=c18"}},
		{"show", []string{"show", one}},
		{"history", []string{"history", one}},
	}
	var extra []string
	var all []time.Duration
	res.Metrics = map[string]float64{}
	for _, c := range commands {
		args := append([]string{"--store", u}, c.args...)
		var ds []time.Duration
		for range cliRepeats {
			t0 := time.Now()
			if code := cli.Run(ctx, args, cli.Options{Stdout: io.Discard, Stderr: io.Discard}); code != cli.ExitOK {
				return res, fmt.Errorf("norn %s: exit code %d", strings.Join(c.args, " "), code)
			}
			ds = append(ds, time.Since(t0))
		}
		l := summarize(ds)
		all = append(all, ds...)
		extra = append(extra, fmt.Sprintf("%s p50 %s", c.label, fmtDur(l.P50)))
		res.Metrics[strings.ReplaceAll(c.label, " ", "")+"_p50_ms"] = float64(l.P50) / float64(time.Millisecond)
	}
	l := summarize(all)
	res.P50, res.P99 = l.P50, l.P99
	res.Throughput = float64(time.Second) / float64(l.Mean)
	res.Extra = strings.Join(extra, "; ")
	return res, nil
}

// writeHistory writes, through the store, an instance waiting with a
// history of events activity results.
func writeHistory(ctx context.Context, st persistence.Store, id string, events int) error {
	input := []byte(`{"customer":{"id":"c1"}}`)
	inst := persistence.Instance{ID: id, Workflow: "order", Status: persistence.StatusWaiting, Input: input, HistoryLen: 1}
	if _, err := st.Apply(ctx, persistence.Step{Create: &inst,
		History: []persistence.Event{{Seq: 0, Kind: actor.EventStarted, Name: "order", Ref: "json", Payload: input, At: time.Now()}}}); err != nil {
		return err
	}
	for seq := int64(1); seq <= int64(events); seq++ {
		_, err := st.Apply(ctx, persistence.Step{Instance: id, History: []persistence.Event{{Seq: seq, Kind: actor.EventActivity,
			Name: "charge", Ref: fmt.Sprintf("charge:%d", seq), Payload: []byte(`{"ok":true}`), At: time.Now()}}})
		if err != nil {
			return err
		}
	}
	return nil
}
