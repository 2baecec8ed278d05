package viewer

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntype"
)

// instanceData is the instance page.
type instanceData struct {
	pageData
	Inst       norntype.Instance
	Input      string
	Output     string
	Failure    string
	Flash      string
	Chart      template.HTML // the timeline chart
	Head, Tail []item
	Gap        int64
	MoreURL    string    // next page of the timeline
	FirstURL   string    // back to first and last events
	Paged      bool      // showing a page after "more"
	Waits      []waitRow // what a waiting instance is parked on
	Mailbox    []mailRow
	MailMore   bool
	Subs       []norntype.Subscription
	Timers     []timerRow
	Children   []childRow
	// ChildrenURL lists all children when the page shows only the first.
	ChildrenURL string
	// Types are the message types this instance received or has waiting:
	// suggestions for the send form.
	Types     []string
	ParentURL string
	Terminal  bool
	Query     queryForm
}

type mailRow struct {
	ID, Channel, Sender, SenderURL, Type, Preview, Payload string
	At                                                     time.Time
	Queued                                                 bool // in a competing channel's queue
	Unmatched                                              bool // no receive the instance waits in takes it
}

type waitRow struct {
	What, Detail, URL string
	Due               time.Time
}

// waitRows says what a parked instance waits for.
func (h *handler) waitRows(waits []norntype.Wait) []waitRow {
	var out []waitRow
	for _, w := range waits {
		r := waitRow{Due: w.Due}
		r.What, r.Detail = w.Describe()
		switch {
		case w.Kind == norntype.WaitChild:
			r.URL = h.instanceURL(w.Name)
		case w.From != "":
			r.URL = h.instanceURL(string(w.From))
		}
		out = append(out, r)
	}
	return out
}

type timerRow struct {
	ID, What string
	Due      time.Time
}

type childRow struct {
	ID, URL, Workflow string
	Status            norntype.Status
}

func (h *handler) instance(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	if id == "" {
		id = r.URL.Query().Get("id")
	}
	after := int64(-1)
	if s := r.URL.Query().Get("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < -1 {
			h.errorPage(w, r, http.StatusBadRequest, "Bad parameter", "after must be an event number.")
			return
		}
		after = n
	}
	pid := norntype.PID(id)
	inst, err := h.sys.Instance(ctx, pid)
	if errors.Is(err, actor.ErrNotFound) {
		h.notFoundInstance(w, r, id)
		return
	}
	if errors.Is(err, actor.ErrInvalidInput) {
		h.errorPage(w, r, http.StatusBadRequest, "Bad instance ID", err.Error())
		return
	}
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	d := &instanceData{pageData: h.page(id), Inst: inst, Flash: notice(r.URL.Query().Get("done")),
		Input: pretty(inst.Input), Output: pretty(inst.Output), Terminal: inst.Status.Terminal()}
	d.Search = id
	d.Refresh = true
	h.header(ctx, &d.pageData)
	if inst.Failure != nil {
		d.Failure = inst.Failure.Error()
	}
	if inst.Parent != "" {
		d.ParentURL = h.instanceURL(inst.Parent)
	}
	win, err := h.history(ctx, id, inst.HistoryLen, after)
	if err != nil {
		h.serverError(w, r, err)
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
	if err := h.loadSide(ctx, pid, d); err != nil {
		h.serverError(w, r, err)
		return
	}
	d.Waits = h.waitRows(inst.Waits)
	d.Types = messageTypes(d)
	d.Chart = h.instanceChart(inst, win, after)
	status := h.askQuery(ctx, r, pid, inst.Workflow, d)
	h.render(w, r, status, "instance", d)
}

// instanceChart draws the loaded events on a time axis. What has not
// ended runs to now, or, for an ended instance, to its last event.
func (h *handler) instanceChart(inst norntype.Instance, win window, after int64) template.HTML {
	events := append(append([]norntype.HistoryEvent{}, win.head...), win.tail...)
	end := h.now()
	if inst.Status.Terminal() && len(events) > 0 {
		end = events[len(events)-1].At
	}
	note := ""
	switch {
	case win.gap > 0:
		note = fmt.Sprintf("%s events in the middle are not loaded: what they started or ended is missing.", comma(win.gap))
	case after >= 0:
		note = fmt.Sprintf("From event #%d on.", after+1)
	}
	return chart(spans(events), end, note)
}

// childrenShown bounds the children listed on an instance's page; the list
// page filtered by parent shows them all.
const childrenShown = 20

// loadSide reads what the page shows beside the timeline: mailbox,
// subscriptions, pending timers and children.
func (h *handler) loadSide(ctx context.Context, pid norntype.PID, d *instanceData) error {
	msgs, err := h.sys.Mailbox(ctx, pid, mailShown+1)
	if err != nil {
		return err
	}
	if len(msgs) > mailShown {
		msgs, d.MailMore = msgs[:mailShown], true
	}
	for _, m := range msgs {
		row := mailRow{ID: m.ID, Channel: m.Channel, Sender: m.Sender, Type: m.Type, At: m.PublishedAt,
			Preview: short(m.Payload, 60), Payload: pretty(m.Payload), Queued: m.Queued,
			Unmatched: m.Unmatched}
		if m.Sender != "" {
			row.SenderURL = h.instanceURL(m.Sender)
		}
		d.Mailbox = append(d.Mailbox, row)
	}
	if d.Subs, err = h.sys.Subscriptions(ctx, pid); err != nil {
		return err
	}
	timers, err := h.sys.Timers(ctx, pid)
	if err != nil {
		return err
	}
	for _, t := range timers {
		what := t.Kind
		switch t.Kind {
		case norntype.TimerSleep:
			what = "sleep"
		case norntype.TimerReceive:
			what = "receive timeout"
		case norntype.TimerRetry:
			what = "next attempt of " + t.Name
		}
		d.Timers = append(d.Timers, timerRow{ID: t.ID, What: what, Due: t.Due})
	}
	page, err := h.sys.List(ctx, actor.ListQuery{Parent: string(pid), Limit: childrenShown})
	if err != nil {
		return err
	}
	for _, c := range page.Instances {
		d.Children = append(d.Children, childRow{ID: c.ID, URL: h.instanceURL(c.ID), Workflow: c.Workflow, Status: c.Status})
	}
	if page.Next != "" {
		d.ChildrenURL = h.listURL(filter{parent: string(pid)}, "")
	}
	return nil
}

// messageTypes lists the message types on the page, sorted, without the
// system's own (a child's end).
func messageTypes(d *instanceData) []string {
	seen := map[string]bool{}
	add := func(t string) {
		if t != "" && !strings.HasPrefix(t, "mailbox.") {
			seen[t] = true
		}
	}
	for _, rows := range [][]item{d.Head, d.Tail} {
		for _, it := range rows {
			add(it.MsgType)
		}
	}
	for _, m := range d.Mailbox {
		add(m.Type)
	}
	for _, w := range d.Inst.Waits {
		for _, t := range w.Types {
			add(t)
		}
	}
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}
