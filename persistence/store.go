package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nornlabs/norn/norntype"
)

// Status is the lifecycle state of an instance (norntype.Status).
type Status = norntype.Status

// Instance statuses. Running covers both executing and parked activations;
// Waiting means passivated: no activation holds it, and only mail, a timer or
// a cancel request brings it back.
const (
	StatusRunning      = norntype.StatusRunning
	StatusWaiting      = norntype.StatusWaiting
	StatusCompensating = norntype.StatusCompensating
	StatusCompleted    = norntype.StatusCompleted
	StatusFailed       = norntype.StatusFailed
	StatusCancelled    = norntype.StatusCancelled
)

// Mode is how a channel hands its messages to subscribers (norntype.Mode).
type Mode = norntype.Mode

// Channel modes.
const (
	// Broadcast: every subscriber gets its own copy of every message published
	// after it subscribed.
	Broadcast = norntype.Broadcast
	// Competing: each message is consumed by exactly one subscriber; messages
	// wait in the channel's queue until some subscriber takes them or they
	// are pruned (see Store.PruneQueue).
	Competing = norntype.Competing
	// Direct: messages are addressed to one instance on the channel.
	Direct = norntype.Direct
)

// Errors that callers branch on. Drivers return them (possibly wrapped) so
// that errors.Is works.
var (
	ErrNotFound     = errors.New("norn: instance not found")
	ErrInstanceDone = errors.New("norn: instance already ended")
	// ErrInstanceLive: a step that reopens an instance (Step.Reopen) found
	// it has not ended.
	ErrInstanceLive  = errors.New("norn: instance has not ended")
	ErrFenced        = errors.New("norn: lease epoch changed; this activation no longer owns the instance")
	ErrLeaseHeld     = errors.New("norn: instance lease held by another owner")
	ErrMessageGone   = errors.New("norn: message already consumed")
	ErrTimerGone     = errors.New("norn: timer already fired or cancelled")
	ErrHistoryGap    = errors.New("norn: history sequence does not continue the stored history")
	ErrStoreClosed   = errors.New("norn: store closed")
	ErrChannelMode   = errors.New("norn: channel mode conflict")
	ErrInvalidRecord = errors.New("norn: invalid input")
	// ErrIDConflict: an instance of Step.CreateMany has the ID of an
	// instance of another workflow (see IDConflictError).
	ErrIDConflict = errors.New("norn: instance ID taken by another workflow")
	// ErrNoSchema is what a driver opened with its NoCreate option returns
	// when the database holds no Norn schema: tools that only read (norn ls)
	// must not create one in a database that was named by mistake.
	ErrNoSchema = errors.New("norn: the database holds no Norn schema")
	// ErrUnsupported is what a Store method returns when its driver cannot
	// do that at all (see Store): callers branch on errors.Is rather than
	// on type assertions, so that a wrapper that embeds a Store forwards
	// every method without knowing which its driver supports. It also
	// matches errors.ErrUnsupported.
	ErrUnsupported = fmt.Errorf("norn: not supported by this store: %w", errors.ErrUnsupported)
)

// ModeConflictError says a channel already has subscribers in another mode.
type ModeConflictError struct {
	Channel   string
	Existing  Mode
	Requested Mode
}

func (e *ModeConflictError) Error() string {
	return fmt.Sprintf("norn: channel %q has %s subscribers; cannot use it as %s", e.Channel, e.Existing, e.Requested)
}

// Is makes errors.Is(err, ErrChannelMode) true.
func (e *ModeConflictError) Is(target error) bool { return target == ErrChannelMode }

// IDConflictError says an instance of Step.CreateMany has the ID of an
// existing instance of another workflow; the step wrote nothing.
type IDConflictError struct {
	ID        string
	Workflow  string // the existing instance's workflow
	Requested string // the workflow the step would have created
}

func (e *IDConflictError) Error() string {
	return fmt.Sprintf("norn: create %s as %q: the ID belongs to an instance of workflow %q", e.ID, e.Requested, e.Workflow)
}

// Is makes errors.Is(err, ErrIDConflict) true.
func (e *IDConflictError) Is(target error) bool { return target == ErrIDConflict }

// Instance is one durable run of a workflow.
type Instance struct {
	ID           string
	Workflow     string
	Status       Status
	Input        []byte
	Output       []byte
	Error        string
	Parent       string // instance that spawned it, if any
	LeaseOwner   string
	LeaseEpoch   int64
	LeaseExpires time.Time
	CancelReason string // non-empty once a cancel was requested
	Restarts     int64
	// RecentRestarts are the times of the latest restarts, oldest first, as
	// the last step that set RestartLog left them (the restart budget).
	RecentRestarts []time.Time
	Run            int64 // continue-as-new generation, 0 for the first run
	HistoryLen     int64 // number of events in the current run's history
	CreatedAt      time.Time
	UpdatedAt      time.Time
	// Waits is what the instance was parked on when it last parked, as the
	// runtime described it (Step.Waits); empty once it ended.
	Waits []byte
}

// Event is one entry of an instance's history.
type Event struct {
	Seq     int64
	Kind    string
	Name    string // activity, channel, timer or workflow name
	Ref     string // activity ID, message ID, timer ID …
	Payload []byte
	Error   string
	// Digest identifies the call's input (a hash), so that replay can tell a
	// changed call from the recorded one. Empty where a call has no input.
	Digest string
	At     time.Time
}

// Message is one message waiting in some mailbox.
type Message struct {
	Seq         int64  // store-wide arrival order
	ID          string // logical message ID (copies of one broadcast share it)
	Channel     string
	Target      string // addressee; empty for a competing channel's queue
	Sender      string
	Type        string // the payload's type name, as the sender named it
	Payload     []byte
	Metadata    map[string]string
	PublishedAt time.Time
}

// SystemChannelPrefix starts the names of the runtime's own channels. A
// message published on such a channel when it has no broadcast subscribers
// is dropped instead of queued (nobody will ever compete for it).
const SystemChannelPrefix = "$"

// NewMessage is a message to add in a step.
//
// With Target set it goes to that instance's mailbox (send by PID, or direct
// on Channel). With Target empty it is published on Channel: a broadcast
// channel copies it to every subscriber it has at that moment (a later
// subscriber never sees it); a competing channel, or one with no
// subscribers yet, keeps it in the channel's queue until a competing
// subscriber consumes it or Store.PruneQueue drops it as too old.
type NewMessage struct {
	ID          string
	Channel     string
	Target      string
	Sender      string
	Type        string // the payload's type name
	Payload     []byte
	Metadata    map[string]string
	PublishedAt time.Time
	// Dedupe makes ID unique store-wide: if a message with this ID was
	// already added with Dedupe (and its ID not yet pruned), this message is
	// skipped and its ID listed in StepResult.Duplicates; the rest of the
	// step still applies. Callers use it for caller-chosen IDs, so that a
	// retried Send or Publish delivers once.
	Dedupe bool
	// MustDeliver makes the step fail with ErrNotFound or ErrInstanceDone if
	// Target does not exist or has ended. Without it such a message is
	// dropped, as mail to a dead process is.
	MustDeliver bool
	// HandTo, on a message published on a channel whose subscribers
	// consume competitively (Target empty), names one of them to take it:
	// the message goes straight into HandTo's mailbox, claimed as
	// QueueClaimer.ClaimQueue claims for HandOwner (so it goes back to
	// the queue if HandTo unsubscribes or ends first), if HandTo may
	// take one by ClaimQueue's rules; otherwise it is queued as usual.
	// StepResult.Handed lists the messages handed. The caller has checked
	// that HandTo's receive takes the message's type: the store does not.
	// A runtime uses it to give a message published on its node to a
	// consumer of that node that waits idle, so that no claim runs for it.
	HandTo    string
	HandOwner string
}

// Subscription ties an instance to a channel in one mode.
type Subscription struct {
	Instance string
	Channel  string
	Mode     Mode
}

// Timer is a durable wake-up for one instance.
type Timer struct {
	Instance string
	ID       string
	Due      time.Time
}

// OutboxEvent is an outgoing event waiting in the outbox for a relayer.
type OutboxEvent struct {
	// ID is unique store-wide and stable across delivery attempts, so that
	// sinks can deduplicate. Adding an ID that exists is a no-op.
	ID       string
	Instance string // the instance whose step emitted it ("" from outside)
	Type     string // the event's type, for listing
	Data     []byte // the event, encoded (CloudEvents structured JSON)
	At       time.Time
}

// OutboxStatus is where an outgoing event is in its delivery.
type OutboxStatus string

// Outbox statuses.
const (
	OutboxPending OutboxStatus = "pending" // waiting for (another) attempt
	OutboxSent    OutboxStatus = "sent"    // a sink accepted it
	OutboxInvalid OutboxStatus = "invalid" // a sink refused it for good (4xx); not retried
	OutboxExpired OutboxStatus = "expired" // still failing at its maximum age; not retried
)

// OutboxRecord is an outgoing event with its delivery state.
type OutboxRecord struct {
	OutboxEvent
	Status   OutboxStatus
	Attempts int
	Next     time.Time // earliest next attempt (pending)
	Error    string    // last failure
	// Claimer holds the event until ClaimExpires: one relayer at a time
	// sends it; a relayer that died mid-send loses the claim when it
	// expires, and the event is sent again.
	Claimer      string
	ClaimExpires time.Time
	// Finished is when delivery ended (sent, invalid or expired): what
	// PruneOutbox goes by. Zero while pending.
	Finished time.Time
}

// Limits the Outbox calls use when given none.
const (
	DefaultClaimLimit = 100
	DefaultListLimit  = 1000
	DefaultPruneLimit = 1000
)

// Outbox is the relayers' side of the outbox, part of Store; both drivers
// implement it. A driver without an outbox returns ErrUnsupported.
type Outbox interface {
	// ClaimOutbox claims up to limit pending events whose Next has come
	// and that no unexpired claim holds, for owner until now+ttl, oldest
	// first (by Next, which for a first attempt is when the event was
	// emitted). Concurrent claimers never get the same event. ttl must be
	// positive; limit <= 0 means DefaultClaimLimit.
	ClaimOutbox(ctx context.Context, owner string, now time.Time, ttl time.Duration, limit int) ([]OutboxRecord, error)
	// FinishOutbox records the outcome of one attempt by owner: status
	// sent, invalid or expired ends delivery; pending schedules another
	// attempt at next. Attempts is incremented and the claim released. It
	// fails with ErrLeaseHeld if owner no longer holds the claim.
	FinishOutbox(ctx context.Context, id, owner string, status OutboxStatus, next time.Time, errText string) error
	// ListOutbox lists events in a status (all if empty), oldest first
	// (by At, then ID), after the event ID after: the last event of the
	// previous page, or "" for the first. limit <= 0 means DefaultListLimit.
	ListOutbox(ctx context.Context, status OutboxStatus, after string, limit int) ([]OutboxRecord, error)
	// ReleaseOutbox gives back owner's claims on the events ids without
	// counting an attempt: a relayer that stops, or that cannot send an
	// event in time, releases what it claimed and did not send, and
	// another relayer (or itself) may claim those events at once, rather
	// than when the claims expire. Their Next, Attempts and Error are left
	// as they were. IDs that owner does not hold (never claimed, claimed
	// by another, finished, unknown) are skipped. It returns how many
	// claims it released.
	ReleaseOutbox(ctx context.Context, owner string, ids []string) (int, error)
	// PruneOutbox deletes events whose delivery ended (sent, invalid or
	// expired: see OutboxRecord.Finished) before the given time, oldest
	// first, at most limit of them in one transaction, so that the outbox
	// does not keep every event ever sent. Pending events are never
	// deleted. It returns how many went; while that equals limit, more
	// may be left. limit <= 0 means DefaultPruneLimit.
	PruneOutbox(ctx context.Context, before time.Time, limit int) (int, error)
}

// OutboxNotifier is the part of Store that wakes relayers when another
// process commits a step that emits, so that a relayer need not poll the
// store to find those events. Stores shared between processes implement
// it; the others (SQLite) return ErrUnsupported. The PostgreSQL driver
// sends the notification in the emitting step's transaction, so that it is
// delivered when, and only if, the step commits.
type OutboxNotifier interface {
	// ListenOutbox returns a channel that is signalled (without blocking,
	// so signals may merge) after another process committed outgoing
	// events, and also each time the listener (re)connects, since events
	// may have been committed unheard meanwhile. The channel is closed
	// when ctx ends or the store is closed. It fails only if the store is
	// closed already.
	ListenOutbox(ctx context.Context) (<-chan struct{}, error)
}

// ListFilter selects instances for List.
type ListFilter struct {
	Status   []Status
	Workflow string
	After    string // instance ID to continue after (ordered by ID)
	Limit    int
}

// InstanceQuery selects instances for Store.ListInstances. Zero fields do
// not filter; the filters that are set must all hold.
type InstanceQuery struct {
	Workflow string
	// Statuses: any of these.
	Statuses []Status
	// Parent selects the children of one instance.
	Parent string
	// CreatedAfter and UpdatedAfter are inclusive bounds, CreatedBefore
	// and UpdatedBefore exclusive ones; the zero time is no bound.
	CreatedAfter, CreatedBefore time.Time
	UpdatedAfter, UpdatedBefore time.Time
	// Input holds equality conditions on fields of the input, read as
	// JSON: a key is an object field's name, or a dotted path to a nested
	// one ("customer.id"); the value matches a JSON string equal to it, or
	// a number or boolean whose JSON text equals it ("42", "true"). An
	// input that is not JSON (written with another codec) matches no
	// condition, and a missing field or JSON null never matches.
	Input map[string]string
	// After continues the listing after this position: the Key of the last
	// instance of the previous page. Nil starts at the newest instance.
	After *InstanceKey
	// Limit bounds the page; <= 0 means DefaultQueryLimit, and more than
	// MaxQueryLimit is read as MaxQueryLimit (a bound on the work of one
	// call; the actor API's own page limit is lower).
	Limit int
}

// InstanceKey is an instance's position in ListInstances' order.
type InstanceKey struct {
	CreatedAt time.Time
	ID        string
}

// Key is the instance's position in ListInstances' order.
func (in *Instance) Key() InstanceKey { return InstanceKey{CreatedAt: in.CreatedAt, ID: in.ID} }

// Limits of ListInstances pages.
const (
	DefaultQueryLimit = 50
	MaxQueryLimit     = 10000
)

// Statuses lists every instance status, live ones first.
func Statuses() []Status { return norntype.Statuses() }

// ChannelStat summarises one channel.
type ChannelStat struct {
	Channel     string
	Mode        Mode // empty if the channel has no subscribers
	Subscribers int
	Waiting     int // messages not yet consumed (queue plus per-subscriber copies)
	// Oldest is when the oldest of the Waiting messages was published; zero
	// if none waits. On a queue that nobody consumes it shows how soon
	// PruneQueue will start taking messages away.
	Oldest time.Time
}

// Store is the durable state of a Norn node or cluster. Implementations must
// be safe for concurrent use; Apply is where drivers batch concurrent steps
// into shared commits.
//
// Every driver has every method, so that a wrapper (metrics, tracing, a
// test's interceptor) that embeds a Store forwards them all, and overrides
// only those it means to change. What a driver cannot do at all, its
// method refuses with ErrUnsupported, at once and without side effects:
// the SQLite driver's ListenOutbox, the PostgreSQL driver's RequestWake
// (its commits notify by themselves).
type Store interface {
	// Apply commits one step atomically.
	Apply(ctx context.Context, s Step) (StepResult, error)

	// AcquireLease takes the instance's lease for owner until now+ttl,
	// incrementing its epoch. It fails with ErrLeaseHeld if another owner
	// holds an unexpired lease, ErrInstanceDone if the instance has ended,
	// ErrNotFound if there is no such instance. A waiting instance becomes
	// running.
	//
	// "now" in lease operations (here, RenewLeases, Step.LeaseTTL and
	// Runnable's expiry test) is the store's clock when the statement runs,
	// never the caller's: a store shared by several hosts uses its database
	// server's, so that a host whose clock runs ahead cannot take a lease
	// early nor one whose clock runs behind keep it late, and a lease
	// never starts to run down while the call waits for a connection or a
	// lock.
	AcquireLease(ctx context.Context, id, owner string, ttl time.Duration) (Instance, error)
	// RenewLeases extends every lease owner holds to now+ttl and returns
	// the IDs of those instances, in no particular order: an activation
	// whose instance is missing lost its lease (another node took it over)
	// and must stop.
	RenewLeases(ctx context.Context, owner string, ttl time.Duration) ([]string, error)
	// ReleaseLeases drops every lease owner holds and increments the lease
	// epoch of each instance it releases, so that an activation still
	// running under such a lease fails its next write with ErrFenced. An
	// instance released while waiting becomes running: its node parked it
	// live and is gone, so a new activation must look at it (Runnable lists
	// it) rather than wait for its next timer or message. A
	// node calls it on its own leases at a clean shutdown or restart; a
	// cluster calls it for a node it declared dead, to take the node's
	// instances over at once rather than when their leases expire. The
	// released instances become Runnable.
	ReleaseLeases(ctx context.Context, owner string) error

	// RequestCancel records a cancel request on a non-terminal instance.
	RequestCancel(ctx context.Context, id, reason string) error

	// Instance reads one instance.
	Instance(ctx context.Context, id string) (Instance, error)
	// Snapshot reads instance id with its current run's history, its
	// subscriptions and the depth of its mailbox, all as of one moment
	// (a read-only transaction), so that they agree with one another. An
	// unknown ID fails with ErrNotFound.
	Snapshot(ctx context.Context, id string) (Snapshot, error)
	// History reads an instance's current-run history from seq on.
	History(ctx context.Context, id string, fromSeq int64) ([]Event, error)
	// List reads instances ordered by ID.
	List(ctx context.Context, f ListFilter) ([]Instance, error)
	// ListInstances reads a page of the instances that q selects, newest
	// first: by CreatedAt, then ID, both descending. The order is on
	// values that never change, so that paging with q.After neither repeats
	// nor skips an instance while instances change status between pages
	// (instances created after the first page are before it, and not
	// listed). Filters on workflow, statuses, parent and creation time are
	// answered from indexes, so a page costs the same however many
	// instances the store holds; the update-time and input filters are
	// checked on the rows those select, so a page costs more the more
	// rows they reject.
	ListInstances(ctx context.Context, q InstanceQuery) ([]Instance, error)
	// HistoryRange reads up to limit events of an instance's current run,
	// from seq fromSeq on, in order; limit <= 0 means no limit.
	HistoryRange(ctx context.Context, id string, fromSeq int64, limit int) ([]Event, error)
	// Timers lists an instance's pending timers, earliest first.
	Timers(ctx context.Context, id string) ([]Timer, error)
	// Runnable lists non-terminal instances of the given buckets that no
	// live lease covers (by the store's clock, see AcquireLease) and that
	// need an activation: status running or compensating, waiting under a
	// lease that ran out (its node parked it, then died or lost it: it may
	// hold work only a live activation resumes), or waiting with mail in
	// their mailbox or a cancel request. buckets selects instances
	// by BucketOf(ID): nil means every bucket, an empty non-nil slice none
	// (a cluster node that owns no bucket reads nothing). A bucket outside
	// [0, NumBuckets) fails with an *InvalidError. limit <= 0 means 1000.
	Runnable(ctx context.Context, buckets []int, limit int) ([]string, error)

	// Mailbox reads the instance's mailbox in arrival order: messages
	// addressed to it plus the queues of channels it consumes competitively.
	Mailbox(ctx context.Context, id string, limit int) ([]Message, error)
	// Subscriptions lists an instance's subscriptions.
	Subscriptions(ctx context.Context, id string) ([]Subscription, error)
	// ChannelStats summarises every channel with subscribers or waiting messages.
	ChannelStats(ctx context.Context) ([]ChannelStat, error)
	// CountInstances counts every instance the store holds, ended ones
	// included, by workflow and status, ordered by workflow then status;
	// pairs with no instance are left out. It reads an index of
	// (workflow, status), not the rows, but visits one index entry per
	// instance: its cost grows with the instances held, so callers that
	// call it often cache it.
	CountInstances(ctx context.Context) ([]InstanceCount, error)

	// PruneMessageIDs forgets the IDs of Dedupe messages added before t, so
	// that the table of used IDs stays bounded; it returns how many went.
	PruneMessageIDs(ctx context.Context, before time.Time) (int, error)
	// PruneQueue deletes the messages waiting in channels' queues (those
	// with no Target) that were published before t, so that a channel
	// nobody consumes does not keep its messages forever; it returns how
	// many went. Messages addressed to an instance are never deleted: their
	// addressee will read them. It deletes in chunks, each its own
	// transaction, so that a long backlog never holds up writers for long;
	// a consumer whose step names a pruned message gets ErrMessageGone, as
	// when another consumer took it first.
	PruneQueue(ctx context.Context, before time.Time) (int, error)

	// DueTimers lists timers due before t, earliest first, of the
	// instances in the given buckets (a timer is in its instance's
	// bucket): nil means every bucket, an empty non-nil slice none. A
	// bucket outside [0, NumBuckets) fails with an *InvalidError. limit
	// <= 0 means 10000.
	DueTimers(ctx context.Context, before time.Time, buckets []int, limit int) ([]Timer, error)

	Notifier
	WakeRequester
	Outbox
	OutboxNotifier
	StatsReader
	CommitWatcher
	Purger
	TxApplier
	QueueClaimer

	// Close releases resources. Pending Apply calls fail with ErrStoreClosed.
	Close() error
}

// Notifier is the part of Store through which the actor runtime learns
// about mail, spawns and cancels that other processes committed for
// instances it may host, so that it need not poll the store for them. A
// spawn made under a lease runs in the process that made it and wakes
// nobody. Both drivers implement it (SQLite from the requests of
// WakeRequester); a store that cannot notify returns ErrUnsupported.
type Notifier interface {
	// Listen calls fn with the IDs of instances that another process woke
	// (nil means "rescan everything": a gap may have lost notifications).
	// It returns when ctx ends. It reconnects on its own after a lost
	// connection and calls fn(nil) after each reconnect.
	Listen(ctx context.Context, fn func(ids []string)) error
}

// WakeRequester is the part of Store for stores that cannot notify other
// processes from a commit (SQLite). A client System (one that runs no
// instances) calls it after its commits, so that the nodes sharing the
// store, which learn of the requests through their Notifier, act on its
// spawns, mail and cancels at once rather than at their next recovery
// scan. Stores whose commits notify (PostgreSQL) return ErrUnsupported:
// they need no request.
type WakeRequester interface {
	RequestWake(ctx context.Context, ids []string) error
}

// NumBuckets is how many buckets instance IDs are spread over. A cluster
// assigns buckets, not single instances, to its nodes, and the stores keep
// each instance's and timer's bucket in an indexed column, so that a node
// reads only the timers and runnable instances of its own buckets. It is
// part of the stored format and never changes.
const NumBuckets = 1024

// BucketOf is the bucket of an instance ID: FNV-1a (32 bit) of the ID
// modulo NumBuckets.
func BucketOf(id string) int {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return int(h % NumBuckets)
}
