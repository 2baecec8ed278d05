package viewer

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor"
)

// allStatuses are the filter's check boxes, in lifecycle order.
var allStatuses = []string{
	string(actor.StatusRunning), string(actor.StatusWaiting), string(actor.StatusCompensating),
	string(actor.StatusCompleted), string(actor.StatusFailed), string(actor.StatusCancelled),
}

// listData is the instance list.
type listData struct {
	pageData
	Workflow  string
	Workflows []string
	Statuses  map[string]bool
	Input     string
	Rows      []listRow
	NextURL   string
	FirstURL  string
	Filtered  bool
	Error     string
}

type listRow struct {
	ID, URL, Workflow, Parent, ParentURL, Error string
	Status                                      actor.Status
	Created, Updated                            time.Time
}

// filter is what the list's form asks for.
type filter struct {
	workflow string
	statuses []string
	input    map[string]string
	token    string
}

func parseFilter(q url.Values) (filter, string) {
	f := filter{workflow: strings.TrimSpace(q.Get("workflow")), token: q.Get("page")}
	for _, s := range q["status"] {
		if slices.Contains(allStatuses, s) && !slices.Contains(f.statuses, s) {
			f.statuses = append(f.statuses, s)
		}
	}
	var bad string
	f.input, bad = parseInputFilter(q.Get("input"))
	return f, bad
}

// parseInputFilter reads "field=value, other=value" (a field may be a
// dotted path into nested objects); it returns the first malformed part.
func parseInputFilter(s string) (map[string]string, string) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, ""
	}
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, part
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, ""
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if id := strings.TrimSpace(q.Get("id")); id != "" {
		http.Redirect(w, r, h.instanceURL(id), http.StatusSeeOther)
		return
	}
	f, bad := parseFilter(q)
	d := &listData{pageData: h.page("Instances"), Workflow: f.workflow, Workflows: h.sys.Workflows(),
		Statuses: map[string]bool{}, Input: q.Get("input"), FirstURL: h.listURL(f, "")}
	for _, s := range f.statuses {
		d.Statuses[s] = true
	}
	d.Filtered = f.workflow != "" || len(f.statuses) > 0 || len(f.input) > 0
	if bad != "" {
		d.Error = "The input filter takes field=value pairs separated by commas; " + bad + " is not one."
		h.render(w, r, http.StatusBadRequest, "list", d)
		return
	}
	rows, next, err := h.listInstances(r, f)
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
	if tok != "" {
		q.Set("page", tok)
	}
	if len(q) == 0 {
		return h.base + "/"
	}
	return h.base + "/?" + q.Encode()
}

func (h *handler) row(in actor.Instance) listRow {
	r := listRow{ID: in.ID, URL: h.instanceURL(in.ID), Workflow: in.Workflow, Status: in.Status,
		Parent: in.Parent, Error: in.Error, Created: in.CreatedAt, Updated: in.UpdatedAt}
	if in.Parent != "" {
		r.ParentURL = h.instanceURL(in.Parent)
	}
	return r
}

// listInstances reads one page of the list.
func (h *handler) listInstances(r *http.Request, f filter) ([]listRow, string, error) {
	_ = f
	_ = r
	return nil, "", nil
}
