package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/internal/rowcodec"
)

// liveSQL is "the instance has not ended", as three comparisons: SQLite
// evaluates NOT IN over three or more constants through a temporary table
// it builds on every execution, which every step's update paid for.
const liveSQL = `(status <> 'completed' AND status <> 'failed' AND status <> 'cancelled')`

// stmts are the writer connection's prepared statements for the hot path.
type stmts struct {
	insertInstance *sql.Stmt
	updateInstance *sql.Stmt
	instanceHolds  *sql.Stmt
	channelMode    *sql.Stmt // the mode of another subscriber of a channel
	insertSub      *sql.Stmt
	deleteSub      *sql.Stmt
	targetStatus   *sql.Stmt // a message's target's status (NewMessage.MustDeliver)
	appendInstance *sql.Stmt
	insertEvent    *sql.Stmt
	deleteMessage  *sql.Stmt
	insertMessage  *sql.Stmt
	insertIfLive   *sql.Stmt
	useMessageID   *sql.Stmt
	channelSubs    *sql.Stmt // every subscriber of a channel (a broadcast's)
	channelSample  *sql.Stmt // the competing subscribers a queued message names
	channelWake    *sql.Stmt // channelSample, or else the channel's mode
	deleteTimer    *sql.Stmt
	upsertTimer    *sql.Stmt
	instanceState  *sql.Stmt
	savepoint      *sql.Stmt
	acquireLease   *sql.Stmt
	readInstance   *sql.Stmt
	dropSubs       *sql.Stmt
	dropTimers     *sql.Stmt
	dropMail       *sql.Stmt
	claimMessage   *sql.Stmt
	unclaimAll     *sql.Stmt
	unclaimChannel *sql.Stmt
	insertOutbox   *sql.Stmt
	release        *sql.Stmt
	rollbackTo     *sql.Stmt
	// ClaimQueue's (see fetch.go).
	queueConsumer *sql.Stmt
	queueHead     *sql.Stmt
	holdClaims    *sql.Stmt
	queueLeft     *sql.Stmt
}

// preparer prepares statements on db until the first error, which it keeps.
type preparer struct {
	ctx context.Context
	db  *sql.DB
	err error
}

func (p *preparer) prep(q string) *sql.Stmt {
	if p.err != nil {
		return nil
	}
	s, err := p.db.PrepareContext(p.ctx, q)
	p.err = err
	return s
}

func closeStmts(ss ...*sql.Stmt) {
	for _, s := range ss {
		if s != nil {
			s.Close()
		}
	}
}

func (st *stmts) prepare(ctx context.Context, db *sql.DB) error {
	pr := &preparer{ctx: ctx, db: db}
	p := pr.prep
	st.insertInstance = p(`INSERT INTO instances (id, workflow, status, input, parent, lease_owner, lease_epoch, lease_expires, restart_log,
			run, history_len, created_at, updated_at, bucket, holds)
		VALUES (?, ?, ?, ?, ?, NULLIF(?, ''), ?, ?, ?, 0, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`)
	update := `UPDATE instances SET
		history_len = CASE WHEN ?1 THEN ?2 ELSE history_len + ?2 END,
		run = run + ?1,
		status = COALESCE(NULLIF(?3, ''), CASE WHEN ?14 != '' AND status = 'waiting' THEN 'running' ELSE status END),
		output = CASE WHEN ?4 THEN ?5 ELSE output END,
		error = CASE WHEN ?4 THEN ?6 ELSE error END,
		lease_owner = CASE WHEN ?7 THEN NULL WHEN ?14 != '' THEN ?14 ELSE lease_owner END,
		lease_expires = CASE WHEN ?7 THEN 0 WHEN ?14 != '' THEN ?15 ELSE lease_expires END,
		lease_epoch = lease_epoch + (?14 != ''),
		restarts = restarts + ?8,
		restart_log = COALESCE(?13, restart_log),
		holds = holds | ?16,
		cancel_reason = CASE WHEN ?17 THEN '' ELSE cancel_reason END,
		waits = CASE WHEN ?18 THEN ?19 WHEN ?17 OR ?3 IN ('completed', 'failed', 'cancelled') THEN NULL ELSE waits END,
		updated_at = ?9
		WHERE id = ?10 AND lease_epoch = ?11 AND (?12 < 0 OR history_len = ?12)
			AND (CASE WHEN ?17 THEN NOT ` + liveSQL + ` ELSE ` + liveSQL + ` END)
			AND (?14 = '' OR lease_owner IS NULL OR lease_owner = ?14 OR lease_expires < ?9)`
	st.updateInstance = p(update)
	// Read after an ending update rather than RETURNING from it: SQLite
	// builds a temporary table for every execution of a RETURNING
	// statement, which costs more than this lookup.
	st.instanceHolds = p(`SELECT holds FROM instances WHERE id = ?`)
	// Most steps only append history: setting no indexed column but
	// updated_at, SQLite then leaves the status and lease indexes alone
	// (an UPDATE that names a column rewrites every index holding it).
	st.appendInstance = p(`UPDATE instances SET history_len = history_len + ?1, holds = holds | ?6, updated_at = ?2,
		waits = CASE WHEN ?7 THEN ?8 ELSE waits END
		WHERE id = ?3 AND lease_epoch = ?4 AND (?5 < 0 OR history_len = ?5) AND ` + liveSQL)
	st.channelMode = p(`SELECT mode FROM subscriptions WHERE channel = ? AND instance_id != ? LIMIT 1`)
	st.insertSub = p(`INSERT INTO subscriptions (instance_id, channel, mode) VALUES (?, ?, ?)
		ON CONFLICT (instance_id, channel) DO UPDATE SET mode = excluded.mode`)
	st.deleteSub = p(`DELETE FROM subscriptions WHERE instance_id = ? AND channel = ?`)
	st.targetStatus = p(`SELECT status FROM instances WHERE id = ?`)
	st.insertEvent = p(`INSERT INTO history (instance_id, seq, kind, name, ref, payload, error, digest, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	// A message still queued, or in the instance's own mailbox: not one
	// that another consumer claimed since the step's read.
	st.deleteMessage = p(`DELETE FROM messages WHERE seq = ? AND (target IS NULL OR target = ?)`)
	st.insertMessage = p(`INSERT INTO messages (msg_id, channel, target, sender, type, payload, metadata, published_at)
		VALUES (?, ?, NULLIF(?, ''), ?, ?, ?, ?, ?)`)
	st.insertIfLive = p(`INSERT INTO messages (msg_id, channel, target, sender, type, payload, metadata, published_at)
		SELECT ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM instances WHERE id = ?3 AND ` + liveSQL + `)`)
	// The writer is the only one in this process and the write lock keeps
	// other processes out, so "insert unless present" is race-free here.
	st.useMessageID = p(`INSERT INTO message_ids (msg_id, created_at) VALUES (?, ?) ON CONFLICT (msg_id) DO NOTHING`)
	st.channelSubs = p(`SELECT instance_id FROM subscriptions WHERE channel = ?`)
	// The competing subscribers of ?1 after ?2 in ID order, then, wrapping,
	// from the start: persistence.MaxQueuedSubscribers of them at most, a
	// range read of subscriptions_competing.
	window := `SELECT instance_id FROM subscriptions WHERE channel = ?1 AND mode = 'competing' AND instance_id `
	limit := strconv.Itoa(persistence.MaxQueuedSubscribers)
	sample := `SELECT instance_id FROM (` + window + `> ?2 ORDER BY instance_id LIMIT ` + limit + `)
		UNION ALL SELECT instance_id FROM (` + window + `<= ?2 ORDER BY instance_id LIMIT ` + limit + `)
		LIMIT ` + limit
	st.channelSample = p(sample)
	// A publish's one read of the subscriptions: the sample of a competing
	// channel, else one row with no ID and the channel's mode (no row if
	// nobody subscribes; every subscriber has the channel's mode).
	st.channelWake = p(`SELECT instance_id, 'competing' FROM (` + sample + `)
		UNION ALL SELECT NULL, m.mode FROM (SELECT mode FROM subscriptions WHERE channel = ?1 LIMIT 1) m WHERE m.mode != 'competing'`)
	st.deleteTimer = p(`DELETE FROM timers WHERE instance_id = ? AND timer_id = ?`)
	st.upsertTimer = p(`INSERT INTO timers (instance_id, timer_id, due, bucket) VALUES (?, ?, ?, ?)
		ON CONFLICT (instance_id, timer_id) DO UPDATE SET due = excluded.due, bucket = excluded.bucket`)
	st.instanceState = p(`SELECT status, lease_epoch, history_len FROM instances WHERE id = ?`)
	st.savepoint = p(`SAVEPOINT step`)
	st.acquireLease = p(`UPDATE instances SET lease_owner = ?, lease_epoch = lease_epoch + 1, lease_expires = ?,
			status = CASE WHEN status = 'waiting' THEN 'running' ELSE status END, updated_at = ?
			WHERE id = ? AND ` + liveSQL + ` AND (lease_owner IS NULL OR lease_owner = ? OR lease_expires < ?)`)
	st.readInstance = p(instanceSelect + ` WHERE id = ?`)
	st.dropSubs = p(`DELETE FROM subscriptions WHERE instance_id = ?`)
	st.dropTimers = p(`DELETE FROM timers WHERE instance_id = ?`)
	st.dropMail = p(`DELETE FROM messages WHERE target = ?`)
	st.claimMessage = p(`UPDATE messages SET target = ?, claimed = 1 WHERE seq = ? AND target IS NULL`)
	// Every end runs the first: one probe of messages_target when the
	// instance has no mail.
	st.unclaimAll = p(`UPDATE messages SET target = NULL, claimed = 0 WHERE target = ? AND claimed = 1 RETURNING channel, type`)
	st.unclaimChannel = p(`UPDATE messages SET target = NULL, claimed = 0 WHERE target = ? AND claimed = 1 AND channel = ?
		RETURNING channel, type`)
	// An ID already in the outbox is the same event emitted again (a step
	// retried after its commit was not acknowledged): keep the first.
	st.insertOutbox = p(`INSERT INTO outbox (id, instance, type, data, created_at, status, next_attempt)
		VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?5) ON CONFLICT (id) DO NOTHING`)
	st.release = p(`RELEASE step`)
	st.rollbackTo = p(`ROLLBACK TO step`)
	st.queueConsumer = p(queueConsumerSQL)
	st.queueHead = p(queueHeadSQL)
	st.holdClaims = p(`UPDATE instances SET holds = holds | 4 WHERE id = ?`)
	st.queueLeft = p(queueLeftSQL)
	return pr.err
}

func (st *stmts) close() {
	closeStmts(st.insertInstance, st.updateInstance, st.instanceHolds, st.channelMode, st.insertSub, st.deleteSub, st.targetStatus, st.appendInstance, st.insertEvent, st.deleteMessage, st.insertMessage,
		st.insertIfLive, st.useMessageID, st.channelSubs, st.channelSample, st.channelWake, st.deleteTimer, st.upsertTimer, st.instanceState, st.savepoint, st.release,
		st.rollbackTo, st.acquireLease, st.readInstance, st.dropSubs, st.dropTimers, st.dropMail, st.insertOutbox,
		st.claimMessage, st.unclaimAll, st.unclaimChannel, st.queueConsumer, st.queueHead, st.holdClaims, st.queueLeft)
}

// Apply commits one step; concurrent calls share commits.
func (s *Store) Apply(ctx context.Context, step persistence.Step) (persistence.StepResult, error) {
	var res persistence.StepResult
	if err := step.Validate(); err != nil {
		return res, err
	}
	err := s.write(ctx, simple(step), func(tx *sql.Tx) error {
		res = persistence.StepResult{}
		return s.applyStep(tx, &step, &res)
	})
	return res, err
}

// simple reports whether step can fail only before its first write, with
// one of the errors failsBeforeWriting lists, so that it needs no savepoint
// of its own in a shared commit. Consuming a message, subscribing, firing a
// timer, a MustDeliver send and CreateMany (an ID of another workflow) can
// fail after the step wrote. A send can
// too, on a channel whose mode conflicts, but that is a programming error,
// not a race: it costs the commit a redo with a savepoint around every step
// (see commit), and sends are too common (every instance's end sends its
// Down) to pay for a savepoint each.
func simple(step persistence.Step) bool {
	if len(step.Consume) > 0 || len(step.CreateMany) > 0 || len(step.Subscribe) > 0 || len(step.FireTimers) > 0 {
		return false
	}
	for _, m := range step.Send {
		if m.MustDeliver {
			return false
		}
	}
	return true
}

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

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// stepWriter applies one step in the writer's transaction, one method per
// concern, in the order persistence.Step specifies.
type stepWriter struct {
	s     *Store
	tx    *sql.Tx
	step  *persistence.Step
	res   *persistence.StepResult
	now   time.Time
	id    string
	epoch int64
	adds  int64 // what the step adds to the instance's holds
	holds int64 // what an ending instance has to clean up
	ss    sendState
}

// applyStep applies step in tx. It takes the step by pointer: w's fields
// escape (tx is kept by stmt), and with them a copy of the step would.
func (s *Store) applyStep(tx *sql.Tx, step *persistence.Step, res *persistence.StepResult) error {
	w := stepWriter{s: s, tx: tx, step: step, res: res, now: time.Now(), adds: stepHolds(step), holds: holdsAll}
	w.id, w.epoch = step.Target()
	if len(step.CreateMany) > 0 {
		return w.createMany() // a step with CreateMany has nothing else
	}
	if step.Create != nil {
		if created, err := w.create(); err != nil || !created {
			return err
		}
	}
	if err := w.instance(); err != nil {
		return err
	}
	if err := w.history(); err != nil {
		return err
	}
	if err := w.consume(); err != nil {
		return err
	}
	if err := w.claim(); err != nil {
		return err
	}
	if err := w.subscriptions(); err != nil {
		return err
	}
	if err := w.send(); err != nil {
		return err
	}
	if err := w.timers(); err != nil {
		return err
	}
	if err := w.emit(); err != nil {
		return err
	}
	return w.end()
}

// create inserts the new instance. It reports false, with StepResult.Existing
// set, if the ID is taken: then nothing else of the step applies.
func (w *stepWriter) create() (bool, error) {
	step, c := w.step, w.step.Create
	expires := ns(c.LeaseExpires)
	if step.LeaseTTL > 0 {
		expires = w.now.Add(step.LeaseTTL).UnixNano()
	}
	r, err := w.s.stmt(w.tx, w.s.st.insertInstance).Exec(c.ID, c.Workflow, string(step.CreateStatus()), c.Input, c.Parent, c.LeaseOwner, c.LeaseEpoch,
		expires, rowcodec.EncodeTimes(step.CreateRestarts()), step.CreateHistoryLen(), w.now.UnixNano(), w.now.UnixNano(), persistence.BucketOf(c.ID), w.adds)
	if err != nil {
		return false, fmt.Errorf("sqlite: insert instance: %w", err)
	}
	if n, _ := r.RowsAffected(); n > 0 {
		return true, nil
	}
	inst, err := scanInstance(w.tx.QueryRow(instanceSelect+` WHERE id = ?`, c.ID))
	if err != nil {
		return false, fmt.Errorf("sqlite: read existing instance: %w", err)
	}
	w.res.Existing = &inst
	return false, nil
}

// createMany inserts the instances of Step.CreateMany and their first
// events, skipping (and listing in StepResult.Existed) those whose ID an
// instance of the same workflow holds. One of another workflow fails the
// step, whose savepoint (see simple) undoes what it wrote before.
func (w *stepWriter) createMany() error {
	ins, ev := w.s.stmt(w.tx, w.s.st.insertInstance), w.s.stmt(w.tx, w.s.st.insertEvent)
	now := w.now.UnixNano()
	for i := range w.step.CreateMany {
		c := &w.step.CreateMany[i]
		in := &c.Instance
		status, expires := in.Status, ns(in.LeaseExpires)
		if status == "" {
			status = persistence.StatusRunning
		}
		if w.step.LeaseTTL > 0 && in.LeaseOwner != "" {
			expires = w.now.Add(w.step.LeaseTTL).UnixNano()
		}
		r, err := ins.Exec(in.ID, in.Workflow, string(status), in.Input, in.Parent, in.LeaseOwner, in.LeaseEpoch, expires,
			rowcodec.EncodeTimes(in.RecentRestarts), len(c.History), now, now, persistence.BucketOf(in.ID), 0)
		if err != nil {
			return fmt.Errorf("sqlite: insert instance %s: %w", in.ID, err)
		}
		if n, _ := r.RowsAffected(); n == 0 {
			var wf string
			if err := w.tx.QueryRow(`SELECT workflow FROM instances WHERE id = ?`, in.ID).Scan(&wf); err != nil {
				return fmt.Errorf("sqlite: read existing instance %s: %w", in.ID, err)
			}
			if wf != in.Workflow {
				return &persistence.IDConflictError{ID: in.ID, Workflow: wf, Requested: in.Workflow}
			}
			w.res.Existed = append(w.res.Existed, i)
			continue
		}
		for _, e := range c.History {
			at := e.At
			if at.IsZero() {
				at = w.now
			}
			if _, err := ev.Exec(in.ID, e.Seq, e.Kind, e.Name, e.Ref, e.Payload, e.Error, e.Digest, at.UnixNano()); err != nil {
				return fmt.Errorf("sqlite: append history %s#%d: %w", in.ID, e.Seq, err)
			}
		}
	}
	return nil
}

// instance updates the instance's row under the step's conditions (lease
// epoch, history position, not ended, TakeLease's lease free) and says
// which one failed if it matched nothing.
func (w *stepWriter) instance() error {
	step := w.step
	if !step.UpdatesInstance() {
		return nil
	}
	expect := step.ExpectHistoryLen()
	var n int64
	var err error
	if step.AppendOnly() {
		n, err = w.appendRow(expect)
	} else {
		n, err = w.updateRow(expect)
	}
	if err != nil {
		return fmt.Errorf("sqlite: update instance: %w", err)
	}
	if n == 0 {
		return w.s.diagnose(w.tx, w.id, w.epoch, expect, step.TakeLease != "", step.Reopen)
	}
	return nil
}

// appendRow is the update of a step that only appends history: it sets no
// indexed column but updated_at (see stmts.appendInstance).
func (w *stepWriter) appendRow(expect int64) (int64, error) {
	r, err := w.s.stmt(w.tx, w.s.st.appendInstance).Exec(len(w.step.History), w.now.UnixNano(), w.id, w.epoch, expect, w.adds,
		b2i(w.step.SetWaits), w.step.Waits)
	if err != nil {
		return 0, err
	}
	n, _ := r.RowsAffected()
	return n, nil
}

// updateRow is the full update: status, output, lease, restarts, run. An
// ending update also reads what the instance holds, for end.
func (w *stepWriter) updateRow(expect int64) (int64, error) {
	step := w.step
	var restartLog any // NULL keeps the stored log
	if step.RestartLog != nil {
		restartLog = rowcodec.EncodeTimes(step.RestartLog)
	}
	var expires int64
	if step.TakeLease != "" {
		expires = w.now.Add(step.LeaseTTL).UnixNano()
	}
	r, err := w.s.stmt(w.tx, w.s.st.updateInstance).Exec(b2i(step.ResetHistory), len(step.History), string(step.Status), b2i(step.SetsOutput()),
		step.Output, step.Error, b2i(step.ReleasesLease()), b2i(step.IncRestarts), w.now.UnixNano(), w.id, w.epoch, expect, restartLog,
		step.TakeLease, expires, w.adds, b2i(step.Reopen), b2i(step.SetWaits), step.Waits)
	if err != nil {
		return 0, err
	}
	n, _ := r.RowsAffected()
	if n > 0 && step.Status.Terminal() {
		// What the instance holds, so that end skips what it never had.
		// (Scanned into a local: w itself would escape to the heap.)
		var holds int64
		err = w.s.stmt(w.tx, w.s.st.instanceHolds).QueryRow(w.id).Scan(&holds)
		w.holds = holds
	}
	return n, err
}

// history drops the current run's history on ResetHistory and appends.
func (w *stepWriter) history() error {
	if w.step.ResetHistory {
		if _, err := w.tx.Exec(`DELETE FROM history WHERE instance_id = ?`, w.id); err != nil {
			return fmt.Errorf("sqlite: reset history: %w", err)
		}
	}
	if len(w.step.History) == 0 {
		return nil
	}
	ins := w.s.stmt(w.tx, w.s.st.insertEvent)
	for _, e := range w.step.History {
		at := e.At
		if at.IsZero() {
			at = w.now
		}
		if _, err := ins.Exec(w.id, e.Seq, e.Kind, e.Name, e.Ref, e.Payload, e.Error, e.Digest, at.UnixNano()); err != nil {
			return fmt.Errorf("sqlite: append history %s#%d: %w", w.id, e.Seq, err)
		}
	}
	return nil
}

// consume deletes the consumed messages, every one of which must exist.
func (w *stepWriter) consume() error {
	if len(w.step.Consume) == 0 {
		return nil
	}
	del := w.s.stmt(w.tx, w.s.st.deleteMessage)
	for _, seq := range w.step.Consume {
		r, err := del.Exec(seq, w.id)
		if err != nil {
			return fmt.Errorf("sqlite: consume message: %w", err)
		}
		if n, _ := r.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: message seq %d", persistence.ErrMessageGone, seq)
		}
	}
	return nil
}

// claim moves the queued messages still there into the instance's mailbox.
func (w *stepWriter) claim() error {
	if len(w.step.Claim) == 0 {
		return nil
	}
	claim := w.s.stmt(w.tx, w.s.st.claimMessage)
	for _, seq := range w.step.Claim {
		r, err := claim.Exec(w.id, seq)
		if err != nil {
			return fmt.Errorf("sqlite: claim message: %w", err)
		}
		if n, _ := r.RowsAffected(); n > 0 {
			w.res.Claimed = append(w.res.Claimed, seq)
		}
	}
	return nil
}

// subscriptions subscribes, then unsubscribes, giving back what the
// instance claimed from each channel it leaves.
func (w *stepWriter) subscriptions() error {
	for _, sub := range w.step.Subscribe {
		if err := w.s.subscribe(w.tx, w.id, sub); err != nil {
			return err
		}
	}
	for _, ch := range w.step.Unsubscribe {
		if _, err := w.s.stmt(w.tx, w.s.st.deleteSub).Exec(w.id, ch); err != nil {
			return fmt.Errorf("sqlite: unsubscribe: %w", err)
		}
		if err := w.s.unclaim(w.tx, w.id, ch, w.res); err != nil {
			return err
		}
	}
	return nil
}

// send adds the step's messages, in order.
func (w *stepWriter) send() error {
	for _, m := range w.step.Send {
		if err := w.s.send(w.tx, &w.ss, m, w.now, w.res); err != nil {
			return err
		}
	}
	return nil
}

// timers cancels, fires (each must exist) and adds (or moves) timers.
func (w *stepWriter) timers() error {
	step := w.step
	if len(step.CancelTimers) > 0 || len(step.FireTimers) > 0 {
		del := w.s.stmt(w.tx, w.s.st.deleteTimer)
		for _, t := range step.CancelTimers {
			if _, err := del.Exec(w.id, t); err != nil {
				return fmt.Errorf("sqlite: cancel timer: %w", err)
			}
		}
		for _, t := range step.FireTimers {
			r, err := del.Exec(w.id, t)
			if err != nil {
				return fmt.Errorf("sqlite: fire timer: %w", err)
			}
			if n, _ := r.RowsAffected(); n == 0 {
				return fmt.Errorf("%w: %s/%s", persistence.ErrTimerGone, w.id, t)
			}
		}
	}
	if len(step.AddTimers) == 0 {
		return nil
	}
	up := w.s.stmt(w.tx, w.s.st.upsertTimer)
	bucket := persistence.BucketOf(w.id)
	for _, t := range step.AddTimers {
		if _, err := up.Exec(w.id, t.ID, t.Due.UnixNano(), bucket); err != nil {
			return fmt.Errorf("sqlite: add timer: %w", err)
		}
	}
	return nil
}

// emit adds the step's outgoing events to the outbox.
func (w *stepWriter) emit() error {
	if len(w.step.Emit) == 0 {
		return nil
	}
	ins := w.s.stmt(w.tx, w.s.st.insertOutbox)
	for _, e := range w.step.Emit {
		at := e.At
		if at.IsZero() {
			at = w.now
		}
		if _, err := ins.Exec(e.ID, e.Instance, e.Type, e.Data, at.UnixNano()); err != nil {
			return fmt.Errorf("sqlite: emit %s: %w", e.ID, err)
		}
	}
	return nil
}

// end cleans up after an instance the step ended: its subscriptions and
// timers go, what it claimed goes back to its queues, its mail goes. (The
// update released its lease.)
func (w *stepWriter) end() error {
	if !w.step.Status.Terminal() {
		return nil
	}
	if w.holds&holdsSubs != 0 {
		if _, err := w.s.stmt(w.tx, w.s.st.dropSubs).Exec(w.id); err != nil {
			return fmt.Errorf("sqlite: release ended instance: %w", err)
		}
	}
	if w.holds&holdsTimers != 0 {
		if _, err := w.s.stmt(w.tx, w.s.st.dropTimers).Exec(w.id); err != nil {
			return fmt.Errorf("sqlite: release ended instance: %w", err)
		}
	}
	if w.holds&holdsClaims != 0 {
		if err := w.s.unclaim(w.tx, w.id, "", w.res); err != nil {
			return err
		}
	}
	if _, err := w.s.stmt(w.tx, w.s.st.dropMail).Exec(w.id); err != nil {
		return fmt.Errorf("sqlite: release ended instance: %w", err)
	}
	return nil
}

// The bits of instances.holds: what an instance may hold that its end
// must delete or give back. Steps only ever add bits.
const (
	holdsSubs   int64 = 1
	holdsTimers int64 = 2
	holdsClaims int64 = 4
	holdsAll          = holdsSubs | holdsTimers | holdsClaims
)

// stepHolds is what step adds to its instance's holds.
func stepHolds(step *persistence.Step) int64 {
	var h int64
	if len(step.Subscribe) > 0 {
		h |= holdsSubs
	}
	if len(step.AddTimers) > 0 {
		h |= holdsTimers
	}
	if len(step.Claim) > 0 {
		h |= holdsClaims
	}
	return h
}

// unclaim puts the messages id claimed (Step.Claim) back in their queues,
// those of channel only unless it is "", and lists them in res as queued,
// to wake a remaining consumer each.
func (s *Store) unclaim(tx *sql.Tx, id, channel string, res *persistence.StepResult) error {
	var rows *sql.Rows
	var err error
	if channel == "" {
		rows, err = s.stmt(tx, s.st.unclaimAll).Query(id)
	} else {
		rows, err = s.stmt(tx, s.st.unclaimChannel).Query(id, channel)
	}
	if err != nil {
		return fmt.Errorf("sqlite: return claimed messages: %w", err)
	}
	var back []persistence.QueuedMessage
	for rows.Next() {
		var q persistence.QueuedMessage
		if err := rows.Scan(&q.Channel, &q.Type); err != nil {
			rows.Close()
			return fmt.Errorf("sqlite: return claimed messages: %w", err)
		}
		back = append(back, q)
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("sqlite: return claimed messages: %w", err)
	}
	for _, q := range back {
		// The subscribers after id: what each instance gives back names
		// others. (It is no longer one of them if it unsubscribed or
		// ended.)
		ids, err := s.competingAfter(tx, q.Channel, id)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			continue // nobody consumes it now: it waits in the queue
		}
		q.Subscribers = ids
		res.Woken = append(res.Woken, ids...)
		res.Queued = append(res.Queued, q)
	}
	return nil
}

// competingAfter reads the competing subscribers of channel that a message
// queued there names, starting after key (see channelSample).
func (s *Store) competingAfter(tx *sql.Tx, channel, key string) ([]string, error) {
	return s.queryIDs(tx, s.st.channelSample, channel, key)
}

// queryIDs runs st, which selects one text column, in tx.
func (s *Store) queryIDs(tx *sql.Tx, st *sql.Stmt, args ...any) ([]string, error) {
	rows, err := s.stmt(tx, st).Query(args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read subscribers: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: read subscribers: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("sqlite: read subscribers: %w", err)
	}
	return ids, nil
}

// diagnose turns a failed conditional update into the error that says why.
func (s *Store) diagnose(tx *sql.Tx, id string, epoch, expect int64, take, reopen bool) error {
	var status string
	var gotEpoch, hlen int64
	err := s.stmt(tx, s.st.instanceState).QueryRow(id).Scan(&status, &gotEpoch, &hlen)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: %s", persistence.ErrNotFound, id)
	case err != nil:
		return fmt.Errorf("sqlite: read instance %s: %w", id, err)
	case reopen && !persistence.Status(status).Terminal():
		return fmt.Errorf("%w: %s is %s", persistence.ErrInstanceLive, id, status)
	case !reopen && persistence.Status(status).Terminal():
		return fmt.Errorf("%w: %s is %s", persistence.ErrInstanceDone, id, status)
	case gotEpoch != epoch:
		return fmt.Errorf("%w: %s epoch %d, writer has %d", persistence.ErrFenced, id, gotEpoch, epoch)
	case take && (expect < 0 || hlen == expect):
		return fmt.Errorf("%w: %s is leased to another owner", persistence.ErrLeaseHeld, id)
	default:
		return fmt.Errorf("%w: %s has %d events, step starts at %d", persistence.ErrHistoryGap, id, hlen, expect)
	}
}

func (s *Store) subscribe(tx *sql.Tx, id string, sub persistence.Subscription) error {
	var mode string
	err := s.stmt(tx, s.st.channelMode).QueryRow(sub.Channel, id).Scan(&mode)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlite: subscribe: %w", err)
	}
	if err == nil && persistence.Mode(mode) != sub.Mode {
		return &persistence.ModeConflictError{Channel: sub.Channel, Existing: persistence.Mode(mode), Requested: sub.Mode}
	}
	if _, err := s.stmt(tx, s.st.insertSub).Exec(id, sub.Channel, string(sub.Mode)); err != nil {
		return fmt.Errorf("sqlite: subscribe: %w", err)
	}
	return nil
}

func encodeMeta(m map[string]string) (any, error) {
	if len(m) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// sendState is what the sends of one step share: their statements bound
// to the transaction once (tx.Stmt is not free), and each channel's
// subscribers, read once (a step's sends do not change subscriptions, and
// the ingress puts many events of one type in one step).
type sendState struct {
	channels map[string]channelSubs
}

// channelSubs are a channel's subscribers to wake for a message published
// there, and its mode ("" if none): every subscriber of a broadcast
// channel, the sample persistence.QueuedMessage names of a competing one,
// none of a direct one.
type channelSubs struct {
	ids  []string
	mode persistence.Mode
}

// stmt returns st bound to tx. database/sql binds a prepared statement to
// a transaction anew on every Tx.Stmt (allocations and a lock), which was
// 4.5 % of the CPU of a chain of steps; the writer keeps the bound ones for
// the life of its transaction. Only the writer goroutine calls it.
func (s *Store) stmt(tx *sql.Tx, st *sql.Stmt) *sql.Stmt {
	c := &s.txStmts
	if c.tx != tx {
		c.tx = tx
		clear(c.bound)
	}
	if b, ok := c.bound[st]; ok {
		return b
	}
	if c.bound == nil {
		c.bound = map[*sql.Stmt]*sql.Stmt{}
	}
	b := tx.Stmt(st)
	c.bound[st] = b
	return b
}

// channelSubs reads a channel's subscribers, once per step, with one
// statement unless the channel is a broadcast: of a competing channel the
// next ones in turn (see persistence.QueuedMessage), else the mode one
// subscriber tells (subscribe keeps them alike); only a broadcast, which
// copies the message to each, reads them all.
func (s *Store) channelSubs(tx *sql.Tx, ss *sendState, channel string) (channelSubs, error) {
	if cs, ok := ss.channels[channel]; ok {
		return cs, nil
	}
	key := s.cursors.Key(channel)
	var cs channelSubs
	rows, err := s.stmt(tx, s.st.channelWake).Query(channel, key)
	if err != nil {
		return cs, fmt.Errorf("sqlite: read subscribers: %w", err)
	}
	for rows.Next() {
		var id sql.NullString
		var mode string
		if err := rows.Scan(&id, &mode); err != nil {
			rows.Close()
			return cs, fmt.Errorf("sqlite: read subscribers: %w", err)
		}
		cs.mode = persistence.Mode(mode)
		if id.Valid {
			cs.ids = append(cs.ids, id.String)
		}
	}
	if err := rows.Close(); err != nil {
		return cs, fmt.Errorf("sqlite: read subscribers: %w", err)
	}
	switch cs.mode {
	case persistence.Competing:
		s.cursors.Advance(channel, key, cs.ids, persistence.MaxQueuedSubscribers)
	case persistence.Broadcast:
		if cs.ids, err = s.queryIDs(tx, s.st.channelSubs, channel); err != nil {
			return cs, err
		}
	}
	if ss.channels == nil {
		ss.channels = map[string]channelSubs{}
	}
	ss.channels[channel] = cs
	return cs, nil
}

func (s *Store) send(tx *sql.Tx, ss *sendState, m persistence.NewMessage, now time.Time, res *persistence.StepResult) error {
	if m.Dedupe {
		// First, so that a duplicate is skipped whatever became of its
		// target or channel since the first one was sent. If the step
		// fails later, its savepoint takes the ID back.
		r, err := s.stmt(tx, s.st.useMessageID).Exec(m.ID, now.UnixNano())
		if err != nil {
			return fmt.Errorf("sqlite: record message ID: %w", err)
		}
		if n, _ := r.RowsAffected(); n == 0 {
			res.Duplicates = append(res.Duplicates, m.ID)
			return nil
		}
	}
	meta, err := encodeMeta(m.Metadata)
	if err != nil {
		return fmt.Errorf("sqlite: encode metadata: %w", err)
	}
	at := m.PublishedAt
	if at.IsZero() {
		at = now
	}
	var subs []string
	var mode persistence.Mode
	if m.Channel != "" {
		cs, err := s.channelSubs(tx, ss, m.Channel)
		if err != nil {
			return err
		}
		subs, mode = cs.ids, cs.mode
	}
	if m.Target != "" {
		if mode != "" && mode != persistence.Direct {
			return &persistence.ModeConflictError{Channel: m.Channel, Existing: mode, Requested: persistence.Direct}
		}
		if m.MustDeliver {
			var status string
			err := s.stmt(tx, s.st.targetStatus).QueryRow(m.Target).Scan(&status)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: %s", persistence.ErrNotFound, m.Target)
			}
			if err != nil {
				return fmt.Errorf("sqlite: read target: %w", err)
			}
			if persistence.Status(status).Terminal() {
				return fmt.Errorf("%w: %s is %s", persistence.ErrInstanceDone, m.Target, status)
			}
		}
		r, err := s.stmt(tx, s.st.insertIfLive).Exec(m.ID, m.Channel, m.Target, m.Sender, m.Type, m.Payload, meta, at.UnixNano())
		if err != nil {
			return fmt.Errorf("sqlite: send: %w", err)
		}
		if n, _ := r.RowsAffected(); n > 0 {
			res.Woken = append(res.Woken, m.Target)
		}
		return nil
	}
	switch mode {
	case persistence.Direct:
		return &persistence.ModeConflictError{Channel: m.Channel, Existing: mode, Requested: persistence.Broadcast}
	case persistence.Broadcast:
		if _, err := tx.Exec(`INSERT INTO messages (msg_id, channel, target, sender, type, payload, metadata, published_at)
			SELECT ?, ?, instance_id, ?, ?, ?, ?, ? FROM subscriptions WHERE channel = ? ORDER BY instance_id`,
			m.ID, m.Channel, m.Sender, m.Type, m.Payload, meta, at.UnixNano(), m.Channel); err != nil {
			return fmt.Errorf("sqlite: publish: %w", err)
		}
	default: // competing, or nobody subscribed yet: keep it in the channel's queue
		if mode == "" && strings.HasPrefix(m.Channel, persistence.SystemChannelPrefix) {
			break
		}
		r, err := s.stmt(tx, s.st.insertMessage).Exec(m.ID, m.Channel, "", m.Sender, m.Type, m.Payload, meta, at.UnixNano())
		if err != nil {
			return fmt.Errorf("sqlite: publish: %w", err)
		}
		if m.HandTo != "" && mode == persistence.Competing {
			handed, err := s.hand(tx, m, r, at, res)
			if err != nil {
				return err
			}
			if handed {
				res.Woken = append(res.Woken, m.HandTo)
				return nil
			}
		}
	}
	res.Woken = append(res.Woken, subs...)
	if mode == persistence.Competing {
		res.Queued = append(res.Queued, persistence.QueuedMessage{Channel: m.Channel, Type: m.Type, Subscribers: subs})
	}
	return nil
}

// hand moves the message just queued (ins, its insert) into the mailbox
// of m.HandTo, claimed as ClaimQueue claims, if HandTo may take one by
// ClaimQueue's rules; it reports whether it did (listed in res.Handed).
func (s *Store) hand(tx *sql.Tx, m persistence.NewMessage, ins sql.Result, at time.Time, res *persistence.StepResult) (bool, error) {
	var one int
	switch err := s.stmt(tx, s.st.queueConsumer).QueryRow(m.HandTo, m.Channel, m.HandOwner, time.Now().UnixNano()).Scan(&one); {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("sqlite: hand message to %s: %w", m.HandTo, err)
	}
	seq, err := ins.LastInsertId()
	if err != nil {
		return false, fmt.Errorf("sqlite: hand message to %s: %w", m.HandTo, err)
	}
	if _, err := s.stmt(tx, s.st.claimMessage).Exec(m.HandTo, seq); err != nil {
		return false, fmt.Errorf("sqlite: hand message to %s: %w", m.HandTo, err)
	}
	// Its end must give the message back, as a claim's (see end).
	if _, err := s.stmt(tx, s.st.holdClaims).Exec(m.HandTo); err != nil {
		return false, fmt.Errorf("sqlite: hand message to %s: %w", m.HandTo, err)
	}
	res.Handed = append(res.Handed, persistence.Message{Seq: seq, ID: m.ID, Channel: m.Channel, Target: m.HandTo,
		Sender: m.Sender, Type: m.Type, Payload: m.Payload, Metadata: m.Metadata, PublishedAt: fromNS(at.UnixNano())})
	return true, nil
}

// AcquireLease takes an instance's lease.
func (s *Store) AcquireLease(ctx context.Context, id, owner string, ttl time.Duration) (persistence.Instance, error) {
	var inst persistence.Instance
	if err := firstErr(persistence.ValidateID("id", id), persistence.ValidateID("owner", owner)); err != nil {
		return inst, err
	}
	err := s.write(ctx, true, func(tx *sql.Tx) error {
		now := time.Now()
		r, err := s.stmt(tx, s.st.acquireLease).Exec(owner, now.Add(ttl).UnixNano(), now.UnixNano(), id, owner, now.UnixNano())
		if err != nil {
			return fmt.Errorf("sqlite: acquire lease: %w", err)
		}
		n, _ := r.RowsAffected()
		inst, err = scanInstance(s.stmt(tx, s.st.readInstance).QueryRow(id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %s", persistence.ErrNotFound, id)
		}
		if err != nil {
			return fmt.Errorf("sqlite: acquire lease: %w", err)
		}
		if n == 0 {
			if inst.Status.Terminal() {
				return fmt.Errorf("%w: %s is %s", persistence.ErrInstanceDone, id, inst.Status)
			}
			return fmt.Errorf("%w: %s held by %s until %s", persistence.ErrLeaseHeld, id, inst.LeaseOwner, inst.LeaseExpires.Format(time.RFC3339Nano))
		}
		return nil
	})
	return inst, err
}

// RenewLeases extends all of owner's leases.
func (s *Store) RenewLeases(ctx context.Context, owner string, ttl time.Duration) ([]string, error) {
	if err := persistence.ValidateID("owner", owner); err != nil {
		return nil, err
	}
	var ids []string
	err := s.write(ctx, true, func(tx *sql.Tx) error {
		ids = ids[:0]
		rows, err := tx.Query(`UPDATE instances SET lease_expires = ? WHERE lease_owner = ? RETURNING id`, time.Now().Add(ttl).UnixNano(), owner)
		if err != nil {
			return fmt.Errorf("sqlite: renew leases: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return fmt.Errorf("sqlite: renew leases: %w", err)
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("sqlite: renew leases: %w", err)
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
	return s.write(ctx, true, func(tx *sql.Tx) error {
		_, err := tx.Exec(`UPDATE instances SET lease_owner = NULL, lease_expires = 0, lease_epoch = lease_epoch + 1,
			status = CASE WHEN status = 'waiting' THEN 'running' ELSE status END
			WHERE lease_owner = ?`, owner)
		if err != nil {
			return fmt.Errorf("sqlite: release leases: %w", err)
		}
		return nil
	})
}

// RequestCancel records a cancel request.
func (s *Store) RequestCancel(ctx context.Context, id, reason string) error {
	if err := firstErr(persistence.ValidateID("id", id), persistence.ValidateReason(reason)); err != nil {
		return err
	}
	if reason == "" {
		reason = "cancelled"
	}
	return s.write(ctx, true, func(tx *sql.Tx) error {
		var status string
		err := tx.QueryRow(`SELECT status FROM instances WHERE id = ?`, id).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %s", persistence.ErrNotFound, id)
		}
		if err != nil {
			return fmt.Errorf("sqlite: cancel: %w", err)
		}
		if persistence.Status(status).Terminal() {
			return fmt.Errorf("%w: %s is %s", persistence.ErrInstanceDone, id, status)
		}
		if _, err := tx.Exec(`UPDATE instances SET cancel_reason = ?, updated_at = ? WHERE id = ? AND cancel_reason = ''`,
			reason, time.Now().UnixNano(), id); err != nil {
			return fmt.Errorf("sqlite: cancel: %w", err)
		}
		return nil
	})
}
