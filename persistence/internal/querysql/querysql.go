package querysql

import (
	"slices"
	"strconv"
	"strings"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/rowcodec"
)

// Index names, the same in both drivers' migrations.
const (
	IndexCreated         = "instances_created"
	IndexStatusCreated   = "instances_status_created"
	IndexWorkflowCreated = "instances_workflow_status_created"
	IndexParentCreated   = "instances_parent_created"
)

// Dialect is what differs between the drivers.
type Dialect struct {
	// Param is the placeholder of the n-th argument, counted from 1.
	Param func(n int) string
	// Hint follows the table name to pin the index a branch must use
	// (SQLite's INDEXED BY), or is nil.
	Hint func(index string) string
	// InputMatch is a condition true when the input's field at path
	// (a placeholder bound to the path, as PathArg made it) equals value
	// (a placeholder), as persistence.InstanceQuery.Input describes.
	InputMatch func(path, value string) string
	// PathArg is the argument bound to a path.
	PathArg func(path []string) any
	// StatusByWorkflow says the driver has neither a (created_at, id) nor
	// a (status, created_at, id) index: a listing without a workflow or
	// parent reads one range of (workflow, status, created_at, id) per
	// workflow in the store (the caller reads them first, see Workflows)
	// and status (each status, without a status filter), merged.
	StatusByWorkflow bool
	// Contains is a condition true when the input's bytes contain those
	// of value (a placeholder bound to them): a cheap test that spares
	// reading as JSON the inputs that cannot match.
	Contains func(value string) string
	// StatusLiterals says statuses are written as literals, not bound to
	// placeholders: the driver's index of (workflow, status, created_at,
	// id) leaves running instances out (its index of unsettled
	// instances, by workflow, status and creation time, holds them), and
	// a planner uses a partial index only where the query's constants
	// imply its condition, in a generic plan too.
	StatusLiterals bool
}

// literal reports whether every JSON encoder in use writes v as it is
// inside a string or number: printable ASCII that Go's encoding/json (the
// JSON codec) does not escape. For such a value, an input whose field
// equals it holds its bytes; for another (a quote, <, non-ASCII, …) the
// field may hold an escape instead, and only the JSON test decides.
func literal(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return v != ""
}

type builder struct {
	d    Dialect
	args []any
}

func (b *builder) arg(v any) string {
	b.args = append(b.args, v)
	return b.d.Param(len(b.args))
}

// status is a condition's status: a literal with StatusLiterals (only a
// status of the closed set is written so), else a placeholder.
func (b *builder) status(st string) string {
	if b.d.StatusLiterals && slices.Contains(persistence.Statuses(), persistence.Status(st)) {
		return "'" + st + "'"
	}
	return b.arg(st)
}

// Instances builds the statement selecting columns for q, which must be
// valid (q.Validate). With a dialect with StatusByWorkflow, a query
// without workflow or parent reads the workflows given (the store's, read
// with Workflows), which must not be empty.
func Instances(d Dialect, columns string, q persistence.InstanceQuery, workflows ...string) (string, []any) {
	b := &builder{d: d}
	limit := b.arg(int64(q.PageLimit()))
	var common []string
	if !q.CreatedAfter.IsZero() {
		common = append(common, "created_at >= "+b.arg(rowcodec.NS(q.CreatedAfter)))
	}
	// The page position and CreatedBefore are both upper bounds, and
	// databases bound an index range by one of them only: keep the lower,
	// which implies the other.
	switch {
	case q.After != nil && (q.CreatedBefore.IsZero() || q.After.CreatedAt.Before(q.CreatedBefore)):
		common = append(common, "(created_at, id) < ("+b.arg(rowcodec.NS(q.After.CreatedAt))+", "+b.arg(q.After.ID)+")")
	case !q.CreatedBefore.IsZero():
		common = append(common, "created_at < "+b.arg(rowcodec.NS(q.CreatedBefore)))
	}
	if !q.UpdatedAfter.IsZero() {
		common = append(common, "updated_at >= "+b.arg(rowcodec.NS(q.UpdatedAfter)))
	}
	if !q.UpdatedBefore.IsZero() {
		common = append(common, "updated_at < "+b.arg(rowcodec.NS(q.UpdatedBefore)))
	}
	for _, c := range q.InputConditions() {
		if literal(c.Value) {
			common = append(common, d.Contains(b.arg([]byte(c.Value))))
		}
		common = append(common, d.InputMatch(b.arg(d.PathArg(c.Path)), b.arg(c.Value)))
	}
	var statuses []string
	for _, st := range q.Statuses {
		if !slices.Contains(statuses, string(st)) {
			statuses = append(statuses, string(st))
		}
	}
	order := " ORDER BY created_at DESC, id DESC LIMIT " + limit
	// Each branch reads one index range; several are merged.
	type branch struct {
		index string
		conds []string
	}
	var branches []branch
	add := func(index string, conds ...string) { branches = append(branches, branch{index, conds}) }
	if len(statuses) == 0 && q.Parent == "" && (q.Workflow != "" || d.StatusByWorkflow) {
		for _, st := range persistence.Statuses() {
			statuses = append(statuses, string(st))
		}
	}
	switch {
	case q.Parent != "":
		// A parent's children are few: the status and workflow are
		// checked on them. The literal condition on parent lets SQLite use
		// the partial index.
		conds := []string{"parent = " + b.arg(q.Parent), "parent != ''"}
		if q.Workflow != "" {
			conds = append(conds, "workflow = "+b.arg(q.Workflow))
		}
		if len(statuses) > 0 {
			ph := make([]string, len(statuses))
			for i, st := range statuses {
				ph[i] = b.arg(st)
			}
			conds = append(conds, "status IN ("+strings.Join(ph, ", ")+")")
		}
		add(IndexParentCreated, conds...)
	case q.Workflow != "":
		wf := b.arg(q.Workflow)
		for _, st := range statuses {
			add(IndexWorkflowCreated, "workflow = "+wf, "status = "+b.status(st))
		}
	case d.StatusByWorkflow:
		// One range per workflow and status, merged: each is read only
		// as far as the page needs.
		for _, wf := range workflows {
			w := b.arg(wf)
			for _, st := range statuses {
				add(IndexWorkflowCreated, "workflow = "+w, "status = "+b.status(st))
			}
		}
	case len(statuses) > 0:
		for _, st := range statuses {
			add(IndexStatusCreated, "status = "+b.arg(st))
		}
	default:
		add(IndexCreated)
	}
	// Branches read only the key: with no other filter, straight from
	// their index, and only the page's own rows are read whole, not every
	// branch's. A single branch is the statement itself.
	sel := "SELECT created_at, id FROM instances"
	if len(branches) == 1 {
		sel = "SELECT " + columns + " FROM instances"
	}
	render := func(br branch) string {
		conds := slices.Concat(br.conds, common)
		s := sel
		if d.Hint != nil {
			s += d.Hint(br.index)
		}
		if len(conds) > 0 {
			s += " WHERE " + strings.Join(conds, " AND ")
		}
		return s + order
	}
	if len(branches) == 1 {
		return render(branches[0]), b.args
	}
	var sb strings.Builder
	sb.WriteString("SELECT " + columns + " FROM instances JOIN (SELECT created_at AS k_created, id AS k_id FROM (")
	for i, br := range branches {
		if i > 0 {
			sb.WriteString(" UNION ALL ")
		}
		sb.WriteString("SELECT * FROM (" + render(br) + ") AS b" + strconv.Itoa(i))
	}
	sb.WriteString(") AS u" + order + ") AS page ON instances.id = page.k_id ORDER BY page.k_created DESC, page.k_id DESC")
	return sb.String(), b.args
}

// Workflows is a recursive common table expression, wf(name), of the
// workflows the instances table holds, in order, and a last NULL: a loose
// scan, one index probe each, of (workflow, status, created_at, id) for a
// driver with StatusByWorkflow, and of the unsettled instances (running,
// compensating, or waiting under a lease or with a cancel request) by
// workflow, which hold the running ones the first leaves out (PostgreSQL,
// see StatusLiterals). It follows WITH RECURSIVE.
const Workflows = `wf(name) AS (
		SELECT least((SELECT min(workflow) FROM instances WHERE status <> 'running'),
			(SELECT min(workflow) FROM instances WHERE ` + Unsettled + `))
		UNION ALL
		SELECT least((SELECT min(workflow) FROM instances WHERE status <> 'running' AND workflow > wf.name),
			(SELECT min(workflow) FROM instances WHERE ` + Unsettled + ` AND workflow > wf.name))
		FROM wf WHERE wf.name IS NOT NULL)`

// Unsettled is the condition of PostgreSQL's index instances_unsettled
// (migrations 0014 and 0018), which a query repeats so that the planner
// may read that index: running or compensating, or waiting under a lease
// or with a cancel request. Every leased instance is in it (an end gives
// its lease up).
const Unsettled = `(status IN ('running', 'compensating') OR (status = 'waiting' AND (lease_owner IS NOT NULL OR cancel_reason <> '')))`
