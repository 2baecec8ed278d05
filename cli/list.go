package cli

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence"
)

// listQuery selects instances; zero fields do not filter.
type listQuery struct {
	Workflow                    string
	Statuses                    []actor.Status
	Parent                      string
	CreatedAfter, CreatedBefore time.Time
	UpdatedAfter, UpdatedBefore time.Time
	Input                       map[string]string
	Limit                       int
	PageToken                   string
}

// listPage is one page of instances and the token of the next ("" at the
// end).
type listPage struct {
	Instances []actor.Instance
	Next      string
}

// list reads one page of instances, ordered by ID.
func (c *client) list(ctx context.Context, q listQuery) (listPage, error) {
	for _, f := range []struct {
		set  bool
		name string
	}{
		{q.Parent != "", "--parent"}, {!q.CreatedAfter.IsZero(), "--since"}, {!q.CreatedBefore.IsZero(), "--before"},
		{!q.UpdatedAfter.IsZero(), "--updated-since"}, {!q.UpdatedBefore.IsZero(), "--updated-before"}, {len(q.Input) > 0, "--input"},
	} {
		if f.set {
			return listPage{}, fmt.Errorf("this build of the store cannot filter by %s", f.name)
		}
	}
	limit := q.Limit
	rows, err := c.store.List(ctx, persistence.ListFilter{Status: q.Statuses, Workflow: q.Workflow, After: q.PageToken, Limit: limit + 1})
	if err != nil {
		return listPage{}, err
	}
	var page listPage
	if len(rows) > limit {
		rows = rows[:limit]
		page.Next = rows[len(rows)-1].ID
	}
	for _, r := range rows {
		in := actor.Instance{ID: r.ID, Workflow: r.Workflow, Status: r.Status, Input: r.Input, Error: r.Error, Parent: r.Parent,
			CancelReason: r.CancelReason, Restarts: r.Restarts, Run: r.Run, HistoryLen: r.HistoryLen, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
		if r.Status == actor.StatusCompleted {
			in.Output = r.Output
		}
		if r.LeaseOwner != "" && time.Now().Before(r.LeaseExpires) {
			in.Node = r.LeaseOwner
		}
		page.Instances = append(page.Instances, in)
	}
	return page, nil
}

// listFlags are the instance filters shared by ls, cancel and replay.
type listFlags struct {
	workflow, status, parent                   string
	since, before, updatedSince, updatedBefore string
	input                                      kvFlag
}

func addListFlags(fs *flag.FlagSet) *listFlags {
	f := &listFlags{}
	fs.StringVar(&f.workflow, "workflow", "", "only instances of this workflow")
	fs.StringVar(&f.status, "status", "", "only instances in these statuses, comma-separated ("+strings.Join(statusNames(), ", ")+")")
	fs.StringVar(&f.parent, "parent", "", "only children of this instance")
	fs.StringVar(&f.since, "since", "", "only instances created at or after this: a duration ago (90m, 24h) or a time (2006-01-02, RFC 3339)")
	fs.StringVar(&f.before, "before", "", "only instances created before this (as --since)")
	fs.StringVar(&f.updatedSince, "updated-since", "", "only instances updated at or after this (as --since)")
	fs.StringVar(&f.updatedBefore, "updated-before", "", "only instances updated before this (as --since)")
	fs.Var(&f.input, "input", "only instances whose input has this top-level `field=value` (repeatable)")
	return f
}

// any reports whether some filter is set.
func (f *listFlags) any() bool {
	return f.workflow != "" || f.status != "" || f.parent != "" || f.since != "" || f.before != "" ||
		f.updatedSince != "" || f.updatedBefore != "" || len(f.input) > 0
}

// query turns the flags into a listQuery; errors are usage errors of cmd.
func (f *listFlags) query(cmd string, now time.Time) (listQuery, error) {
	q := listQuery{Workflow: f.workflow, Parent: f.parent}
	if len(f.input) > 0 {
		q.Input = map[string]string(f.input)
	}
	if f.status != "" {
		for _, s := range strings.Split(f.status, ",") {
			st := actor.Status(strings.TrimSpace(s))
			if !validStatus(st) {
				return q, usagef(cmd, "unknown status %q (want %s)", s, strings.Join(statusNames(), ", "))
			}
			q.Statuses = append(q.Statuses, st)
		}
	}
	for _, w := range []struct {
		flag, val string
		dst       *time.Time
	}{
		{"--since", f.since, &q.CreatedAfter}, {"--before", f.before, &q.CreatedBefore},
		{"--updated-since", f.updatedSince, &q.UpdatedAfter}, {"--updated-before", f.updatedBefore, &q.UpdatedBefore},
	} {
		if w.val == "" {
			continue
		}
		t, err := parseWhen(w.val, now)
		if err != nil {
			return q, usagef(cmd, "%s: %v", w.flag, err)
		}
		*w.dst = t
	}
	return q, nil
}

// allStatuses lists every instance status, live ones first.
func allStatuses() []actor.Status {
	return []actor.Status{actor.StatusRunning, actor.StatusWaiting, actor.StatusCompensating,
		actor.StatusCompleted, actor.StatusFailed, actor.StatusCancelled}
}

func statusNames() []string {
	out := make([]string, len(allStatuses()))
	for i, s := range allStatuses() {
		out[i] = string(s)
	}
	return out
}

func validStatus(s actor.Status) bool {
	for _, v := range allStatuses() {
		if v == s {
			return true
		}
	}
	return false
}

// parseWhen reads a point in time: a duration before now, a date, or an
// RFC 3339 time.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q: a negative duration", s)
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration (90m, 24h) nor a time (2006-01-02, 2006-01-02T15:04:05Z)", s)
}

// kvFlag is a repeatable key=value flag.
type kvFlag map[string]string

func (k *kvFlag) String() string {
	if k == nil || len(*k) == 0 {
		return ""
	}
	var parts []string
	for key, v := range *k {
		parts = append(parts, key+"="+v)
	}
	return strings.Join(parts, ",")
}

func (k *kvFlag) Set(s string) error {
	key, v, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return fmt.Errorf("%q is not key=value", s)
	}
	if *k == nil {
		*k = kvFlag{}
	}
	(*k)[key] = v
	return nil
}

func lsCommand() *command {
	return &command{
		name: "ls", synopsis: "[filters]", summary: "list instances, filtered and paged",
		help: `Instances are listed by ID, a page at a time (--limit). When more remain,
the token of the next page is printed on stderr (and as "next" with --json):
pass it to --page, with the same filters. --all lists every page.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			lf := addListFlags(fs)
			limit := fs.Int("limit", 50, "instances per page")
			page := fs.String("page", "", "continue at this page token")
			all := fs.Bool("all", false, "list every page")
			return func(args []string) error {
				if len(args) != 0 {
					return usagef("ls", "ls takes no arguments, only flags (got %q)", args[0])
				}
				if *limit <= 0 {
					return usagef("ls", "--limit must be positive")
				}
				q, err := lf.query("ls", time.Now())
				if err != nil {
					return err
				}
				q.Limit, q.PageToken = *limit, *page
				return e.withClient("ls", func(c *client) error {
					var insts []actor.Instance
					for {
						p, err := c.list(e.ctx, q)
						if err != nil {
							return fmt.Errorf("list instances: %w", err)
						}
						insts = append(insts, p.Instances...)
						q.PageToken = p.Next
						if !*all || p.Next == "" {
							break
						}
					}
					return e.printList(insts, q.PageToken)
				})
			}
		},
	}
}

func (e *env) printList(insts []actor.Instance, next string) error {
	if e.json {
		out := struct {
			Instances []instanceJSON `json:"instances"`
			Next      string         `json:"next,omitempty"`
		}{Instances: make([]instanceJSON, len(insts)), Next: next}
		for i, in := range insts {
			out.Instances[i] = toInstanceJSON(in)
		}
		return e.writeJSON(out)
	}
	t := newTable(e.stdout, "ID", "WORKFLOW", "STATUS", "EVENTS", "CREATED", "UPDATED")
	for _, in := range insts {
		t.row(in.ID, in.Workflow, string(in.Status), strconv.FormatInt(in.HistoryLen, 10), fmtTime(in.CreatedAt), fmtTime(in.UpdatedAt))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(e.stderr, "more: --page %s\n", next)
	}
	return nil
}
