package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/rowcodec"
)

// compiler turns one request's step into the statements that apply it, one
// method per concern, in the order persistence.Step specifies (so that a
// step that breaks several rules fails with the same error on every
// driver). Apply validated the step already. Dedupe messages found used
// (r.used) are left out and listed in r.res.Duplicates.
//
// The closures the ops keep capture locals, never the compiler: it stays
// on the stack.
type compiler struct {
	s     *Store
	r     *writeReq
	step  *persistence.Step
	now   time.Time
	id    string
	epoch int64
	ops   []op
}

func (s *Store) compile(r *writeReq) []op {
	clear(r.locks)
	if r.locks == nil {
		r.locks = map[lockKey]bool{}
	}
	c := compiler{s: s, r: r, step: &r.step, now: s.now()}
	c.id, c.epoch = r.step.Target()
	c.create()
	c.createMany()
	c.instance()
	c.history()
	c.consume()
	c.claim()
	c.subscriptions()
	c.send()
	c.timers()
	c.emit()
	c.end()
	return c.ops
}

func (c *compiler) add(o op) {
	o.req = c.r
	c.ops = append(c.ops, o)
}

// lock records an advisory lock the step needs (see batchLocks).
func (c *compiler) lock(exclusive bool, space int32, name string) {
	k := lockKey{space, lockHash(name)}
	c.r.locks[k] = c.r.locks[k] || exclusive
}

// lockSend orders a send to target against the target's end: the end of
// an instance holds its own lock exclusively, a send holds it shared. See
// instanceLocks for how a batch with many targets locks their buckets
// instead.
func (c *compiler) lockSend(target string) {
	k := lockKey{c.s.instLocks, lockHash(target)}
	c.r.locks[k] = c.r.locks[k] || false
}

// lockEnd is the end's side of lockSend: its instance's lock exclusively,
// and its bucket's shared, against a batch that locks the bucket
// exclusively instead of its targets one by one. Ends of different
// instances do not wait for one another.
func (c *compiler) lockEnd(id string) {
	k := lockKey{c.s.instLocks, lockHash(id)}
	c.r.locks[k] = true
	b := instBucketLock(c.s, k.key)
	c.r.locks[b] = c.r.locks[b] || false
}

// create inserts the new instance; if the ID is taken, nothing of the step
// applies and the caller gets the instance that holds it.
func (c *compiler) create() {
	step, in := c.step, c.step.Create
	if in == nil {
		return
	}
	r, cid, row := c.r, in.ID, createRowOf(step)
	c.add(op{label: "insert instance", name: sqlInsertInstance,
		args: []any{row.id, row.wf, row.status, row.input, row.parent, row.owner, row.epoch, row.expires,
			c.now.UnixNano(), row.restarts, row.ttl, row.bucket, row.hlen},
		check: func(*pgconn.PgError) (error, *op) {
			return nil, &op{req: r, follow: true, label: "read existing instance", name: sqlInstance, args: []any{cid},
				read: func(br pgx.BatchResults) error {
					inst, err := scanInstance(br.QueryRow())
					if err != nil {
						return err
					}
					r.res.Existing = &inst
					return nil
				}}
		}})
}

// createRow is the row a step that creates inserts (see Step.Create), for
// sqlInsertInstance and, merged, sqlCreateMerged.
type createRow struct {
	id, wf, status, parent, owner, restarts string
	input                                   []byte
	epoch, expires, ttl, hlen               int64
	bucket                                  int32
}

func createRowOf(st *persistence.Step) createRow {
	in := st.Create
	return createRow{id: in.ID, wf: in.Workflow, status: string(st.CreateStatus()), parent: in.Parent, owner: in.LeaseOwner,
		restarts: rowcodec.EncodeTimes(st.CreateRestarts()), input: in.Input, epoch: in.LeaseEpoch, expires: ns(in.LeaseExpires),
		ttl: int64(st.LeaseTTL), hlen: st.CreateHistoryLen(), bucket: int32(persistence.BucketOf(in.ID))}
}

// eventCols are events as the array columns of the statements that insert
// many (sqlCreateMany, sqlInsertEvents), in their order.
type eventCols struct {
	inst, kind, name, ref, errs, digest []string
	seq, at                             []int64
	payload                             [][]byte
}

// add appends id's events; one without a time gets now.
func (e *eventCols) add(id string, events []persistence.Event, now time.Time) {
	for _, h := range events {
		at := h.At
		if at.IsZero() {
			at = now
		}
		e.inst, e.seq, e.kind = append(e.inst, id), append(e.seq, h.Seq), append(e.kind, h.Kind)
		e.name, e.ref, e.payload = append(e.name, h.Name), append(e.ref, h.Ref), append(e.payload, h.Payload)
		e.errs, e.at, e.digest = append(e.errs, h.Error), append(e.at, at.UnixNano()), append(e.digest, h.Digest)
	}
}

func (e *eventCols) args() []any {
	return []any{e.inst, e.seq, e.kind, e.name, e.ref, e.payload, e.errs, e.at, e.digest}
}

// createMany inserts the instances of Step.CreateMany and their first
// events with one statement, and fails the step if an ID it found taken
// belongs to another workflow.
func (c *compiler) createMany() {
	many := c.step.CreateMany
	if len(many) == 0 {
		return
	}
	n := len(many)
	ids, wfs, sts, inputs, parents := make([]string, n), make([]string, n), make([]string, n), make([][]byte, n), make([]string, n)
	owners, epochs, expires, restarts := make([]string, n), make([]int64, n), make([]int64, n), make([]string, n)
	hlens, buckets := make([]int64, n), make([]int32, n)
	var evs eventCols
	for i := range many {
		in := &many[i].Instance
		st := in.Status
		if st == "" {
			st = persistence.StatusRunning
		}
		ids[i], wfs[i], sts[i], inputs[i], parents[i] = in.ID, in.Workflow, string(st), in.Input, in.Parent
		owners[i], epochs[i], expires[i], restarts[i] = in.LeaseOwner, in.LeaseEpoch, ns(in.LeaseExpires), rowcodec.EncodeTimes(in.RecentRestarts)
		hlens[i], buckets[i] = int64(len(many[i].History)), int32(persistence.BucketOf(in.ID))
		evs.add(in.ID, many[i].History, c.now)
	}
	r := c.r
	c.add(op{label: "insert instances", name: sqlCreateMany,
		args: append([]any{ids, wfs, sts, inputs, parents, owners, epochs, expires, restarts, hlens, buckets, c.now.UnixNano(),
			int64(c.step.LeaseTTL)}, evs.args()...),
		read: func(br pgx.BatchResults) error {
			rows, _ := br.Query()
			created := make(map[string]bool, len(ids))
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				created[id] = true
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			for i, id := range ids {
				if !created[id] {
					r.res.Existed = append(r.res.Existed, i)
				}
			}
			return nil
		}})
	c.add(op{label: "check instance IDs", name: sqlCreateConflict, args: []any{ids, wfs},
		check: func(pe *pgconn.PgError) (error, *op) {
			id, wf, _ := strings.Cut(pe.Detail, "\x1f")
			requested := ""
			for i := range ids {
				if ids[i] == id {
					requested = wfs[i]
					break
				}
			}
			return &persistence.IDConflictError{ID: id, Workflow: wf, Requested: requested}, nil
		}})
}

// instance updates the instance's row under the step's conditions (lease
// epoch, history position, not ended, TakeLease's lease free); if it
// matches nothing, a diagnosis says which condition failed.
func (c *compiler) instance() {
	step := c.step
	if !step.UpdatesInstance() {
		return
	}
	var restartLog *string // NULL keeps the stored log
	if step.RestartLog != nil {
		enc := rowcodec.EncodeTimes(step.RestartLog)
		restartLog = &enc
	}
	r, id, epoch, expect, take := c.r, c.id, c.epoch, step.ExpectHistoryLen(), step.TakeLease != ""
	c.add(op{label: "update instance", name: sqlUpdateInstance,
		args: []any{step.ResetHistory, int64(len(step.History)), string(step.Status), step.SetsOutput(), step.Output, step.Error,
			step.ReleasesLease(), step.IncRestarts, c.now.UnixNano(), id, epoch, expect, restartLog, step.TakeLease, int64(step.LeaseTTL),
			step.Reopen, step.SetWaits, step.Waits},
		check: func(*pgconn.PgError) (error, *op) { return nil, diagnose(r, id, epoch, expect, take, step.Reopen) }})
}

// history drops the current run's history on ResetHistory and appends.
func (c *compiler) history() {
	if c.step.ResetHistory {
		c.add(op{label: "reset history", name: sqlResetHistory, args: []any{c.id}})
	}
	for _, e := range c.step.History {
		at := e.At
		if at.IsZero() {
			at = c.now
		}
		c.add(op{label: "append history " + c.id, name: sqlInsertEvent,
			args: []any{c.id, e.Seq, e.Kind, e.Name, e.Ref, e.Payload, e.Error, at.UnixNano(), e.Digest}})
	}
}

// consume deletes the consumed messages, every one of which must exist.
func (c *compiler) consume() {
	for _, seq := range c.step.Consume {
		name := sqlConsume
		if c.r.attempt == 0 {
			name = sqlConsumeNowait
		}
		c.add(op{label: "consume message", name: name, args: []any{seq, c.id},
			check: func(*pgconn.PgError) (error, *op) {
				return fmt.Errorf("%w: message seq %d", persistence.ErrMessageGone, seq), nil
			}})
	}
}

// claim moves the queued messages still there into the instance's mailbox.
func (c *compiler) claim() {
	if len(c.step.Claim) == 0 {
		return
	}
	r := c.r
	c.add(op{label: "claim messages", name: sqlClaim, args: []any{c.id, c.step.Claim},
		read: func(br pgx.BatchResults) error {
			rows, _ := br.Query()
			for rows.Next() {
				var seq int64
				if err := rows.Scan(&seq); err != nil {
					rows.Close()
					return err
				}
				r.res.Claimed = append(r.res.Claimed, seq)
			}
			rows.Close()
			return rows.Err()
		}})
}

// unclaim gives back what the instance claimed from channel (from every
// channel if ""), waking a competing consumer for each message.
func (c *compiler) unclaim(channel string) {
	c.add(op{label: "return claimed messages", name: sqlUnclaim, args: []any{c.id, channel}, read: c.readRequeued()})
}

// readRequeued reads the messages a statement put back in their queues
// (channel, type, the channel's competing subscribers): their subscribers
// are woken.
func (c *compiler) readRequeued() func(pgx.BatchResults) error {
	r := c.r
	return func(br pgx.BatchResults) error {
		rows, _ := br.Query()
		for rows.Next() {
			var q persistence.QueuedMessage
			if err := rows.Scan(&q.Channel, &q.Type, &q.Subscribers); err != nil {
				rows.Close()
				return err
			}
			requeued(&r.res, q)
		}
		rows.Close()
		return rows.Err()
	}
}

// requeued records in res a message given back to its queue, to wake its
// competing subscribers, if it names any.
func requeued(res *persistence.StepResult, q persistence.QueuedMessage) {
	if len(q.Subscribers) > 0 {
		res.Woken = append(res.Woken, q.Subscribers...)
		res.Queued = append(res.Queued, q)
	}
}

// subscriptions subscribes, then unsubscribes, giving back what the
// instance claimed from each channel it leaves.
func (c *compiler) subscriptions() {
	for _, sub := range c.step.Subscribe {
		// The channel lock (taken at the start of the batch, see
		// batchLocks) makes the mode check and the insert one atomic act
		// across transactions; publishing takes it shared.
		c.lock(true, c.s.chanLocks, sub.Channel)
		c.add(op{label: "subscribe", name: sqlSubscribeCheck, args: []any{sub.Channel, c.id, string(sub.Mode)},
			check: modeConflict(sub.Channel, sub.Mode)})
		c.add(op{label: "subscribe", name: sqlSubscribe, args: []any{c.id, sub.Channel, string(sub.Mode)}})
	}
	for _, ch := range c.step.Unsubscribe {
		c.add(op{label: "unsubscribe", name: sqlUnsubscribe, args: []any{c.id, ch}})
		c.unclaim(ch)
	}
}

// send adds the step's messages, in order.
func (c *compiler) send() {
	for i := 0; i < len(c.step.Send); i++ {
		m := &c.step.Send[i]
		if c.r.used[i] {
			c.r.res.Duplicates = append(c.r.res.Duplicates, m.ID)
			continue
		}
		if n := c.publishRun(i); n > 1 {
			i += n - 1
			continue
		}
		if m.Dedupe {
			c.useID(i, m.ID)
		}
		var meta any
		if len(m.Metadata) > 0 {
			meta = m.Metadata
		}
		at := m.PublishedAt
		if at.IsZero() {
			at = c.now
		}
		if m.Target != "" {
			c.sendDirect(m, meta, at)
		} else {
			c.publish(m, meta, at)
		}
	}
}

// minPublishRun is the shortest run of publishes on one channel written
// with one statement (sqlPublishMany) rather than one each.
const minPublishRun = 4

// publishRun writes the run of publishes on one channel that starts at
// Send[i] (PublishBatch's common case) with one subscriber read and one
// insert, and reports its length; below minPublishRun it writes nothing
// and reports 0.
func (c *compiler) publishRun(i int) int {
	send := c.step.Send
	first := &send[i]
	if first.Target != "" || first.Channel == "" || first.HandTo != "" {
		return 0
	}
	n := 0
	for j := i; j < len(send) && send[j].Target == "" && send[j].Channel == first.Channel && send[j].HandTo == ""; j++ {
		n++
	}
	if n < minPublishRun {
		return 0
	}
	ids, senders, types := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	payloads, metas, ats := make([][]byte, 0, n), make([]*string, 0, n), make([]int64, 0, n)
	var queued []persistence.QueuedMessage
	for j := i; j < i+n; j++ {
		m := &send[j]
		if c.r.used[j] {
			c.r.res.Duplicates = append(c.r.res.Duplicates, m.ID)
			continue
		}
		if m.Dedupe {
			c.useID(j, m.ID)
		}
		var meta *string
		if len(m.Metadata) > 0 {
			b, err := json.Marshal(m.Metadata)
			if err != nil {
				c.r.err = fmt.Errorf("postgres: metadata of message %s: %w", m.ID, err)
				return n
			}
			s := string(b)
			meta = &s
		}
		at := m.PublishedAt
		if at.IsZero() {
			at = c.now
		}
		ids, senders, types = append(ids, m.ID), append(senders, m.Sender), append(types, m.Type)
		payloads, metas, ats = append(payloads, m.Payload), append(metas, meta), append(ats, at.UnixNano())
		queued = append(queued, persistence.QueuedMessage{Channel: m.Channel, Type: m.Type})
	}
	if len(ids) == 0 {
		return n
	}
	c.lock(false, c.s.chanLocks, first.Channel)
	r, channel, cur := c.r, first.Channel, &c.s.cursors
	key := cur.Key(channel)
	c.add(op{label: "publish", name: sqlPublishSubs, args: []any{channel, key},
		read: func(br pgx.BatchResults) error {
			subs, mode, err := readSubs(br)
			if err != nil {
				return err
			}
			r.res.Woken = append(r.res.Woken, subs...)
			if persistence.Mode(mode) == persistence.Competing {
				cur.Advance(channel, key, subs, persistence.MaxQueuedSubscribers)
				for _, q := range queued {
					q.Subscribers = subs
					r.res.Queued = append(r.res.Queued, q)
				}
			}
			return nil
		},
		check: modeConflict(channel, persistence.Broadcast)})
	c.add(op{label: "publish", name: sqlPublishMany, args: []any{channel, ids, senders, payloads, metas, ats, types}})
	return n
}

// useID records the ID of the Dedupe message Send[i], first, as in every
// driver: a duplicate is skipped whatever became of its target or channel
// since. A used ID fails this statement; runTx then marks the message used
// and applies the step again without it (see errUsed).
func (c *compiler) useID(i int, id string) {
	r := c.r
	c.add(op{label: "record message ID", name: sqlUseMessageID, args: []any{id, c.now.UnixNano()},
		check: func(*pgconn.PgError) (error, *op) {
			if r.used == nil {
				r.used = map[int]bool{}
			}
			r.used[i] = true
			return errUsed, nil
		}})
}

// sendDirect sends a message to its Target: checked against the channel's
// mode, and against the target's existence with MustDeliver.
func (c *compiler) sendDirect(m *persistence.NewMessage, meta any, at time.Time) {
	if m.Channel != "" {
		c.lock(false, c.s.chanLocks, m.Channel)
		c.add(op{label: "send", name: sqlDirectCheck, args: []any{m.Channel}, check: modeConflict(m.Channel, persistence.Direct)})
	}
	// Shared, against the exclusive lock a step ending the target
	// takes: the message either lands before the target's mailbox
	// is dropped (and is dropped with it) or sees the target ended.
	c.lockSend(m.Target)
	r, target := c.r, m.Target
	if m.MustDeliver {
		c.add(op{label: "send", name: sqlTargetCheck, args: []any{target},
			check: func(pe *pgconn.PgError) (error, *op) {
				if pe.Message == checkNotFound {
					return fmt.Errorf("%w: %s", persistence.ErrNotFound, target), nil
				}
				return fmt.Errorf("%w: %s is %s", persistence.ErrInstanceDone, target, pe.Detail), nil
			}})
	}
	c.add(op{label: "send", name: sqlSendDirect, args: []any{m.ID, m.Channel, m.Target, m.Sender, m.Payload, meta, at.UnixNano(), m.Type},
		read: func(br pgx.BatchResults) error {
			tag, err := br.Exec()
			if err == nil && tag.RowsAffected() > 0 {
				r.res.Woken = append(r.res.Woken, target)
			}
			return err
		}})
}

// publish publishes a message on its channel: copied to every broadcast
// subscriber, else queued; the subscribers are woken.
func (c *compiler) publish(m *persistence.NewMessage, meta any, at time.Time) {
	args := []any{m.ID, m.Channel, m.Sender, m.Payload, meta, at.UnixNano(), m.Type}
	if m.Channel == "" {
		c.add(op{label: "publish", name: sqlQueue, args: args})
		return
	}
	c.lock(false, c.s.chanLocks, m.Channel)
	r, channel, typ, cur := c.r, m.Channel, m.Type, &c.s.cursors
	key := cur.Key(channel)
	if m.HandTo != "" {
		c.publishHand(m, append(args, m.HandTo, m.HandOwner, key), at, key)
		return
	}
	c.add(op{label: "publish", name: sqlPublish, args: append(args, key),
		read: func(br pgx.BatchResults) error {
			rows, _ := br.Query()
			defer rows.Close()
			var ids []string
			var mode string
			for rows.Next() {
				var id string
				if err := rows.Scan(&id, &mode); err != nil {
					return err
				}
				ids = append(ids, id)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			r.res.Woken = append(r.res.Woken, ids...)
			if persistence.Mode(mode) == persistence.Competing {
				cur.Advance(channel, key, ids, persistence.MaxQueuedSubscribers)
				r.res.Queued = append(r.res.Queued, persistence.QueuedMessage{Channel: channel, Type: typ, Subscribers: ids})
			}
			return nil
		},
		check: modeConflict(m.Channel, persistence.Broadcast)})
}

// publishHand is publish for a message with a consumer to hand it to
// (NewMessage.HandTo): in that consumer's mailbox if it may take it, else
// queued as publish queues it. args are sqlPublishHand's; key is the
// channel's cursor in them.
func (c *compiler) publishHand(m *persistence.NewMessage, args []any, at time.Time, key string) {
	r, cur := c.r, &c.s.cursors
	handed := persistence.Message{ID: m.ID, Channel: m.Channel, Sender: m.Sender, Type: m.Type,
		Payload: m.Payload, Metadata: m.Metadata, PublishedAt: fromNS(at.UnixNano())}
	c.add(op{label: "publish", name: sqlPublishHand, args: args,
		read: func(br pgx.BatchResults) error {
			rows, _ := br.Query()
			defer rows.Close()
			var ids []string
			var mode string
			var seq *int64
			var target *string
			for rows.Next() {
				var id string
				if err := rows.Scan(&id, &mode, &seq, &target); err != nil {
					return err
				}
				ids = append(ids, id)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if target != nil && seq != nil {
				handed.Seq, handed.Target = *seq, *target
				r.res.Woken = append(r.res.Woken, *target)
				r.res.Handed = append(r.res.Handed, handed)
				return nil
			}
			r.res.Woken = append(r.res.Woken, ids...)
			if persistence.Mode(mode) == persistence.Competing {
				cur.Advance(handed.Channel, key, ids, persistence.MaxQueuedSubscribers)
				r.res.Queued = append(r.res.Queued, persistence.QueuedMessage{Channel: handed.Channel, Type: handed.Type, Subscribers: ids})
			}
			return nil
		},
		check: modeConflict(m.Channel, persistence.Broadcast)})
}

// timers cancels, fires (each must exist) and adds (or moves) timers.
func (c *compiler) timers() {
	id := c.id
	for _, t := range c.step.CancelTimers {
		c.add(op{label: "cancel timer", name: sqlCancelTimer, args: []any{id, t}})
	}
	for _, t := range c.step.FireTimers {
		c.add(op{label: "fire timer", name: sqlFireTimer, args: []any{id, t},
			check: func(*pgconn.PgError) (error, *op) {
				return fmt.Errorf("%w: %s/%s", persistence.ErrTimerGone, id, t), nil
			}})
	}
	for _, t := range c.step.AddTimers {
		c.add(op{label: "add timer", name: sqlAddTimer, args: []any{id, t.ID, t.Due.UnixNano(), int32(persistence.BucketOf(id))}})
	}
}

// emit adds the step's outgoing events to the outbox. (runTx adds the
// NOTIFY that wakes other processes' relayers.)
func (c *compiler) emit() {
	for _, e := range c.step.Emit {
		at := e.At
		if at.IsZero() {
			at = c.now
		}
		c.add(op{label: "emit " + e.ID, name: sqlEmit, args: []any{e.ID, e.Instance, e.Type, e.Data, at.UnixNano()}})
	}
}

// end cleans up after an instance the step ended: its subscriptions and
// timers go, what it claimed goes back to its queues, its mail goes. (The
// update released its lease.)
func (c *compiler) end() {
	if !c.step.Status.Terminal() {
		return
	}
	c.lockEnd(c.id)
	c.add(op{label: "release ended instance", name: sqlEndInstance, args: []any{c.id}})
	c.add(op{label: "release ended instance", name: sqlDropMailbox, args: []any{c.id}, read: c.readRequeued()})
}

// errUsed is the outcome of a Dedupe message's ID check that found the ID
// used: not an error of the step, which runTx applies again without the
// message.
var errUsed = errors.New("postgres: message ID used")

// firstErr returns the first non-nil error: validation reports one
// violation, as Step.Validate does.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// modeConflict maps a failed mode check (detail: the existing mode) to a
// ModeConflictError.
func modeConflict(channel string, requested persistence.Mode) func(*pgconn.PgError) (error, *op) {
	return func(pe *pgconn.PgError) (error, *op) {
		return &persistence.ModeConflictError{Channel: channel, Existing: persistence.Mode(pe.Detail), Requested: requested}, nil
	}
}

// diagnose is the statement that tells why a conditional instance update
// matched nothing; it runs after the step was rolled back.
func diagnose(r *writeReq, id string, epoch, expect int64, take, reopen bool) *op {
	return &op{req: r, follow: true, label: "read instance " + id, name: sqlInstanceState, args: []any{id},
		read: func(br pgx.BatchResults) error {
			var status string
			var gotEpoch, hlen int64
			err := br.QueryRow().Scan(&status, &gotEpoch, &hlen)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				r.err = fmt.Errorf("%w: %s", persistence.ErrNotFound, id)
			case err != nil:
				return err
			case reopen && !persistence.Status(status).Terminal():
				r.err = fmt.Errorf("%w: %s is %s", persistence.ErrInstanceLive, id, status)
			case !reopen && persistence.Status(status).Terminal():
				r.err = fmt.Errorf("%w: %s is %s", persistence.ErrInstanceDone, id, status)
			case gotEpoch != epoch:
				r.err = fmt.Errorf("%w: %s epoch %d, writer has %d", persistence.ErrFenced, id, gotEpoch, epoch)
			case take && (expect < 0 || hlen == expect):
				r.err = fmt.Errorf("%w: %s is leased to another owner", persistence.ErrLeaseHeld, id)
			default:
				r.err = fmt.Errorf("%w: %s has %d events, step starts at %d", persistence.ErrHistoryGap, id, hlen, expect)
			}
			return nil
		}}
}

// retry runs fn again (up to maxAttempts times) while it fails with a
// transient conflict.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	if s.isClosed() {
		return persistence.ErrStoreClosed
	}
	var err error
	for i := 0; i < maxAttempts; i++ {
		if err = fn(); !retryable(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// AcquireLease takes an instance's lease.
func (s *Store) AcquireLease(ctx context.Context, id, owner string, ttl time.Duration) (persistence.Instance, error) {
	var inst persistence.Instance
	if err := firstErr(persistence.ValidateID("id", id), persistence.ValidateID("owner", owner)); err != nil {
		return inst, err
	}
	err := s.retry(ctx, func() error {
		var err error
		inst, err = scanInstance(s.pool.QueryRow(ctx, sqlAcquireLease, id, owner, int64(ttl), s.now().UnixNano()))
		if err == nil {
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("postgres: acquire lease: %w", err)
		}
		inst, err = scanInstance(s.pool.QueryRow(ctx, sqlInstance, id))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: %s", persistence.ErrNotFound, id)
		case err != nil:
			return fmt.Errorf("postgres: acquire lease: %w", err)
		case inst.Status.Terminal():
			return fmt.Errorf("%w: %s is %s", persistence.ErrInstanceDone, id, inst.Status)
		}
		return fmt.Errorf("%w: %s held by %s until %s", persistence.ErrLeaseHeld, id, inst.LeaseOwner, inst.LeaseExpires.Format(time.RFC3339Nano))
	})
	return inst, err
}

// RenewLeases extends all of owner's leases.
func (s *Store) RenewLeases(ctx context.Context, owner string, ttl time.Duration) ([]string, error) {
	if err := persistence.ValidateID("owner", owner); err != nil {
		return nil, err
	}
	var ids []string
	err := s.retry(ctx, func() error {
		rows, _ := s.pool.Query(ctx, sqlRenewLeases, owner, int64(ttl))
		var err error
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return fmt.Errorf("postgres: renew leases: %w", err)
		}
		return nil
	})
	return ids, err
}

// ReleaseLeases drops all of owner's leases and fences their holders.
func (s *Store) ReleaseLeases(ctx context.Context, owner string) error {
	if err := persistence.ValidateID("owner", owner); err != nil {
		return err
	}
	// Every survivor of a dead node releases its leases, at about the same
	// time. Side by side, the later statement would wait for the earlier
	// one's commit and then, re-checking each row under READ COMMITTED,
	// lock every row the earlier one released (without changing it) until
	// it ends, in the way of the nodes taking those instances over. So
	// releasers of one owner take turns, in a transaction: the later one's
	// UPDATE starts after the earlier one committed, finds nothing left and
	// locks nothing.
	space, key := lockSpace(s.opts.Schema, "release"), lockHash(owner)
	return s.retry(ctx, func() error {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, sqlReleaseTurn, space, key); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sqlReleaseLeases, owner)
			return err
		})
		if err != nil {
			return fmt.Errorf("postgres: release leases: %w", err)
		}
		return nil
	})
}

// RequestCancel records a cancel request; the first reason stays.
func (s *Store) RequestCancel(ctx context.Context, id, reason string) error {
	if err := firstErr(persistence.ValidateID("id", id), persistence.ValidateReason(reason)); err != nil {
		return err
	}
	if reason == "" {
		reason = "cancelled"
	}
	return s.retry(ctx, func() error {
		tag, err := s.pool.Exec(ctx, sqlCancel, id, reason, s.now().UnixNano())
		if err != nil {
			return fmt.Errorf("postgres: cancel: %w", err)
		}
		if tag.RowsAffected() > 0 {
			s.queueWake([]string{id}) // its owner may be in another process
			return nil
		}
		// Nothing changed: no such instance, ended, or already cancelled.
		var status string
		err = s.pool.QueryRow(ctx, sqlStatus, id).Scan(&status)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: %s", persistence.ErrNotFound, id)
		case err != nil:
			return fmt.Errorf("postgres: cancel: %w", err)
		case persistence.Status(status).Terminal():
			return fmt.Errorf("%w: %s is %s", persistence.ErrInstanceDone, id, status)
		}
		return nil
	})
}

// readSubs reads sqlPublishSubs: the channel's subscribers and its mode.
func readSubs(br pgx.BatchResults) (ids []string, mode string, err error) {
	rows, _ := br.Query()
	defer rows.Close()
	for rows.Next() {
		var id string
		var ok bool
		if err := rows.Scan(&id, &ok, &mode); err != nil {
			return nil, "", err
		}
		ids = append(ids, id)
	}
	return ids, mode, rows.Err()
}
