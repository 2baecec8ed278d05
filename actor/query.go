package actor

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// ListQuery selects instances for System.List. Zero fields do not filter;
// the filters that are set must all hold.
type ListQuery struct {
	Workflow string
	// Statuses: any of these.
	Statuses []Status
	// Parent selects the children of one instance.
	Parent string
	// CreatedAfter and UpdatedAfter are inclusive bounds, CreatedBefore and
	// UpdatedBefore exclusive ones; the zero time is no bound.
	CreatedAfter, CreatedBefore time.Time
	UpdatedAfter, UpdatedBefore time.Time
	// Input holds equality conditions on fields of the instance's input,
	// read as JSON: a key is a top-level field's name or a dotted path to a
	// nested one ("customer.id"); the value matches a JSON string equal to
	// it, or a number or boolean whose JSON text equals it ("42", "true").
	// A missing field or JSON null never matches. Inputs written with a
	// codec other than JSON (protobuf messages, a custom Config.Codec) are
	// not JSON and match no condition.
	Input map[string]string
	// Limit bounds the page: default 50, at most 1000 (more is read as 1000).
	Limit int
	// PageToken continues a listing: InstancePage.Next of the previous page.
	PageToken string
}

// InstancePage is one page of System.List.
type InstancePage struct {
	Instances []Instance
	// Next is the PageToken of the following page; empty on the last one.
	Next string
}

// Limits of the pages of the query calls.
const (
	defaultListLimit    = 50
	maxListLimit        = 1000
	defaultHistoryLimit = 100
	maxHistoryLimit     = 1000
	defaultMailboxLimit = 100
	maxMailboxLimit     = 1000
)

// ErrPageToken: List was given a page token it did not make (see
// PageTokenError).
var ErrPageToken = errors.New("norn: invalid page token")

// PageTokenError says ListQuery.PageToken is not a token List returned.
type PageTokenError struct {
	Token  string
	Reason string
}

func (e *PageTokenError) Error() string {
	return fmt.Sprintf("norn: invalid page token %q: %s", e.Token, e.Reason)
}

// Is makes errors.Is(err, ErrPageToken) and errors.Is(err, ErrInvalidInput)
// true.
func (e *PageTokenError) Is(target error) bool {
	return target == ErrPageToken || target == ErrInvalidInput
}

// The page token is the position of the page's last instance (creation
// time, ID), base64url-encoded: opaque to callers, and stable, since neither
// value ever changes.
func encodePageToken(k persistence.InstanceKey) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(k.CreatedAt.UnixNano(), 10) + ":" + k.ID))
}

func decodePageToken(tok string) (*persistence.InstanceKey, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, &PageTokenError{Token: tok, Reason: "not base64url"}
	}
	ns, id, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return nil, &PageTokenError{Token: tok, Reason: "not a position in the listing"}
	}
	return &persistence.InstanceKey{CreatedAt: time.Unix(0, n), ID: id}, nil
}

// List reads a page of the instances q selects, newest first (by creation
// time, then ID). Paging with Next neither repeats nor skips an instance,
// however instances change meanwhile: the order is on values that never
// change, and instances created after the first page come before it (a new
// listing shows them). Filters on workflow, statuses, parent and creation
// time are answered from indexes, so a page costs the same whatever the
// store holds; update-time and input filters are checked on the instances
// those select, so a page costs more the more instances they reject.
func (s *System) List(ctx context.Context, q ListQuery) (InstancePage, error) {
	limit := q.Limit
	switch {
	case limit <= 0:
		limit = defaultListLimit
	case limit > maxListLimit:
		limit = maxListLimit
	}
	pq := persistence.InstanceQuery{Workflow: q.Workflow, Statuses: q.Statuses, Parent: q.Parent,
		CreatedAfter: q.CreatedAfter, CreatedBefore: q.CreatedBefore, UpdatedAfter: q.UpdatedAfter, UpdatedBefore: q.UpdatedBefore,
		Input: q.Input, Limit: limit + 1} // one more tells whether a next page exists
	if q.PageToken != "" {
		after, err := decodePageToken(q.PageToken)
		if err != nil {
			return InstancePage{}, err
		}
		pq.After = after
	}
	rows, err := s.store.ListInstances(ctx, pq)
	if err != nil {
		return InstancePage{}, fmt.Errorf("norn: list instances: %w", err)
	}
	var page InstancePage
	if len(rows) > limit {
		rows = rows[:limit]
		page.Next = encodePageToken(rows[limit-1].Key())
	}
	page.Instances = make([]Instance, len(rows))
	for i, in := range rows {
		page.Instances[i] = s.instance(in)
	}
	return page, nil
}

// exists turns an empty read about pid into ErrNotFound when there is no
// such instance (reads of a missing instance's records find none).
func (s *System) exists(ctx context.Context, pid PID) error {
	_, err := s.store.Instance(ctx, string(pid))
	return err
}

// HistoryPage reads up to limit events of the instance's current run whose
// Seq is greater than afterSeq, in order: pass -1 for the first page, then
// the Seq of the last event read. limit <= 0 means 100; at most 1000.
func (s *System) HistoryPage(ctx context.Context, pid PID, afterSeq int64, limit int) ([]HistoryEvent, error) {
	switch {
	case limit <= 0:
		limit = defaultHistoryLimit
	case limit > maxHistoryLimit:
		limit = maxHistoryLimit
	}
	afterSeq = min(max(afterSeq, -1), math.MaxInt64-1) // no event has the last Seq
	evs, err := s.store.HistoryRange(ctx, string(pid), afterSeq+1, limit)
	if err != nil {
		return nil, fmt.Errorf("norn: history of %s: %w", pid, err)
	}
	if len(evs) == 0 {
		return nil, s.exists(ctx, pid)
	}
	out := make([]HistoryEvent, len(evs))
	for i, e := range evs {
		out[i] = s.historyEvent(e)
	}
	return out, nil
}

// MailboxMessage is one message waiting for an instance.
type MailboxMessage struct {
	// Seq is the store-wide arrival order; the instance receives in it.
	Seq     int64
	ID      string
	Channel string // empty for a message sent to the PID
	Sender  string // the sending instance, or empty from outside
	// Type is the payload's type name, as the sender named it.
	Type        string
	Payload     []byte // encoded
	Metadata    map[string]string
	PublishedAt time.Time
	// Queued marks a message in a competing channel's queue: the instance
	// is one of the consumers that may take it.
	Queued bool
	// Unmatched: the instance is parked and no receive it waits in takes
	// this message (its type, channel or sender is refused, or the
	// instance looked at it and left it: a message without a type that
	// does not decode strictly into the receive's type, or one a Match
	// filter refused). It stays until a later receive takes it.
	Unmatched bool
}

// Mailbox reads up to limit messages waiting for the instance, in arrival
// order: those sent to its PID or to it on a channel, its copies of
// broadcasts, and the queues of the channels it consumes competitively.
// limit <= 0 means 100; at most 1000.
func (s *System) Mailbox(ctx context.Context, pid PID, limit int) ([]MailboxMessage, error) {
	switch {
	case limit <= 0:
		limit = defaultMailboxLimit
	case limit > maxMailboxLimit:
		limit = maxMailboxLimit
	}
	msgs, err := s.store.Mailbox(ctx, string(pid), limit)
	if err != nil {
		return nil, fmt.Errorf("norn: mailbox of %s: %w", pid, err)
	}
	if len(msgs) == 0 {
		return nil, s.exists(ctx, pid)
	}
	var parked *parkedOn
	if inst, err := s.store.Instance(ctx, string(pid)); err == nil {
		parked = s.parkedOnOf(inst)
	}
	out := make([]MailboxMessage, len(msgs))
	for i, m := range msgs {
		out[i] = MailboxMessage{Seq: m.Seq, ID: m.ID, Channel: m.Channel, Sender: m.Sender, Type: m.Type, Payload: m.Payload,
			Metadata: m.Metadata, PublishedAt: m.PublishedAt, Queued: m.Target == "", Unmatched: parked.unmatched(m, string(pid))}
	}
	return out, nil
}

// Subscriptions lists the channels the instance listens to, by name.
func (s *System) Subscriptions(ctx context.Context, pid PID) ([]Subscription, error) {
	subs, err := s.store.Subscriptions(ctx, string(pid))
	if err != nil {
		return nil, fmt.Errorf("norn: subscriptions of %s: %w", pid, err)
	}
	if len(subs) == 0 {
		return nil, s.exists(ctx, pid)
	}
	out := make([]Subscription, len(subs))
	for i, sub := range subs {
		out[i] = Subscription{Channel: sub.Channel, Mode: sub.Mode}
	}
	return out, nil
}

// Timers lists the instance's pending timers, earliest first.
func (s *System) Timers(ctx context.Context, pid PID) ([]Timer, error) {
	ts, err := s.store.Timers(ctx, string(pid))
	if err != nil {
		return nil, fmt.Errorf("norn: timers of %s: %w", pid, err)
	}
	if len(ts) == 0 {
		return nil, s.exists(ctx, pid)
	}
	out := make([]Timer, len(ts))
	for i, t := range ts {
		out[i] = userTimer(t)
	}
	return out, nil
}

// userTimer reads what a timer is for from its ID: "sleep:N" and
// "receive:N" are the calls' IDs, "retry:CALL:ATTEMPT" an activity call's
// back-off.
func userTimer(t persistence.Timer) Timer {
	out := Timer{ID: t.ID, Name: t.ID, Due: t.Due}
	kind, rest, _ := strings.Cut(t.ID, ":")
	switch kind {
	case TimerSleep, TimerReceive:
		out.Kind = kind
	case TimerRetry:
		out.Kind = kind
		if i := strings.LastIndexByte(rest, ':'); i > 0 {
			out.Name = rest[:i]
		}
	}
	return out
}

// Children lists the instances the instance spawned (SpawnChild), newest
// first. For a parent with very many children, List with Parent reads them
// page by page.
func (s *System) Children(ctx context.Context, pid PID) ([]Instance, error) {
	if err := s.exists(ctx, pid); err != nil {
		return nil, fmt.Errorf("norn: children of %s: %w", pid, err)
	}
	var out []Instance
	q := ListQuery{Parent: string(pid), Limit: maxListLimit}
	for {
		page, err := s.List(ctx, q)
		if err != nil {
			return out, fmt.Errorf("norn: children of %s: %w", pid, err)
		}
		out = append(out, page.Instances...)
		if page.Next == "" {
			return out, nil
		}
		q.PageToken = page.Next
	}
}
