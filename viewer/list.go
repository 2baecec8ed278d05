package viewer

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntype"
	"github.com/nornlabs/norn/persistence"
)

// allStatuses are the filter's check boxes, in lifecycle order.
var allStatuses = []string{
	string(norntype.StatusRunning), string(norntype.StatusWaiting), string(norntype.StatusCompensating),
	string(norntype.StatusCompleted), string(norntype.StatusFailed), string(norntype.StatusCancelled),
}

// listData is the instance list.
type listData struct {
	pageData
	Workflow  string
	Parent    string
	Workflows []string
	Statuses  map[string]bool
	Input     string
	// The time filters as given.
	CreatedAfter, CreatedBefore, UpdatedBefore string
	Rows                                       []listRow
	NextURL                                    string
	FirstURL                                   string
	Filtered                                   bool
	Paged                                      bool // not the first page
	Error                                      string
	// Startable are the workflows the start form offers (actions on).
	Startable []string
}

type listRow struct {
	ID, URL, Workflow, Parent, ParentURL, Error string
	Status                                      norntype.Status
	Created, Updated                            time.Time
}

// filter is what the list's form asks for.
type filter struct {
	workflow string
	parent   string
	statuses []string
	input    map[string]string
	// Times as given (UTC), and parsed.
	createdAfter, createdBefore, updatedBefore string
	ca, cb, ub                                 time.Time
	token                                      string
}

// timeLayouts are what the time filters accept: a datetime-local field's
// value, with or without seconds, or a date. Times are UTC.
var timeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02", time.RFC3339}

// Stores keep times as nanoseconds since 1970 in an int64; a bound beyond
// them would wrap around, so it is clamped.
var (
	minTime = time.Unix(0, 0).UTC()
	maxTime = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)
)

func parseTime(s string) (time.Time, bool) {
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			t = t.UTC()
			if t.Before(minTime) {
				t = minTime
			}
			if t.After(maxTime) {
				t = maxTime
			}
			return t, true
		}
	}
	return time.Time{}, false
}

func parseFilter(q url.Values) (filter, string) {
	f := filter{workflow: strings.TrimSpace(q.Get("workflow")), parent: strings.TrimSpace(q.Get("parent")), token: q.Get("page")}
	for _, s := range q["status"] {
		if slices.Contains(allStatuses, s) && !slices.Contains(f.statuses, s) {
			f.statuses = append(f.statuses, s)
		}
	}
	in, err := persistence.ParseInputFilter(nil, q.Get("input"))
	if err != nil {
		var ie *persistence.InvalidError
		reason := err.Error()
		if errors.As(err, &ie) {
			reason = ie.Reason
		}
		return f, "The input filter takes field=value pairs separated by commas (as norn ls --input does): " + reason + "."
	}
	f.input = in
	for _, tf := range []struct {
		param string
		raw   *string
		t     *time.Time
	}{{"created_after", &f.createdAfter, &f.ca}, {"created_before", &f.createdBefore, &f.cb}, {"updated_before", &f.updatedBefore, &f.ub}} {
		*tf.raw = strings.TrimSpace(q.Get(tf.param))
		if *tf.raw == "" {
			continue
		}
		t, ok := parseTime(*tf.raw)
		if !ok {
			return f, *tf.raw + " is not a time: use 2006-01-02T15:04 (UTC)."
		}
		*tf.t = t
	}
	return f, ""
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if id := strings.TrimSpace(q.Get("id")); id != "" {
		http.Redirect(w, r, h.instanceURL(id), http.StatusSeeOther)
		return
	}
	f, bad := parseFilter(q)
	d := &listData{pageData: h.page("Instances"), Workflow: f.workflow, Parent: f.parent, Workflows: h.sys.Workflows(), Startable: h.startable(),
		Statuses: map[string]bool{}, Input: q.Get("input"), FirstURL: h.listURL(f, ""),
		CreatedAfter: f.createdAfter, CreatedBefore: f.createdBefore, UpdatedBefore: f.updatedBefore}
	d.Nav, d.Refresh = "instances", true
	h.header(r.Context(), &d.pageData)
	for _, s := range f.statuses {
		d.Statuses[s] = true
	}
	d.Filtered = f.workflow != "" || f.parent != "" || len(f.statuses) > 0 || len(f.input) > 0 ||
		f.createdAfter != "" || f.createdBefore != "" || f.updatedBefore != ""
	d.Paged = f.token != ""
	if bad != "" {
		d.Error = bad
		h.render(w, r, http.StatusBadRequest, "list", d)
		return
	}
	rows, next, err := h.listInstances(r.Context(), f)
	if errors.Is(err, actor.ErrPageToken) {
		d.Error = "The page token is not valid; start again from the first page."
		h.render(w, r, http.StatusBadRequest, "list", d)
		return
	}
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	d.Rows = rows
	if next != "" {
		d.NextURL = h.listURL(f, next)
	}
	h.render(w, r, http.StatusOK, "list", d)
}

// listURL is the list page for f at page token tok.
func (h *handler) listURL(f filter, tok string) string {
	q := url.Values{}
	if f.workflow != "" {
		q.Set("workflow", f.workflow)
	}
	if f.parent != "" {
		q.Set("parent", f.parent)
	}
	for _, s := range f.statuses {
		q.Add("status", s)
	}
	if len(f.input) > 0 {
		keys := make([]string, 0, len(f.input))
		for k := range f.input {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + f.input[k]
		}
		q.Set("input", strings.Join(parts, ", "))
	}
	for k, v := range map[string]string{"created_after": f.createdAfter, "created_before": f.createdBefore, "updated_before": f.updatedBefore} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if tok != "" {
		q.Set("page", tok)
	}
	if len(q) == 0 {
		return h.base + "/"
	}
	return h.base + "/?" + q.Encode()
}

func (h *handler) row(in norntype.Instance) listRow {
	r := listRow{ID: in.ID, URL: h.instanceURL(in.ID), Workflow: in.Workflow, Status: in.Status,
		Parent: in.Parent, Error: in.Error, Created: in.CreatedAt, Updated: in.UpdatedAt}
	if in.Parent != "" {
		r.ParentURL = h.instanceURL(in.Parent)
	}
	return r
}

// listPage is how many instances the list shows at once.
const listPage = 50

// listInstances reads one page of the list and the token of the next.
func (h *handler) listInstances(ctx context.Context, f filter) ([]listRow, string, error) {
	q := actor.ListQuery{Workflow: f.workflow, Parent: f.parent, Input: f.input, Limit: listPage, PageToken: f.token,
		CreatedAfter: f.ca, CreatedBefore: f.cb, UpdatedBefore: f.ub}
	for _, s := range f.statuses {
		q.Statuses = append(q.Statuses, norntype.Status(s))
	}
	page, err := h.sys.List(ctx, q)
	if err != nil {
		return nil, "", err
	}
	rows := make([]listRow, len(page.Instances))
	for i, in := range page.Instances {
		rows[i] = h.row(in)
	}
	return rows, page.Next, nil
}
