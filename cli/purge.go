package cli

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nornlabs/norn/norntype"
	"github.com/nornlabs/norn/persistence"
)

// Purge batches: by default as a node's retention loop purges (batches of
// 100, resting after each as long as it took), so that running nodes keep
// their throughput; with --fast, batches of 500 back to back, which on
// SQLite takes most of the one writer's time while it runs.
const (
	purgeBatch     = 100
	purgeFastBatch = 500
)

type purgeStatusCount struct {
	Status norntype.Status `json:"status"`
	Count  int             `json:"count"`
}

type purgeResult struct {
	DryRun   bool               `json:"dry_run,omitempty"`
	Before   time.Time          `json:"before"`
	Workflow string             `json:"workflow,omitempty"`
	Selected []purgeStatusCount `json:"selected,omitempty"` // with --dry-run, by status
	Count    int                `json:"count"`              // purged, or would be with --dry-run
}

func purgeCommand() *command {
	return &command{
		name: "purge", synopsis: "(--older-than DURATION | --before TIME) [--workflow W] [--status S,...] [--dry-run]",
		summary: "delete ended instances and their history for good",
		help: `Deletes the instances that ended (completed, failed, cancelled) before a
cut-off, with their history, leftover mail, timers, subscriptions and
delivered outgoing events. Live instances are never purged, whatever the
filters; outgoing events not yet delivered are kept until they are. A
purged instance reads as not found; its children, if still running, keep
running.

Nodes purge on their own what ended longer ago than their Retention
(default 30 days); purge is for a one-off clean-up or a shorter cut-off.
The cut-off is --older-than (a duration: 90m, 72h, 30d) or --before (a
time: 2006-01-02, RFC 3339). --dry-run counts what would be purged, by
status, and deletes nothing. Deletion goes in small transactions with a
rest after each as long as it took, so that running nodes keep their
throughput; --fast deletes in larger transactions back to back (a store
no node uses, or off-peak). A bar shows progress on a terminal.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			workflow := fs.String("workflow", "", "only instances of this workflow")
			status := fs.String("status", "", "only instances in these ended statuses, comma-separated (completed, failed, cancelled)")
			olderThan := fs.String("older-than", "", "purge instances that ended longer ago than this (90m, 72h, 30d)")
			before := fs.String("before", "", "purge instances that ended before this time (2006-01-02, RFC 3339)")
			dry := fs.Bool("dry-run", false, "count what would be purged and purge nothing")
			fast := fs.Bool("fast", false, "purge in larger batches without resting between them (slows running nodes meanwhile)")
			return func(args []string) error {
				f, err := purgeFilter(args, *workflow, *status, *olderThan, *before, time.Now())
				if err != nil {
					return err
				}
				st, _, err := e.openStore("purge", false)
				if err != nil {
					return err
				}
				defer st.Close()
				if *dry {
					return e.purgeDryRun(st, f)
				}
				if *fast {
					f.Limit = purgeFastBatch
				}
				return e.purge(st, f, !*fast)
			}
		},
	}
}

// purgeFilter checks the command line and turns it into a filter; errors
// are usage errors.
func purgeFilter(args []string, workflow, status, olderThan, before string, now time.Time) (persistence.PurgeFilter, error) {
	f := persistence.PurgeFilter{Workflow: workflow, Limit: purgeBatch}
	switch {
	case len(args) > 0:
		return f, usagef("purge", "purge takes no arguments (got %q); select with --older-than or --before and the filters", args[0])
	case olderThan == "" && before == "":
		return f, usagef("purge", "give a cut-off: --older-than DURATION or --before TIME")
	case olderThan != "" && before != "":
		return f, usagef("purge", "give --older-than or --before, not both")
	case olderThan != "":
		d, err := parseAge(olderThan)
		if err != nil {
			return f, usagef("purge", "--older-than: %v", err)
		}
		f.Before = now.Add(-d)
	default:
		t, err := parseWhen(before, now)
		if err != nil {
			return f, usagef("purge", "--before: %v", err)
		}
		if t.After(now) {
			return f, usagef("purge", "--before: %s is in the future", before)
		}
		f.Before = t
	}
	if status != "" {
		for _, s := range strings.Split(status, ",") {
			st := norntype.Status(strings.TrimSpace(s))
			if !st.Terminal() {
				return f, usagef("purge", "--status: %q is not an ended status (completed, failed, cancelled); live instances are never purged", s)
			}
			f.Statuses = append(f.Statuses, st)
		}
	}
	if err := f.Validate(); err != nil {
		return f, usagef("purge", "%v", strings.TrimPrefix(err.Error(), "norn: invalid input: "))
	}
	return f, nil
}

// parseAge reads a positive duration: Go's syntax (90m, 72h) or a number
// of days (30d).
func parseAge(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		n, nerr := strconv.Atoi(days)
		if nerr != nil || n > 100*365 {
			return 0, fmt.Errorf("%q: want a whole number of days (30d), at most 36500", s)
		}
		d, err = time.Duration(n)*24*time.Hour, nil
	}
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration (90m, 72h, 30d)", s)
	case d <= 0:
		return 0, fmt.Errorf("%q: the duration must be positive", s)
	}
	return d, nil
}

// purgeDryRun counts what a purge would delete, by status.
func (e *env) purgeDryRun(st persistence.Purger, f persistence.PurgeFilter) error {
	res := purgeResult{DryRun: true, Before: f.Before.UTC(), Workflow: f.Workflow, Selected: []purgeStatusCount{}}
	for _, s := range f.EndedStatuses() {
		one := f
		one.Statuses = []norntype.Status{s}
		n, err := st.CountPurgeable(e.ctx, one)
		if err != nil {
			return fmt.Errorf("count purgeable instances: %w", err)
		}
		res.Selected = append(res.Selected, purgeStatusCount{Status: s, Count: n})
		res.Count += n
	}
	if e.json {
		return e.writeJSON(res)
	}
	for _, c := range res.Selected {
		fmt.Fprintf(e.stdout, "%-10s %d\n", c.Status, c.Count)
	}
	fmt.Fprintf(e.stdout, "would purge %d instances that ended before %s\n", res.Count, res.Before.Format(time.RFC3339))
	return nil
}

// purge deletes, batch by batch, what f selects, until a batch finds
// nothing: the cut-off is fixed, so instances that end meanwhile are not
// chased. paced rests after each batch as long as it took.
func (e *env) purge(st persistence.Purger, f persistence.PurgeFilter, paced bool) error {
	total, err := st.CountPurgeable(e.ctx, f)
	if err != nil {
		return fmt.Errorf("count purgeable instances: %w", err)
	}
	res := purgeResult{Before: f.Before.UTC(), Workflow: f.Workflow}
	bar := e.progress("purging", total)
	for {
		start := time.Now()
		n, err := st.PurgeInstances(e.ctx, f)
		res.Count += n
		bar.add(n)
		if err == nil && n > 0 && paced {
			select {
			case <-e.ctx.Done():
				err = e.ctx.Err()
			case <-time.After(time.Since(start)):
			}
		}
		if err != nil {
			bar.finish()
			if errors.Is(err, e.ctx.Err()) {
				err = e.ctx.Err()
			}
			return fmt.Errorf("purge stopped after %d instances: %w", res.Count, err)
		}
		if n == 0 {
			break
		}
	}
	bar.finish()
	if e.json {
		return e.writeJSON(res)
	}
	fmt.Fprintf(e.stdout, "purged %d instances that ended before %s\n", res.Count, res.Before.Format(time.RFC3339))
	return nil
}

// add counts n items done at once (a purge batch).
func (p *progress) add(n int) {
	if n <= 0 {
		return
	}
	// Other instances may end or be purged by the nodes meanwhile: the bar
	// never runs past its total.
	if p.done+n > p.total {
		p.total = p.done + n
	}
	p.done += n - 1
	p.step()
}
