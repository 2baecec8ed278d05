package viewer

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nornlabs/norn/actor"
)

// How much of a history one page shows: the first and last events of the
// run, or one page further on after "more".
const (
	headEvents = 100
	tailEvents = 100
	pageEvents = 500
	mailShown  = 100
)

// window is the part of a run's history a page shows.
type window struct {
	head, tail []actor.HistoryEvent
	gap        int64 // events between head and tail not loaded
	next       int64 // seq to continue after ("more"), -1 if none
}

// history loads the window of id's current run: its first and last events,
// or with after >= 0 one page of the events after that seq.
func (h *handler) history(ctx context.Context, id string, length int64, after int64) (window, error) {
	w := window{next: -1}
	if after >= 0 {
		evs, err := h.historyPage(ctx, id, after, pageEvents)
		if err != nil {
			return w, err
		}
		w.head = evs
		if n := len(evs); n == pageEvents && evs[n-1].Seq < length-1 {
			w.next = evs[n-1].Seq
		}
		return w, nil
	}
	head, err := h.historyPage(ctx, id, -1, headEvents)
	if err != nil {
		return w, err
	}
	w.head = head
	if len(head) < headEvents {
		return w, nil
	}
	last := head[len(head)-1].Seq
	from := max(last, length-1-tailEvents)
	tail, err := h.historyPage(ctx, id, from, tailEvents+1)
	if err != nil {
		return w, err
	}
	w.tail = tail
	if len(tail) > 0 && tail[0].Seq > last+1 {
		w.gap = tail[0].Seq - last - 1
		w.next = last
	}
	return w, nil
}

// historyPage reads up to limit events of id's current run after seq
// after (-1: from the start).
func (h *handler) historyPage(ctx context.Context, id string, after int64, limit int) ([]actor.HistoryEvent, error) {
	all, err := h.sys.History(ctx, actor.PID(id))
	if err != nil {
		return nil, err
	}
	i := 0
	for i < len(all) && all[i].Seq <= after {
		i++
	}
	all = all[i:]
	if len(all) > limit {
		all = all[:limit]
	}
	return all, nil
}

// pendingTimer is a timer of the instance that has not fired.
type pendingTimer struct {
	ID   string
	Due  time.Time
	What string
}

// waitsFrom finds, in a run's events (in order), what is still open: timers
// set and not fired, receives waiting with a timeout, activities between
// attempts. It sees only the events given.
func waitsFrom(evs ...[]actor.HistoryEvent) []pendingTimer {
	open := map[string]pendingTimer{}
	var order []string
	put := func(key string, t pendingTimer) {
		if _, ok := open[key]; !ok {
			order = append(order, key)
		}
		open[key] = t
	}
	for _, list := range evs {
		for _, e := range list {
			switch e.Kind {
			case actor.EventTimer:
				var r timerRecord
				if json.Unmarshal(e.Payload, &r) == nil && r.Stored {
					put("t:"+e.Name, pendingTimer{ID: e.Name, Due: r.Due, What: "timer (sleep)"})
				}
			case actor.EventReceiveWait:
				var r timerRecord
				if json.Unmarshal(e.Payload, &r) == nil {
					put("t:"+e.Name, pendingTimer{ID: e.Name, Due: r.Due, What: "receive timeout"})
				}
			case actor.EventTimerFired, actor.EventReceiveTimeout, actor.EventReceived:
				delete(open, "t:"+e.Name)
			case actor.EventActivityRetry:
				var r retryRecord
				if json.Unmarshal(e.Payload, &r) == nil {
					id := r.Timer
					if id == "" {
						id = "retry of " + e.Ref
					}
					put("a:"+e.Ref, pendingTimer{ID: id, Due: r.Next, What: "next attempt of " + e.Name})
				}
			case actor.EventActivity:
				delete(open, "a:"+e.Ref)
			}
		}
	}
	var out []pendingTimer
	for _, k := range order {
		if t, ok := open[k]; ok {
			out = append(out, t)
			delete(open, k)
		}
	}
	return out
}
