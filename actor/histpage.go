package actor

import (
	"context"
	"fmt"

	"github.com/nornlabs/norn/persistence"
)

// defaultHistoryPage is how many events an activation reads from the store
// at a time while it replays.
const defaultHistoryPage = 512

// journalHist is the recorded history of the run an activation replays. It
// is read from the store a page at a time as replay reaches it, so that an
// activation holds at most two pages of a long history (the one replay is
// in and the one a look ahead reached), not all of it: replaying 100,000
// events costs the same time as before, but not 100,000 events of memory.
//
// Positions are sequence numbers (a run's history is numbered from 0 with
// no gaps), and n, the length, comes with the instance: every step checks
// the instance's history length against the events it appends, so the two
// agree.
type journalHist struct {
	first persistence.Event // seq 0: the run's input and codec
	n     int               // events in the run
	// cur and prev are the pages read last: each holds consecutive events
	// from its base on.
	cur, prev histPage
	load      func(from int64, limit int) ([]persistence.Event, error)
	size      int // events per page
}

type histPage struct {
	base   int
	events []persistence.Event
}

func (p histPage) holds(i int) bool { return i >= p.base && i < p.base+len(p.events) }

// readHist reads the first page of instance id's history of n events from
// store; later pages are read as replay asks for them.
func readHist(ctx context.Context, store persistence.Store, id string, n int64, size int) (*journalHist, error) {
	return readHistFrom(ctx, store, id, n, size, nil)
}

// readHistFrom is readHist with the first page already read (first, from
// persistence.Loader.Load, as of the same moment as n): it is used as is
// when it holds the page, else the page is read.
func readHistFrom(ctx context.Context, store persistence.Store, id string, n int64, size int, first []persistence.Event) (*journalHist, error) {
	h := &journalHist{n: int(n), size: size}
	h.load = func(from int64, limit int) ([]persistence.Event, error) {
		return store.HistoryRange(ctx, id, from, limit)
	}
	if h.n == 0 {
		return h, nil
	}
	if limit := min(size, h.n); limit > 0 && len(first) >= limit && first[0].Seq == 0 && first[limit-1].Seq == int64(limit-1) {
		h.cur = histPage{base: 0, events: first[:limit]}
	} else if err := h.read(0); err != nil {
		return nil, err
	}
	h.first = h.cur.events[0]
	return h, nil
}

// Len is the number of events in the run.
func (h *journalHist) Len() int { return h.n }

// At returns event i (0 <= i < Len), reading its page if needed. A read
// that fails is the journal's caller's to handle: the activation crashes
// and is restarted by its supervisor, as when a step fails to commit.
func (h *journalHist) At(i int) (persistence.Event, error) {
	switch {
	case i == 0:
		return h.first, nil
	case h.cur.holds(i):
		return h.cur.events[i-h.cur.base], nil
	case h.prev.holds(i):
		return h.prev.events[i-h.prev.base], nil
	}
	if err := h.read(i); err != nil {
		return persistence.Event{}, err
	}
	return h.cur.events[0], nil
}

// read makes the page from i on the current one, keeping the one before as
// prev (a look ahead past a page's end comes back to it).
func (h *journalHist) read(i int) error {
	if i < 0 || i >= h.n {
		return fmt.Errorf("%w: history position %d read, the run has %d events", persistence.ErrHistoryGap, i, h.n)
	}
	limit := h.size
	if limit <= 0 || i+limit > h.n {
		limit = h.n - i
	}
	evs, err := h.load(int64(i), limit)
	if err != nil {
		return fmt.Errorf("read history from %d: %w", i, err)
	}
	if len(evs) == 0 || evs[0].Seq != int64(i) || len(evs) < limit {
		return fmt.Errorf("%w: history read from %d returned %d events (want %d from seq %d on)",
			persistence.ErrHistoryGap, i, len(evs), limit, i)
	}
	h.prev, h.cur = h.cur, histPage{base: i, events: evs}
	return nil
}
