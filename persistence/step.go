package persistence

import "time"

// Step is one atomic transition of one instance: everything in it commits
// together or not at all, so that a crash never leaves history, mailbox,
// timers and status disagreeing. This comment and those of its fields are
// the specification every driver implements and storetest checks; the
// drivers' code points here rather than to each other.
//
// # Order
//
// Apply checks Validate first (an *InvalidError, nothing written), then
// applies the concerns in this order; the first one that fails fails the
// step, so a step that breaks several rules fails with the same error on
// every driver:
//
//  1. Create inserts the instance. If its ID is taken, nothing else of the
//     step applies (no message is sent, no event emitted) and
//     StepResult.Existing holds the stored instance; Apply returns no error.
//     CreateMany, which goes with nothing else, inserts its instances
//     instead (see there).
//  2. The instance's row is updated under the fencing conditions (see
//     below): lease taken or released, Status, Output and Error, restarts,
//     run and history length, all in one conditional write.
//  3. ResetHistory drops the current run's history; History is appended.
//  4. Consume removes messages; Claim moves queued ones into the mailbox.
//  5. Subscribe, then Unsubscribe (giving back what was claimed from each
//     channel left).
//  6. Send, message by message, in order. Sends read each channel's
//     subscribers once per step, after this step's subscription changes.
//  7. CancelTimers, then FireTimers, then AddTimers (so a timer cancelled
//     and added in one step exists, at its new due time).
//  8. Emit adds outgoing events to the outbox.
//  9. A terminal Status ends the instance: its subscriptions and timers
//     (including those this step added) are dropped, the messages it
//     claimed go back to their channels' queues, and the mail addressed to
//     it is dropped. Its lease was released in 2, where it ended: a
//     message the ending step sends its own instance finds it ended and
//     is dropped (as mail to any ended instance is).
//
// # Fencing
//
// The step writes the instance Target names: Create.ID for a step that
// creates, else Instance. A step with neither only sends messages and
// emits events. A step that updates the instance's row (UpdatesInstance)
// applies only if, together:
//
//   - the stored lease epoch equals Epoch (Create.LeaseEpoch when
//     creating). The lease's owner and expiry are not checked: the epoch
//     alone fences a writer, since every change of owner increments it;
//   - the stored history length equals History[0].Seq, when History is
//     given without ResetHistory (0 when creating);
//   - the instance has not ended;
//   - with TakeLease, its lease is free, expired, or TakeLease's already.
//
// If one fails nothing is written, and the error says which, checked in
// this order: ErrNotFound (no such instance), ErrInstanceDone (ended),
// ErrFenced (another epoch), ErrLeaseHeld (TakeLease found a live lease of
// another owner, at the expected history position), ErrHistoryGap.
//
// # Errors
//
// Besides the fencing errors, a step fails with ErrMessageGone (a Consume
// message is gone), a *ModeConflictError (Subscribe or Send against a
// channel's mode), ErrNotFound or ErrInstanceDone (a MustDeliver target),
// ErrTimerGone (a FireTimers timer is gone), ErrStoreClosed, or a wrapped
// database error. A failed step writes nothing: no history, no message, no
// Dedupe ID, no outgoing event. Its StepResult is to be ignored.
//
// # Combinations the runtime uses
//
//   - Spawn: Create with History (the started event), without a lease, or
//     leased to the creating node with LeaseTTL (Create.LeaseEpoch 1).
//   - A batch spawn: CreateMany, each instance with its started event and
//     with or without a lease as for Spawn, and LeaseTTL if any is leased.
//   - Send or publish from outside a workflow: no Instance, one or more
//     Send (Dedupe for a caller-chosen ID, MustDeliver for a send by PID).
//   - A workflow's step: Instance and Epoch with any of History, Consume,
//     Claim, Send, Subscribe, Unsubscribe, timers and Emit; the first step
//     of an activation woken without a lease adds TakeLease and LeaseTTL,
//     possibly with nothing else.
//   - Its end: a terminal Status with Output and Error, the last History
//     event and the Down messages (Send) to its monitors and parent.
//   - Compensating: Status compensating with History.
//   - Continue-as-new: ResetHistory with History starting at 0, and
//     whatever else was pending.
//   - A restart counted: IncRestarts with RestartLog (and TakeLease).
//   - Passivation: Status waiting with ReleaseLease; shutdown: ReleaseLease.
//
// With Create, the fields that change the row (Status, ReleaseLease,
// IncRestarts, ResetHistory) apply only when the step also has History or
// a Status (see UpdatesInstance); the runtime never uses them otherwise.
type Step struct {
	// Instance the step changes. Empty for a step that only sends messages
	// (and emits events) from outside any workflow. Ignored with Create.
	Instance string
	// Epoch is the lease epoch the writer holds. The step fails with
	// ErrFenced unless the stored epoch still equals it. Ignored with
	// Create, whose LeaseEpoch the step then writes under.
	Epoch int64
	// Create inserts a new instance (with History as its first events, the
	// status running unless Create.Status says otherwise, and the lease and
	// RecentRestarts given in it, unless LeaseTTL sets the lease's expiry
	// and RestartLog replaces the latter). If the ID exists, nothing at
	// all is applied and StepResult.Existing is set.
	Create *Instance
	// CreateMany inserts several new instances, each with its first
	// events, in one step: a batch spawn, which a driver writes with one
	// statement per table where it can. Each is created as Create would
	// create it alone (its History starting at Seq 0; HistoryLen is
	// ignored). The step has nothing else but LeaseTTL, which then applies
	// to every instance with a LeaseOwner. Their IDs must differ. An
	// instance whose ID is taken by an instance of the same workflow is
	// skipped (StepResult.Existed lists it); one taken by another workflow
	// fails the whole step with an *IDConflictError: nothing is written.
	CreateMany []NewInstance
	// LeaseTTL, when positive, makes the lease of the created instance
	// (Create.LeaseOwner must be set, Create.LeaseExpires zero) or the one
	// TakeLease takes last LeaseTTL from the store's clock as it writes the
	// row (see AcquireLease), rather than until a time the caller computed
	// with its own clock, which may be skewed and is read before the step
	// waits for the store. Zero keeps Create.LeaseExpires as given.
	LeaseTTL time.Duration
	// TakeLease, when set, is the owner that takes the instance's lease in
	// this step, as AcquireLease would, before the rest applies: for a
	// writer that read the instance without a lease (a passivated instance
	// woken) and replayed it, so that waking costs no commit of its own.
	// The step applies only if the lease is free, expired or TakeLease's
	// already, and the stored epoch still equals Epoch (nobody took the
	// instance since it was read); it fails with ErrLeaseHeld or ErrFenced
	// otherwise. Once applied, the epoch is Epoch+1, the lease lasts
	// LeaseTTL (required), and a waiting instance is running unless Status
	// says otherwise. With ReleaseLease or a terminal Status the lease is
	// released at once (the epoch still moves on). Not with Create.
	TakeLease string
	// History is appended; History[0].Seq must equal the stored HistoryLen
	// (ErrHistoryGap otherwise). Events with a zero At get the store's
	// time.
	History []Event
	// Status, when set, replaces the status; Output and Error go with it
	// when the status is terminal or either is set (see SetsOutput). A
	// terminal status also drops the instance's subscriptions, timers and
	// unconsumed mail, gives back what it claimed, and releases the lease.
	Status Status
	Output []byte
	Error  string
	// Waits, with SetWaits, replaces the description of what the instance
	// is parked on (opaque to the store: the runtime writes and reads it).
	// A terminal Status, and Reopen, clear it.
	Waits    []byte
	SetWaits bool
	// Consume removes these messages (by Seq) from the mailbox; if any is
	// already gone the step fails with ErrMessageGone.
	Consume []int64
	// Claim moves these messages (by Seq) from the queue of a competing
	// channel into the instance's own mailbox, where its later receives
	// take them without racing other consumers (prefetch). Those another
	// consumer took first are skipped (StepResult.Claimed lists the moved
	// ones). Claimed messages go back to their queue when the instance
	// unsubscribes from their channel or ends. Applied after Consume.
	Claim []int64
	// Send adds messages (see NewMessage), in order. A message to a Target
	// on a Channel whose subscribers are not direct, or one published on a
	// channel whose subscribers are direct, fails the step with a
	// *ModeConflictError. A message to a Target that does not exist or has
	// ended is dropped (unless MustDeliver).
	Send []NewMessage
	// Subscribe and Unsubscribe change channel subscriptions. Subscribing
	// in a mode other than that of the channel's other subscribers fails
	// with a *ModeConflictError; subscribing again changes the mode.
	// Unsubscribing from a channel the instance is not subscribed to is a
	// no-op.
	Subscribe   []Subscription
	Unsubscribe []string
	// AddTimers and CancelTimers schedule and drop timers of this instance.
	// Adding a timer ID that exists moves it to the new due time;
	// cancelling one that does not exist is a no-op.
	AddTimers    []Timer
	CancelTimers []string
	// FireTimers deletes timers that must still exist (ErrTimerGone if not).
	FireTimers []string
	// ReleaseLease clears the lease after the step (passivation, shutdown).
	// The epoch is kept: whoever read the instance at it may take it with
	// TakeLease.
	ReleaseLease bool
	// ResetHistory drops the current history before appending (continue-as-new):
	// History[0].Seq must then be 0 and Run is incremented. The stored
	// history length is not checked.
	ResetHistory bool
	// Reopen makes the step apply to an ended instance instead of a live
	// one, starting a new run of it (a reset, a retry, a restart): it
	// requires ResetHistory and a Status that is not terminal, and clears
	// the stored Output, Error and cancel request. The lease stays free
	// (an ended instance holds none) and the epoch is checked as usual, so
	// of two reopens of one end only the first applies. It fails with
	// ErrInstanceLive if the instance has not ended. Not with Create or
	// TakeLease.
	Reopen bool
	// IncRestarts adds one to the restart counter.
	IncRestarts bool
	// RestartLog, when non-nil, replaces the instance's RecentRestarts (an
	// empty, non-nil slice clears them). The store keeps them sorted, oldest
	// first. It may go with IncRestarts in one step.
	RestartLog []time.Time
	// Emit adds outgoing events to the outbox, committed with the rest of
	// the step: a step that fails emits nothing. An ID already in the
	// outbox is skipped (the first event stays).
	Emit []OutboxEvent
}

// NewInstance is one instance of Step.CreateMany and its first events.
type NewInstance struct {
	Instance Instance
	History  []Event
}

// StepResult is what a committed step changed beyond itself.
type StepResult struct {
	// Existing is set when Create found the ID taken.
	Existing *Instance
	// Existed lists, in order, the indexes in Step.CreateMany of the
	// instances whose ID was taken by the same workflow: nothing of them
	// was written.
	Existed []int
	// Woken lists the instances whose mailbox gained a message, so that
	// their activations can be woken: once per message, competing
	// subscribers included. A message published on a broadcast channel
	// lists every subscriber; one queued for competing subscribers (or a
	// claimed message given back by Unsubscribe or an end) lists those
	// its QueuedMessage names; one sent to a Target lists it if it was
	// delivered.
	Woken []string
	// Queued lists the messages the step put in the queue of a channel
	// that has competing subscribers (published, or given back). Each
	// needs only one of them to look at its mailbox, so a runtime may wake
	// one instead of every subscriber that Woken lists for it.
	Queued []QueuedMessage
	// Duplicates lists the IDs of Dedupe messages that were skipped because
	// their ID had been used before.
	Duplicates []string
	// Claimed lists the messages of Step.Claim that were moved (in no
	// particular order).
	Claimed []int64
	// Handed lists the messages of Send that went into the mailbox of
	// their HandTo, as a mailbox read returns them (Seq, Target and
	// PublishedAt set). Woken lists their HandTo once each, and Queued
	// does not list them.
	Handed []Message
}

// QueuedMessage is a message published on a channel with competing
// subscribers (see StepResult.Queued).
type QueuedMessage struct {
	Channel string
	Type    string // the message's type name
	// Subscribers are the channel's competing subscribers when it was
	// published: all of them up to MaxQueuedSubscribers. Beyond that it
	// names MaxQueuedSubscribers of them, the next in ID order (wrapping
	// around) after those the channel's previous message named, so that
	// what a publish costs does not grow with the consumers while the
	// messages name every one of them in turn. (The messages one step
	// queues on a channel may share a list; messages queued by several
	// processes turn on their own.) A claimed message given back to the
	// queue (Unsubscribe, an end) names those after the instance that
	// gave it back, which an end leaves out.
	Subscribers []string
}

// MaxQueuedSubscribers bounds QueuedMessage.Subscribers. One consumer takes
// a queued message, and a runtime wakes one, from the list or from the
// consumers it knows are waiting, so a longer list would only cost the
// publish.
const MaxQueuedSubscribers = 32

// What a driver derives from a step, written once so that the drivers
// agree. Each is part of the specification above.

// Target is the instance the step writes and the lease epoch it is fenced
// by: Create.ID and Create.LeaseEpoch for a step that creates (Instance and
// Epoch are then ignored), else Instance and Epoch.
func (s *Step) Target() (id string, epoch int64) {
	if s.Create != nil {
		return s.Create.ID, s.Create.LeaseEpoch
	}
	return s.Instance, s.Epoch
}

// AppendOnly reports whether the step changes nothing of its instance's row
// but the history length (and the updated time): no status, lease,
// restart or run change. Most steps are.
func (s *Step) AppendOnly() bool {
	return !s.ResetHistory && !s.Reopen && s.Status == "" && !s.ReleaseLease && !s.IncRestarts && s.RestartLog == nil && s.TakeLease == ""
}

// UpdatesInstance reports whether the step updates an existing instance's
// row under the fencing conditions. A step without an instance does not; a
// step that creates does only if it does more than append (see AppendOnly)
// and also appends History or sets Status: the insert writes all else.
func (s *Step) UpdatesInstance() bool {
	if s.Create == nil {
		return s.Instance != ""
	}
	return !s.AppendOnly() && (len(s.History) > 0 || s.Status != "")
}

// ExpectHistoryLen is the stored history length the step requires, or -1
// for none: 0 for a step that creates, History[0].Seq for one that appends
// without ResetHistory.
func (s *Step) ExpectHistoryLen() int64 {
	switch {
	case s.Create != nil:
		return 0
	case len(s.History) > 0 && !s.ResetHistory:
		return s.History[0].Seq
	}
	return -1
}

// SetsOutput reports whether the step replaces the stored Output and Error:
// when it sets a Status that is terminal, or with an Output or Error, and
// when it reopens the instance (see Reopen).
func (s *Step) SetsOutput() bool {
	return s.Reopen || s.Status != "" && (s.Status.Terminal() || s.Output != nil || s.Error != "")
}

// ReleasesLease reports whether the step clears the lease: ReleaseLease, or
// a terminal Status.
func (s *Step) ReleasesLease() bool { return s.ReleaseLease || s.Status.Terminal() }

// CreateStatus is the status a step that creates gives its instance:
// Create.Status, running if empty.
func (s *Step) CreateStatus() Status {
	if s.Create.Status == "" {
		return StatusRunning
	}
	return s.Create.Status
}

// CreateRestarts is the RecentRestarts a step that creates gives its
// instance: RestartLog when set, else Create.RecentRestarts.
func (s *Step) CreateRestarts() []time.Time {
	if s.RestartLog != nil {
		return s.RestartLog
	}
	return s.Create.RecentRestarts
}

// Unleased lists the IDs of the instances the step created without a
// lease, which a driver that notifies other processes wakes: a spawn
// nobody leased may belong to another node. One created under a lease runs
// where it was created.
func (s *Step) Unleased(res *StepResult) []string {
	if c := s.Create; c != nil {
		if res.Existing == nil && c.LeaseOwner == "" {
			return []string{c.ID}
		}
		return nil
	}
	var ids []string
	existed := res.Existed
	for i := range s.CreateMany {
		if len(existed) > 0 && existed[0] == i {
			existed = existed[1:]
			continue
		}
		if in := &s.CreateMany[i].Instance; in.LeaseOwner == "" {
			ids = append(ids, in.ID)
		}
	}
	return ids
}

// CreateHistoryLen is the history length the insert of a created instance
// writes: the whole History when the step is AppendOnly (no update
// follows), else 0, the update then adding it.
func (s *Step) CreateHistoryLen() int64 {
	if s.AppendOnly() {
		return int64(len(s.History))
	}
	return 0
}
