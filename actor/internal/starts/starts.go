package starts

// State is what happened to an instance while its start was in progress.
type State struct {
	Woken     bool // a wake (mail, timer, notification, rescan) arrived
	Cancelled bool // a local Cancel arrived (its request is durable)
	// Local: a wake of this process's own making (one of its commits, its
	// timers, a Send or Cancel through it) asked for the start or arrived
	// during it, as opposed to one another process handed on.
	Local bool
}

// Table holds the starts in progress. Use New.
type Table struct {
	max     int
	workers int
	queue   []string
	starts  map[string]State
}

// New returns a Table that runs at most limit activators at once (at
// least one).
func New(limit int) *Table {
	return &Table{max: max(1, limit), starts: map[string]State{}}
}

// Starting reports whether a start of id is in progress.
func (t *Table) Starting(id string) bool {
	_, ok := t.starts[id]
	return ok
}

// Len is how many starts are in progress (queued or loading).
func (t *Table) Len() int { return len(t.starts) }

// Begin records a start of id that its caller runs itself (a spawn). It
// reports false if one is in progress already.
func (t *Table) Begin(id string) bool {
	if t.Starting(id) {
		return false
	}
	t.starts[id] = State{}
	return true
}

// Mark records a wake (or, with cancel, a cancel) for a start of id in
// progress; it reports false if there is none.
func (t *Table) Mark(id string, cancel bool) bool {
	st, ok := t.starts[id]
	if !ok {
		return false
	}
	if cancel {
		st.Cancelled = true
	} else {
		st.Woken = true
	}
	t.starts[id] = st
	return true
}

// MarkLocal records that a wake of this process's own making asked for
// the start of id in progress (see State.Local); without one it does
// nothing.
func (t *Table) MarkLocal(id string) {
	if st, ok := t.starts[id]; ok {
		st.Local = true
		t.starts[id] = st
	}
}

// MarkAll records a wake for every start in progress.
func (t *Table) MarkAll() {
	for id, st := range t.starts {
		st.Woken = true
		t.starts[id] = st
	}
}

// Queue begins a start of id for an activator (the caller checked that
// none is in progress) and reports whether the caller must run a new
// activator (fewer than the maximum run).
func (t *Table) Queue(id string) (newActivator bool) {
	t.starts[id] = State{}
	t.queue = append(t.queue, id)
	if t.workers < t.max {
		t.workers++
		return true
	}
	return false
}

// Next hands an activator the next queued instance. With none left (or
// with stop) the activator must exit: ok is false, it is no longer
// counted, and with stop the queued starts are dropped.
func (t *Table) Next(stop bool) (id string, ok bool) {
	if len(t.queue) == 0 || stop {
		for _, id := range t.queue {
			delete(t.starts, id)
		}
		t.queue = nil
		t.workers--
		return "", false
	}
	id = t.queue[0]
	t.queue = t.queue[1:]
	return id, true
}

// Take returns what happened to id's start so far and clears it, the start
// staying in progress: later wakes mark it again.
func (t *Table) Take(id string) State {
	st := t.starts[id]
	if _, ok := t.starts[id]; ok {
		t.starts[id] = State{}
	}
	return st
}

// Peek returns what happened to id's start so far.
func (t *Table) Peek(id string) State { return t.starts[id] }

// End ends id's start and returns what happened to it meanwhile.
func (t *Table) End(id string) State {
	st := t.starts[id]
	delete(t.starts, id)
	return st
}
