package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornlabs/norn/persistence"
)

var _ persistence.OutboxNotifier = (*Store)(nil)

// Notifier is persistence.Notifier, part of every persistence.Store: the
// actor runtime listens through it to hear about work that other processes
// committed for instances it may host.
type Notifier = persistence.Notifier

// RequestWake is not supported, nor needed: every commit notifies the
// processes that share the database of what it woke. It returns
// ErrUnsupported.
func (s *Store) RequestWake(context.Context, []string) error {
	return fmt.Errorf("postgres: request wake: %w", persistence.ErrUnsupported)
}

// Limits of the wake-up notifications. PostgreSQL refuses NOTIFY payloads of
// 8000 bytes or more; a batch that woke more instances than fit in
// maxNotifies payloads sends one "rescan" notification instead.
const (
	maxPayload  = 7000
	maxNotifies = 8
)

// wakeMsg is the payload of a wake-up notification.
type wakeMsg struct {
	From   string   `json:"from"`             // the sending Store's origin
	IDs    []string `json:"ids,omitempty"`    // instances woken
	Rescan bool     `json:"rescan,omitempty"` // too many to list: rescan everything
}

// wakePayloads encodes the IDs woken by one batch as NOTIFY payloads.
func wakePayloads(origin string, woken []string) []string {
	seen := make(map[string]bool, len(woken))
	var out []string
	cur := wakeMsg{From: origin}
	size, rescan := 0, false
	flush := func() {
		if len(cur.IDs) > 0 {
			b, _ := json.Marshal(cur)
			out = append(out, string(b))
		}
		cur.IDs, size = nil, 0
	}
	for _, id := range woken {
		if seen[id] {
			continue
		}
		seen[id] = true
		b, _ := json.Marshal(id)
		n := len(b) + 1
		if n > maxPayload-100 {
			rescan = true // an ID too long for any payload
			break
		}
		if size+n > maxPayload-100 {
			flush()
		}
		cur.IDs = append(cur.IDs, id)
		size += n
	}
	flush()
	if rescan || len(out) > maxNotifies {
		return []string{rescanPayload(origin)}
	}
	return out
}

func rescanPayload(origin string) string {
	b, _ := json.Marshal(wakeMsg{From: origin, Rescan: true})
	return string(b)
}

// Listen implements persistence.Notifier. It holds a connection of its own
// (outside the pool) that LISTENs on the store's wake-up channel, and calls
// fn, from the calling goroutine, with the IDs of instances that other Store
// values (other processes, or other stores in this one) woke: instances
// whose mailbox gained a message (StepResult.Woken), instances created
// (Step.Create), and instances asked to cancel (RequestCancel). A store's
// own wake-ups are not reported back to it: its caller has them already.
//
// fn(nil) asks for a rescan. Listen calls it once the first LISTEN is in
// place (anything woken before then went unheard) and after every
// reconnect; when another store listens too, only half a second later (a
// store that saw no other listener sends no notifications, and may not
// have looked again yet, see othersListening). fn should return quickly;
// notifications queue on the connection while it runs.
//
// When the connection drops, Listen reconnects with back-off (100ms doubling
// up to 5s) for as long as ctx lasts. An idle connection is pinged every 30
// seconds so that a silently dead one is noticed. Listen returns ctx.Err()
// when ctx ends, or persistence.ErrStoreClosed when the store is closed.
func (s *Store) Listen(ctx context.Context, fn func(ids []string)) error {
	return s.listenLoop(ctx, s.channel, "wake-up", true, func() { fn(nil) }, func(payload string) {
		var msg wakeMsg
		if err := json.Unmarshal([]byte(payload), &msg); err != nil {
			s.opts.Logger.Warn("norn/postgres: malformed wake-up notification", "payload", payload, "err", err)
			fn(nil)
			return
		}
		switch {
		case msg.From == s.origin:
		case msg.Rescan:
			fn(nil)
		case len(msg.IDs) > 0:
			fn(msg.IDs)
		}
	})
}

// listenLoop holds a connection of its own (outside the pool) that LISTENs
// on channel, and hands each notification's payload to notified, from the
// calling goroutine, until ctx ends or the store is closed. It calls
// connected once each LISTEN is in place (the first, and after every
// reconnect): whatever was notified before went unheard. what names the
// listener in log lines. A wake-up listener (present) also holds the lock
// that tells other stores it listens; when it finds another store's
// listener there, it calls connected presenceLag after the connect rather
// than at once: until then, that store may still send it nothing.
func (s *Store) listenLoop(ctx context.Context, channel, what string, present bool, connected func(), notified func(payload string)) error {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return persistence.ErrStoreClosed
	}
	s.listeners.Add(1)
	s.closeMu.RUnlock()
	defer s.listeners.Done()

	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.closeCtx, cancel)()
	done := func() error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return persistence.ErrStoreClosed
	}

	const minBackoff, maxBackoff = 100 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for {
		conn, others, err := s.listenConn(lctx, channel, present)
		if err == nil {
			backoff = minBackoff
			again := time.Now()
			if others {
				again = again.Add(time.Duration(s.presenceLag.Load()))
			}
			err = s.receive(lctx, conn, notified, again, connected)
			if present {
				// Before the close: once the backend is gone its PID may
				// be another store's.
				pid := conn.PgConn().PID()
				s.listenMu.Lock()
				if s.listenPIDs[pid]--; s.listenPIDs[pid] <= 0 {
					delete(s.listenPIDs, pid)
				}
				s.listenGen++
				s.listenMu.Unlock()
			}
			closeCtx, c := context.WithTimeout(context.Background(), time.Second)
			conn.Close(closeCtx)
			c()
		}
		if lctx.Err() != nil {
			return done()
		}
		s.opts.Logger.Warn("norn/postgres: "+what+" listener lost its connection; reconnecting", "server", s.target, "err", err, "retry_in", backoff)
		select {
		case <-lctx.Done():
			return done()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// listenConn connects and LISTENs; if present, it then takes the shared
// advisory lock that tells other stores a wake-up listener is there (see
// othersListening), records its backend as this store's own, and reports
// whether another store's listener holds the lock too.
func (s *Store) listenConn(ctx context.Context, channel string, present bool) (*pgx.Conn, bool, error) {
	conn, err := pgx.ConnectConfig(ctx, s.listen.Copy())
	if err != nil {
		return nil, false, err
	}
	fail := func(err error) (*pgx.Conn, bool, error) {
		conn.Close(context.Background())
		return nil, false, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fail(err)
	}
	if !present {
		return conn, false, nil
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock_shared($1::integer, $2::integer)", s.listenerLocks, lockHash(channel)); err != nil {
		return fail(err)
	}
	s.listenMu.Lock()
	s.listenPIDs[conn.PgConn().PID()]++
	s.listenGen++
	pids := make([]int32, 0, len(s.listenPIDs))
	for pid := range s.listenPIDs {
		pids = append(pids, int32(pid))
	}
	s.listenMu.Unlock()
	var others bool
	if err := conn.QueryRow(ctx, statements[sqlListening], s.listenerLocks, lockHash(channel), pids).Scan(&others); err != nil {
		// Cannot tell: rescan late, as if there were. (A broken
		// connection fails its first wait and reconnects.)
		s.opts.Logger.Debug("norn/postgres: looking for other listeners", "server", s.target, "err", err)
		others = true
	}
	return conn, others, nil
}

// listenPing is how long the listener's connection may stay silent before
// Listen pings it.
var listenPing = 30 * time.Second

// receive hands the payloads of notifications to fn until the connection
// fails or ctx ends. It calls rescan once, at again.
func (s *Store) receive(ctx context.Context, conn *pgx.Conn, fn func(payload string), again time.Time, rescan func()) error {
	for {
		if !again.IsZero() && !time.Now().Before(again) {
			again = time.Time{}
			rescan()
		}
		wait := listenPing
		if !again.IsZero() {
			wait = min(wait, time.Until(again))
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil || !errors.Is(wctx.Err(), context.DeadlineExceeded) || conn.IsClosed() {
				return err
			}
			if !again.IsZero() {
				continue // time for the rescan
			}
			// Idle for a while: make sure the connection still works.
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
			continue
		}
		fn(n.Payload)
	}
}

// ListenOutbox implements persistence.OutboxNotifier. Steps that emit
// NOTIFY the store's outbox channel in their own transaction (see runTx),
// so the notification is delivered at their commit and never for a step
// that rolled back. A goroutine holds a LISTEN connection of its own, as
// Listen does, and signals the returned channel for every notification
// from other Store values (this store's own commits are skipped: its
// caller knows of them) and at every (re)connect.
func (s *Store) ListenOutbox(ctx context.Context) (<-chan struct{}, error) {
	if s.isClosed() {
		return nil, persistence.ErrStoreClosed
	}
	ch := make(chan struct{}, 1)
	signal := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(ch)
		_ = s.listenLoop(ctx, s.outboxChannel, "outbox", false, signal, func(payload string) {
			if payload != s.origin {
				signal()
			}
		})
	}()
	return ch, nil
}
