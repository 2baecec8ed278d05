package cli

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntype"
	"github.com/nornlabs/norn/persistence"
)

// listFlags are the instance filters shared by ls, cancel and replay.
type listFlags struct {
	workflow, status, parent                   string
	since, before, updatedSince, updatedBefore string
	input                                      inputFlag
}

func addListFlags(fs *flag.FlagSet) *listFlags {
	f := &listFlags{}
	fs.StringVar(&f.workflow, "workflow", "", "only instances of this workflow")
	fs.StringVar(&f.status, "status", "", "only instances in these statuses, comma-separated ("+strings.Join(statusNames(), ", ")+")")
	fs.StringVar(&f.parent, "parent", "", "only children of this instance")
	fs.StringVar(&f.since, "since", "", "only instances created at or after this: a duration ago (90m, 24h) or a time (2006-01-02, \"2006-01-02 15:04:05 UTC\", RFC 3339; UTC unless a zone is given)")
	fs.StringVar(&f.before, "before", "", "only instances created before this (as --since)")
	fs.StringVar(&f.updatedSince, "updated-since", "", "only instances updated at or after this (as --since)")
	fs.StringVar(&f.updatedBefore, "updated-before", "", "only instances updated before this (as --since)")
	fs.Var(&f.input, "input", "only instances whose JSON input has `field=value`; a dotted field names a nested one (customer.id=7); several pairs separated by commas or repeated flags must all hold")
	return f
}

// any reports whether some filter is set.
func (f *listFlags) any() bool {
	return f.workflow != "" || f.status != "" || f.parent != "" || f.since != "" || f.before != "" ||
		f.updatedSince != "" || f.updatedBefore != "" || len(f.input) > 0
}

// query turns the flags into a query; errors are usage errors of cmd.
func (f *listFlags) query(cmd string, now time.Time) (actor.ListQuery, error) {
	q := actor.ListQuery{Workflow: f.workflow, Parent: f.parent}
	if err := firstErr(checkID(cmd, "--workflow", f.workflow, false), checkID(cmd, "--parent", f.parent, false)); err != nil {
		return q, err
	}
	if len(f.input) > 0 {
		q.Input = map[string]string(f.input)
	}
	if f.status != "" {
		for _, s := range strings.Split(f.status, ",") {
			st := norntype.Status(strings.TrimSpace(s))
			if !st.Valid() {
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

// statusNames lists every instance status, live ones first.
func statusNames() []string {
	all := norntype.Statuses()
	out := make([]string, len(all))
	for i, s := range all {
		out[i] = string(s)
	}
	return out
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
	// The tables' own format (with its zone) is accepted, so that a time
	// copied from them works; without a zone a time is UTC, as shown.
	for _, layout := range []string{time.RFC3339Nano, timeFormat, "2006-01-02 15:04:05 -07:00", "2006-01-02 15:04:05Z07:00",
		"2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
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

// inputFlag is --input: field=value pairs separated by commas, as the
// viewer's filter box takes them (persistence.ParseInputFilter), and
// repeatable.
type inputFlag map[string]string

func (f *inputFlag) String() string { return (*kvFlag)(f).String() }

func (f *inputFlag) Set(s string) error {
	m, err := persistence.ParseInputFilter(*f, s)
	if err != nil {
		return errors.New(errorText(err))
	}
	*f = m
	return nil
}

func lsCommand() *command {
	return &command{
		name: "ls", synopsis: "[filters]", summary: "list instances, filtered and paged",
		help: `Instances are listed newest first, a page at a time (--limit, at most
1000). When more remain, the token of the next page is printed on stderr
(and as "next" with --json): pass it to --page, with the same filters. Paging
neither repeats nor skips an instance while instances change. --all lists
every page.

Filters on workflow, status, parent and creation time are answered from
indexes; --updated-* and --input are checked on the instances those select.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			lf := addListFlags(fs)
			limit := fs.Int("limit", 50, "instances per page")
			page := fs.String("page", "", "continue at this page token")
			all := fs.Bool("all", false, "list every page")
			return func(args []string) error {
				if len(args) != 0 {
					return usagef("ls", "ls takes no arguments, only flags (got %q)", args[0])
				}
				if *limit <= 0 || *limit > 1000 {
					return usagef("ls", "--limit must be between 1 and 1000")
				}
				q, err := lf.query("ls", time.Now())
				if err != nil {
					return err
				}
				q.Limit, q.PageToken = *limit, *page
				return e.withClient("ls", func(c *client) error {
					var insts []norntype.Instance
					for {
						p, err := c.sys.List(e.ctx, q)
						if errors.Is(err, actor.ErrPageToken) {
							return usagef("ls", "--page: %v", err)
						}
						if err != nil {
							return err
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

func (e *env) printList(insts []norntype.Instance, next string) error {
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
