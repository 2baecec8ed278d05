package viewer

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntype"
)

// The operator's actions on one instance besides cancel and send: end a
// live one now (terminate), or give an ended one a new run (retry,
// restart, reset); see actor.System.Terminate, Retry, Restart and Reset.

// rerunNotices are the notices the instance page shows after each.
var rerunNotices = map[string]string{
	"terminated": "Terminated.",
	"retried":    "Retried: a new run goes on from the last recorded step.",
	"restarted":  "Restarted: a new run from the start.",
	"reset":      "Reset: a new run goes on from the chosen event.",
	"not-ended":  "Not done: the instance has not ended (terminate or cancel it first).",
	"not-failed": "Not retried: the instance did not fail (restart runs it again).",
	"started":    "Started.",
	"existed":    "Not started: an instance with this ID exists already; here it is.",
}

// rerun serves the POST of one of the four actions.
func (h *handler) rerun(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := h.checkAction(w, r, action)
		if !ok {
			return
		}
		ctx, pid := r.Context(), norntype.PID(id)
		var err error
		done := map[string]string{"terminate": "terminated", "retry": "retried", "restart": "restarted", "reset": "reset"}[action]
		switch action {
		case "terminate":
			reason := strings.TrimSpace(r.PostForm.Get("reason"))
			if reason == "" {
				reason = "terminated from the viewer"
			}
			err = h.sys.Terminate(ctx, pid, reason)
		case "retry":
			err = h.sys.Retry(ctx, pid)
		case "restart":
			err = h.sys.Restart(ctx, pid)
		case "reset":
			keep, perr := strconv.ParseInt(strings.TrimSpace(r.PostForm.Get("seq")), 10, 64)
			if perr != nil {
				h.errorPage(w, r, http.StatusBadRequest, "Reset refused", "Give the number (#) of the first history event to drop.")
				return
			}
			err = h.sys.Reset(ctx, pid, keep)
		}
		switch {
		case err == nil:
			h.log.InfoContext(ctx, "viewer: "+action, "instance", id)
			h.redirectNotice(w, r, id, done)
		case errors.Is(err, actor.ErrNotFound):
			h.notFoundInstance(w, r, id)
		case errors.Is(err, actor.ErrInstanceDone):
			h.redirectNotice(w, r, id, "ended")
		case errors.Is(err, actor.ErrInstanceLive):
			h.redirectNotice(w, r, id, "not-ended")
		case errors.Is(err, actor.ErrNotFailed):
			h.redirectNotice(w, r, id, "not-failed")
		case errors.Is(err, actor.ErrInvalidInput):
			h.errorPage(w, r, http.StatusBadRequest, "Refused", err.Error())
		default:
			h.serverError(w, r, fmt.Errorf("%s %s: %w", action, id, err))
		}
	}
}

// startFormID stands for the instance the start form is about to create
// in its form token (the token binds an action to an instance ID, and the
// new instance's ID is the user's to type, or none).
const startFormID = "new-instance"

// startable lists the workflows the start form offers.
func (h *handler) startable() []string {
	names := make([]string, 0, len(h.opts.Workflows))
	for _, d := range h.opts.Workflows {
		names = append(names, d.Name())
	}
	return names
}

// start serves the start form: an instance of one of Options.Workflows,
// its input as JSON, its ID given or fresh (a given ID starts once).
func (h *handler) start(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.checkAction(w, r, "start"); !ok {
		return
	}
	name := r.PostForm.Get("workflow")
	var def actor.Definition
	for _, d := range h.opts.Workflows {
		if d.Name() == name {
			def = d
		}
	}
	if def == nil {
		h.errorPage(w, r, http.StatusBadRequest, "Start refused", fmt.Sprintf("This viewer does not start workflow %q.", name))
		return
	}
	id := strings.TrimSpace(r.PostForm.Get("instance"))
	input := []byte(strings.TrimSpace(r.PostForm.Get("input")))
	if len(input) == 0 {
		input = []byte("null")
	}
	sp, err := actor.SpawnJSON(r.Context(), h.sys, def, input, id)
	switch {
	case err == nil && sp.Existed:
		h.redirectNotice(w, r, string(sp.PID), "existed")
	case err == nil:
		h.log.InfoContext(r.Context(), "viewer: started", "instance", sp.PID, "workflow", name)
		h.redirectNotice(w, r, string(sp.PID), "started")
	case errors.Is(err, actor.ErrInvalidInput), errors.Is(err, actor.ErrUnknownWorkflow):
		h.errorPage(w, r, http.StatusBadRequest, "Start refused", err.Error())
	default:
		var conflict *actor.IDConflictError
		if errors.As(err, &conflict) {
			h.errorPage(w, r, http.StatusConflict, "Start refused", err.Error())
			return
		}
		h.serverError(w, r, fmt.Errorf("start %s: %w", name, err))
	}
}
