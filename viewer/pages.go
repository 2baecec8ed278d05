package viewer

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"time"

	"github.com/nornlabs/norn/actor"
)

// instanceData is the instance page.
type instanceData struct {
	pageData
	Inst       actor.Instance
	Active     bool
	Input      string
	Output     string
	Failure    string
	Flash      string
	Diagram    template.HTML
	Head, Tail []item
	Gap        int64
	MoreURL    string // next page of the timeline
	FirstURL   string // back to first and last events
	Paged      bool   // showing a page after "more"
	Mailbox    []mailRow
	MailDepth  int
	MailMore   bool
	Subs       []actor.Subscription
	Timers     []timerRow
	Children   []childRow
	ParentURL  string
	Terminal   bool
}

type mailRow struct {
	ID, Channel, Sender, SenderURL, Type, Preview, Payload string
	At                                                     time.Time
}

type timerRow struct {
	ID, What string
	Due      time.Time
}

type childRow struct {
	ID, URL, Workflow string
	Status            actor.Status
}

func (h *handler) instance(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	after := int64(-1)
	if s := r.URL.Query().Get("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < -1 {
			h.errorPage(w, r, http.StatusBadRequest, "Bad parameter", "after must be an event number.")
			return
		}
		after = n
	}
	info, err := h.sys.Inspect(ctx, actor.PID(id))
	if errors.Is(err, actor.ErrNotFound) {
		h.notFoundInstance(w, r, id)
		return
	}
	if err != nil {
		h.serverError(w, r, fmt.Errorf("read %s: %w", id, err))
		return
	}
	inst := info.Instance
	d := &instanceData{pageData: h.page(id), Inst: inst, Active: info.Active, Flash: r.URL.Query().Get("flash"),
		Input: pretty(inst.Input), Output: pretty(inst.Output), Terminal: inst.Status.Terminal(),
		Subs: info.Subscriptions, MailDepth: info.MailboxDepth}
	d.Search = id
	if inst.Failure != nil {
		d.Failure = inst.Failure.Error()
	}
	if inst.Parent != "" {
		d.ParentURL = h.instanceURL(inst.Parent)
	}
	win, err := h.history(ctx, id, inst.HistoryLen, after)
	if err != nil {
		h.serverError(w, r, fmt.Errorf("history of %s: %w", id, err))
		return
	}
	var start time.Time
	if len(win.head) > 0 && win.head[0].Seq == 0 {
		start = win.head[0].At
	}
	d.Head = h.timeline(win.head, start)
	d.Tail = h.timeline(win.tail, start)
	d.Gap = win.gap
	d.Paged = after >= 0
	if win.next >= 0 {
		d.MoreURL = h.instanceURL(id) + "?after=" + strconv.FormatInt(win.next, 10) + "#timeline"
	}
	d.FirstURL = h.instanceURL(id) + "#timeline"
	for _, t := range waitsFrom(win.head, win.tail) {
		if !d.Terminal {
			d.Timers = append(d.Timers, timerRow{ID: t.ID, What: t.What, Due: t.Due})
		}
	}
	for _, it := range append(append([]item(nil), d.Head...), d.Tail...) {
		if it.Class == "child" && it.Label == "child spawned" && it.LinkText != "" {
			d.Children = append(d.Children, childRow{ID: it.LinkText, URL: it.Link, Workflow: it.Name})
		}
	}
	d.Diagram = svg(diagramSteps(d.Head, d.Tail, d.Gap, h.waitSteps(d)))
	h.render(w, r, http.StatusOK, "instance", d)
}

// waitSteps are the diagram's last boxes: how the instance ended, or what
// it waits for now.
func (h *handler) waitSteps(d *instanceData) []step {
	switch d.Inst.Status {
	case actor.StatusCompleted:
		return nil
	case actor.StatusFailed, actor.StatusCancelled:
		return nil
	}
	var out []step
	for _, t := range d.Timers {
		out = append(out, step{Class: "timer", Text: "waits: " + t.What + " " + h.ago(t.Due), Seq: -1, Wait: true})
	}
	for _, s := range d.Subs {
		out = append(out, step{Class: "message", Text: "listens on " + s.Channel + " (" + string(s.Mode) + ")", Seq: -1, Wait: true})
	}
	if len(out) == 0 {
		text := "running"
		if d.Inst.Status == actor.StatusWaiting {
			text = "waits for a message"
		}
		out = append(out, step{Class: "other", Text: text, Seq: -1, Wait: true})
	}
	if d.MailDepth > 0 {
		out = append(out, step{Class: "message", Text: fmt.Sprintf("%d message(s) in the mailbox", d.MailDepth), Seq: -1, Wait: true})
	}
	return out
}
