package viewer

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntype"
)

// The instance page's query form (a GET: a query writes nothing, so the
// read-only viewer offers it too) asks the instance a query its workflow
// registered with actor.HandleQuery; the page shows the answer.

// queryForm is the form's state on the instance page.
type queryForm struct {
	Name, Arg string
	Answer    string // the answer, as indented JSON
	Error     string
	Asked     bool
}

// maxQueryArg bounds the argument a query form may carry.
const maxQueryArg = 64 << 10

// askQuery runs the query the page's URL names, if any, into d, and
// returns the page's status: 400 for a query the instance cannot take
// (unknown name, an argument that does not fit), 200 otherwise (a
// handler's own error is its answer).
func (h *handler) askQuery(ctx context.Context, r *http.Request, pid norntype.PID, workflow string, d *instanceData) int {
	q := r.URL.Query()
	if !q.Has("query") {
		return http.StatusOK
	}
	d.Query = queryForm{Name: strings.TrimSpace(q.Get("query")), Arg: strings.TrimSpace(q.Get("arg")), Asked: true}
	d.Refresh = false // the answer stays as asked
	if d.Query.Name == "" {
		d.Query.Error = "Give the name of a query the workflow handles."
		return http.StatusBadRequest
	}
	if len(d.Query.Arg) > maxQueryArg {
		d.Query.Error = "The argument is too long."
		return http.StatusBadRequest
	}
	out, err := h.sys.Query(ctx, pid, d.Query.Name, []byte(d.Query.Arg))
	if errors.Is(err, actor.ErrUnknownWorkflow) {
		// A System without the workflow (the norn command's viewer): the
		// program's definitions answer from the history.
		for _, def := range h.opts.Workflows {
			if def.Name() != workflow {
				continue
			}
			hist, herr := h.sys.History(ctx, pid)
			if herr != nil {
				err = herr
				break
			}
			out, err = actor.QueryHistory(ctx, def, pid, hist, d.Query.Name, []byte(d.Query.Arg))
		}
	}
	switch {
	case err == nil:
		d.Query.Answer = pretty(out)
		if d.Query.Answer == "" {
			d.Query.Answer = "null"
		}
		return http.StatusOK
	case errors.Is(err, actor.ErrInvalidInput), errors.Is(err, actor.ErrUnknownWorkflow):
		d.Query.Error = err.Error()
		return http.StatusBadRequest
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		d.Query.Error = "The query was not answered in time: " + err.Error()
		return http.StatusServiceUnavailable
	}
	d.Query.Error = err.Error()
	return http.StatusOK
}
