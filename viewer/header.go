package viewer

import (
	"context"
	"sync"
	"time"

	"github.com/nornlabs/norn/norntype"
)

// countsTTL is how long the header's counts are reused: counting visits an
// index entry per instance, and refreshing pages ask every few seconds.
const countsTTL = 5 * time.Second

// statusCount is one entry of the header: the instances in one status, all
// workflows together, with the list of them.
type statusCount struct {
	Status norntype.Status
	Count  int
	URL    string
}

// workflowCounts is one row of the counts table: a workflow's instances by
// status, in allStatuses' order.
type workflowCounts struct {
	Workflow string
	Counts   []statusCount
	Total    int
}

// countsCache holds the last counts read, shared by all requests.
type countsCache struct {
	mu     sync.Mutex
	at     time.Time
	counts []norntype.InstanceCount
	err    error
}

// instanceCounts returns the store's counts, read again when older than
// countsTTL. Concurrent callers wait for one read rather than each reading.
func (h *handler) instanceCounts(ctx context.Context) ([]norntype.InstanceCount, error) {
	c := &h.countCache
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || h.now().Sub(c.at) >= countsTTL || c.err != nil {
		c.counts, c.err = h.sys.CountInstances(ctx)
		c.at = h.now()
	}
	return c.counts, c.err
}

// header fills the counts the layout shows. A failed count leaves the
// header without them (logged): the page itself still shows.
func (h *handler) header(ctx context.Context, p *pageData) {
	counts, err := h.instanceCounts(ctx)
	if err != nil {
		h.log.WarnContext(ctx, "viewer: count instances", "err", err)
		return
	}
	by := map[norntype.Status]int{}
	for _, c := range counts {
		by[c.Status] += c.Count
	}
	p.HasCounts = true
	for _, s := range allStatuses {
		st := norntype.Status(s)
		p.Counts = append(p.Counts, statusCount{Status: st, Count: by[st], URL: h.listURL(filter{statuses: []string{s}}, "")})
		p.Total += by[st]
	}
}

// byWorkflow arranges counts (ordered by workflow) as a workflow × status
// table.
func (h *handler) byWorkflow(counts []norntype.InstanceCount) []workflowCounts {
	var out []workflowCounts
	for i := 0; i < len(counts); {
		wf := counts[i].Workflow
		by := map[norntype.Status]int{}
		for ; i < len(counts) && counts[i].Workflow == wf; i++ {
			by[counts[i].Status] += counts[i].Count
		}
		row := workflowCounts{Workflow: wf}
		for _, s := range allStatuses {
			st := norntype.Status(s)
			row.Counts = append(row.Counts, statusCount{Status: st, Count: by[st],
				URL: h.listURL(filter{workflow: wf, statuses: []string{s}}, "")})
			row.Total += by[st]
		}
		out = append(out, row)
	}
	return out
}
