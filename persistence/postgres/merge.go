package postgres

import (
	"encoding/json"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/nornlabs/norn/persistence"
)

// Merged writes. Most steps of a busy batch write their instance's row
// (the history length moved on, under the fencing conditions; at the end
// a status, the output and the lease given up) and insert a few events.
// One statement per row costs the server more in statement overhead (bind,
// executor start, the check) than in writing, so a batch of several steps
// writes those with a few statements built from arrays: the new instances,
// one UPDATE of every such instance and the delete of the subscriptions and
// timers of those that end before the steps' other statements; one INSERT
// of their events, the publishes on system channels
// (the Down each end publishes for its monitors, which usually have none)
// and the drop of the mail of the instances that end (claimed messages
// given back), after them.
//
// Only steps that run without a savepoint take part, and only one step per
// instance, so the batch stays the same as some order of its steps: the
// updates are what those steps do first anyway, and no other statement of
// the batch writes those rows; no statement of a batch reads history, and
// a step that resets its history still deletes it before the merged insert
// adds the new run's events. An instance that ends has ended from the
// start of the batch, so no step sends to it, its subscriptions and timers
// go then (unless its step writes some itself: that step deletes them in
// its place), and its mail is dropped at the end, with any copy of a
// message published to it meanwhile. Steps
// that take a lease, reopen, reset or count a restart keep their own
// statement (they are rare, and their conditions differ).
//
// If a merged statement finds a condition failed (a step fenced, its
// instance ended, an event's position taken), the transaction fails and
// the batch runs again with every step in a savepoint of its own and
// nothing merged: the failing step is then found and diagnosed as before,
// and the others commit.

// mergeMin is the fewest rows worth a merged statement: with two, the
// merged statements of a one-spawner chain cost more than the single ones
// (chain -spawners 1: 1,104–1,127 wf/s against 1,266–1,356 unmerged; with
// four, 1,359–1,378).
const mergeMin = 4

// mergeWrites takes the creations, instance updates, history inserts and
// mail drops out of batch's steps that run without a savepoint, and
// returns the statements that write them all: first to run before the
// steps' statements, last after them; a kind with fewer than mergeMin rows
// stays with its steps.
func (s *Store) mergeWrites(batch []*writeReq) (first, last []op) {
	targets := make(map[string]int, len(batch))
	for _, r := range batch {
		if id, _ := r.step.Target(); id != "" {
			targets[id]++
		}
	}
	mergeable := func(r *writeReq) bool {
		id, _ := r.step.Target()
		return !r.savepoint && id != "" && targets[id] == 1 && len(r.step.CreateMany) == 0
	}
	crs, ups, evs, ends, pubs := 0, 0, 0, 0, 0
	for _, r := range batch {
		if mergeable(r) {
			pubs += countSystemPublishes(r.ops)
			crs += countOps(r.ops, sqlInsertInstance)
			ends += countOps(r.ops, sqlDropMailbox)
			if mergesUpdate(&r.step) {
				ups += countOps(r.ops, sqlUpdateInstance)
			}
			evs += countOps(r.ops, sqlInsertEvent)
		}
	}
	mergeCr, mergeUp, mergeEv, mergeEnd := crs >= mergeMin, ups >= mergeMin, evs >= mergeMin, ends >= mergeMin
	mergePub := pubs >= mergeMin
	if !mergeCr && !mergeUp && !mergeEv && !mergeEnd && !mergePub {
		return nil, nil
	}
	t := s.now()
	now := t.UnixNano()
	var cr mergedCreate
	var up mergedUpdate
	var ev eventCols
	var end mergedEnds
	var pub mergedPublishes
	for _, r := range batch {
		if !mergeable(r) {
			continue
		}
		st := &r.step
		id, _ := st.Target()
		kept, added := r.ops[:0], false
		for _, o := range r.ops {
			switch {
			case mergeCr && o.name == sqlInsertInstance:
				cr.add(st)
			case mergeEnd && o.name == sqlDropMailbox:
				end.add(id, r)
			case mergeEnd && o.name == sqlEndInstance && !touchesOwnRows(st):
				end.released = append(end.released, id)
			case mergePub && systemPublish(&o) && pub.add(&o, r):
				// Taken into the merged publish.
			case mergeUp && o.name == sqlUpdateInstance && mergesUpdate(st):
				up.add(st)
			case mergeEv && o.name == sqlInsertEvent:
				// compiler.history adds one per event: all of them go in
				// at the first.
				if !added {
					ev.add(id, st.History, t)
					added = true
				}
			default:
				kept = append(kept, o)
			}
		}
		r.merged = len(kept) < len(r.ops)
		r.ops = kept
	}
	if len(cr.ids) > 0 {
		first = append(first, cr.op(now))
	}
	if len(up.ids) > 0 {
		first = append(first, up.op(now))
	}
	if len(end.released) > 0 {
		first = append(first, op{label: "release ended instances", name: sqlEndInstances, merged: true, args: []any{end.released}})
	}
	if len(ev.inst) > 0 {
		last = append(last, op{label: "append history", name: sqlInsertEvents, merged: true, args: ev.args()})
	}
	if len(pub.ids) > 0 {
		// Before the drop of the ended instances' mail: a Down to one of
		// them is dropped with it.
		last = append(last, pub.op())
	}
	if len(end.ids) > 0 {
		last = append(last, end.op())
	}
	return first, last
}

// mergesUpdate reports whether the step's instance update can be merged:
// it appends, and may set a status and the output and give up the lease,
// but takes no lease, reopens nothing, resets no history and counts no
// restart.
func mergesUpdate(st *persistence.Step) bool {
	return st.TakeLease == "" && !st.Reopen && !st.ResetHistory && !st.IncRestarts && st.RestartLog == nil
}

// systemPublish reports whether o publishes on a system channel (see
// persistence.SystemChannelPrefix), the runtime's own: those are merged.
// Its arguments are sqlPublish's.
func systemPublish(o *op) bool {
	if o.name != sqlPublish {
		return false
	}
	ch, _ := o.args[1].(string)
	return strings.HasPrefix(ch, persistence.SystemChannelPrefix)
}

func countSystemPublishes(ops []op) int {
	n := 0
	for i := range ops {
		if systemPublish(&ops[i]) {
			n++
		}
	}
	return n
}

func countOps(ops []op, name string) int {
	n := 0
	for i := range ops {
		if ops[i].name == name {
			n++
		}
	}
	return n
}

// mergedCreate gathers creations as the columns of sqlCreateMerged.
type mergedCreate struct {
	ids, wfs, statuses, parents, owners, restarts []string
	inputs                                        [][]byte
	epochs, expires, ttls, hlens                  []int64
	buckets                                       []int32
}

func (c *mergedCreate) add(st *persistence.Step) {
	row := createRowOf(st)
	c.ids, c.wfs, c.statuses = append(c.ids, row.id), append(c.wfs, row.wf), append(c.statuses, row.status)
	c.inputs, c.parents, c.owners = append(c.inputs, row.input), append(c.parents, row.parent), append(c.owners, row.owner)
	c.epochs, c.expires, c.restarts = append(c.epochs, row.epoch), append(c.expires, row.expires), append(c.restarts, row.restarts)
	c.ttls, c.buckets, c.hlens = append(c.ttls, row.ttl), append(c.buckets, row.bucket), append(c.hlens, row.hlen)
}

func (c *mergedCreate) op(now int64) op {
	return op{label: "insert instances", name: sqlCreateMerged, merged: true,
		args: []any{c.ids, c.wfs, c.statuses, c.inputs, c.parents, c.owners, c.epochs, c.expires, c.restarts, c.ttls,
			c.buckets, c.hlens, now}}
}

// mergedUpdate gathers instance updates (see compiler.instance) as the
// columns of sqlUpdateMany.
type mergedUpdate struct {
	ids, statuses, errs []string
	added, epochs, exp  []int64
	setOut, release, sw []bool
	outputs, waits      [][]byte
}

func (u *mergedUpdate) add(st *persistence.Step) {
	u.ids = append(u.ids, st.Instance)
	u.added = append(u.added, int64(len(st.History)))
	u.statuses = append(u.statuses, string(st.Status))
	u.setOut = append(u.setOut, st.SetsOutput())
	u.outputs = append(u.outputs, st.Output)
	u.errs = append(u.errs, st.Error)
	u.release = append(u.release, st.ReleasesLease())
	u.epochs = append(u.epochs, st.Epoch)
	u.exp = append(u.exp, st.ExpectHistoryLen())
	u.sw = append(u.sw, st.SetWaits)
	u.waits = append(u.waits, st.Waits)
}

func (u *mergedUpdate) op(now int64) op {
	return op{label: "update instances", name: sqlUpdateMany, merged: true,
		args: []any{u.ids, u.added, u.statuses, u.setOut, u.outputs, u.errs, u.release, u.epochs, u.exp, u.sw, u.waits,
			now, int64(len(u.ids))}}
}

// mergedEnds gathers the instances whose end drops their mail (see
// compiler.end) for sqlDropMailboxes, and gives each step the messages it
// returned to their queues.
type mergedEnds struct {
	ids   []string
	steps map[string]*writeReq
	// released: the instances whose subscriptions and timers go, with
	// sqlEndInstances at the start of the batch.
	released []string
}

// touchesOwnRows reports whether an ending step writes its instance's
// subscriptions or timers itself (a timer it fires must still exist when
// its statement runs): its own delete of them then stays in its place.
func touchesOwnRows(st *persistence.Step) bool {
	return len(st.Subscribe) > 0 || len(st.Unsubscribe) > 0 || len(st.AddTimers) > 0 || len(st.FireTimers) > 0 ||
		len(st.CancelTimers) > 0
}

func (e *mergedEnds) add(id string, r *writeReq) {
	if e.steps == nil {
		e.steps = map[string]*writeReq{}
	}
	e.ids = append(e.ids, id)
	e.steps[id] = r
}

func (e *mergedEnds) op() op {
	return op{label: "drop ended instances' mail", name: sqlDropMailboxes, merged: true, args: []any{e.ids}, read: e.readRequeued}
}

// readRequeued gives each step the messages its instance gave back to
// their queues, as compiler.readRequeued does for one.
func (e *mergedEnds) readRequeued(br pgx.BatchResults) error {
	rows, _ := br.Query()
	defer rows.Close()
	for rows.Next() {
		var owner string
		var q persistence.QueuedMessage
		if err := rows.Scan(&owner, &q.Channel, &q.Type, &q.Subscribers); err != nil {
			return err
		}
		if r := e.steps[owner]; r != nil {
			requeued(&r.res, q)
		}
	}
	return rows.Err()
}

// mergedPublishes gathers publishes on system channels (see systemPublish)
// as the columns of sqlPublishSystem, one per channel: a second publish on
// a channel keeps its own statement, so that each channel's subscribers
// are woken for the step that published there.
type mergedPublishes struct {
	ids, channels, senders, types []string
	payloads                      [][]byte
	metas                         []*string
	ats                           []int64
	steps                         map[string]*writeReq
}

// add takes o (sqlPublish's arguments) into the merged statement, unless
// its channel is taken already or its metadata is not JSON text.
func (p *mergedPublishes) add(o *op, r *writeReq) bool {
	ch := o.args[1].(string)
	if p.steps[ch] != nil {
		return false
	}
	var meta *string
	if o.args[4] != nil {
		b, err := json.Marshal(o.args[4])
		if err != nil {
			return false
		}
		m := string(b)
		meta = &m
	}
	if p.steps == nil {
		p.steps = map[string]*writeReq{}
	}
	p.steps[ch] = r
	p.ids, p.channels, p.senders = append(p.ids, o.args[0].(string)), append(p.channels, ch), append(p.senders, o.args[2].(string))
	p.payloads, p.metas = append(p.payloads, o.args[3].([]byte)), append(p.metas, meta)
	p.ats, p.types = append(p.ats, o.args[5].(int64)), append(p.types, o.args[6].(string))
	return true
}

func (p *mergedPublishes) op() op {
	return op{label: "publish on system channels", name: sqlPublishSystem, merged: true,
		args: []any{p.ids, p.channels, p.senders, p.payloads, p.metas, p.ats, p.types}, read: p.readWoken}
}

// readWoken gives each step the subscribers its publish copied to, to wake.
func (p *mergedPublishes) readWoken(br pgx.BatchResults) error {
	rows, _ := br.Query()
	defer rows.Close()
	for rows.Next() {
		var ch, id string
		if err := rows.Scan(&ch, &id); err != nil {
			return err
		}
		if r := p.steps[ch]; r != nil {
			r.res.Woken = append(r.res.Woken, id)
		}
	}
	return rows.Err()
}
