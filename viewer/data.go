package viewer

import (
	"context"

	"github.com/nornlabs/norn/norntype"
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
	head, tail []norntype.HistoryEvent
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
func (h *handler) historyPage(ctx context.Context, id string, after int64, limit int) ([]norntype.HistoryEvent, error) {
	return h.sys.HistoryPage(ctx, norntype.PID(id), after, limit)
}
