package journal_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nornlabs/norn/actor/internal/journal"
	"github.com/nornlabs/norn/persistence"
)

type ev = persistence.Event

// hist numbers events as a store would.
func hist(events ...ev) journal.Events {
	for i := range events {
		events[i].Seq = int64(i)
	}
	return events
}

func started(extra ...ev) journal.Events {
	return hist(append([]ev{{Kind: "started", Name: "wf", Ref: "json", Payload: []byte(`"in"`)}}, extra...)...)
}

func divergence(t *testing.T, err error) *journal.Divergence {
	t.Helper()
	var d *journal.Divergence
	if !errors.As(err, &d) {
		t.Fatalf("got %v, want a *Divergence", err)
	}
	return d
}

func mustStart(t *testing.T, j *journal.Journal) {
	t.Helper()
	if _, err := j.Start("json"); err != nil {
		t.Fatal(err)
	}
}

func TestStart(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		h     journal.Events
		codec string
		want  string // "" for success, else part of Expected
	}{
		{"ok", started(), "json", ""},
		{"empty", hist(), "json", "started"},
		{"not started", hist(ev{Kind: "now"}), "json", "started"},
		{"other codec", started(), "proto", "codec json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := journal.New(c.h)
			e, err := j.Start(c.codec)
			if c.want == "" {
				if err != nil || string(e.Payload) != `"in"` || j.Replaying() {
					t.Fatalf("Start = %+v, %v; replaying %v", e, err, j.Replaying())
				}
				return
			}
			if d := divergence(t, err); !strings.Contains(d.Expected, c.want) {
				t.Fatalf("divergence %+v, want %q", d, c.want)
			}
		})
	}
}

func TestNextMatchesKindNameDigest(t *testing.T) {
	t.Parallel()
	h := started(ev{Kind: "sent", Name: "b", Digest: "d1"}, ev{Kind: "published", Name: "ch"})
	cases := []struct {
		name, kind, cname, dig string
		ok                     bool
	}{
		{"same", "sent", "b", "d1", true},
		{"no digest asked", "sent", "b", "", true},
		{"other kind", "published", "b", "d1", false},
		{"other name", "sent", "c", "d1", false},
		{"other input", "sent", "b", "d2", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := journal.New(h)
			mustStart(t, j)
			e, err := j.Next(c.kind, c.cname, c.dig)
			if c.ok {
				if err != nil || e.Seq != 1 {
					t.Fatalf("Next = %+v, %v", e, err)
				}
				if e, err := j.Next("published", "ch", ""); err != nil || e.Seq != 2 {
					t.Fatalf("second Next = %+v, %v", e, err)
				}
				return
			}
			if d := divergence(t, err); d.Seq != 1 || d.Expected != "sent b" {
				t.Fatalf("divergence %+v", d)
			}
		})
	}
}

func TestRecordCommitMarkRestore(t *testing.T) {
	t.Parallel()
	j := journal.New(started())
	mustStart(t, j)
	if j.Replaying() {
		t.Fatal("a history of one started event replays nothing after Start")
	}
	if live, err := j.GoLive(); !live || err != nil {
		t.Fatalf("GoLive = %v, %v; want the first time true", live, err)
	}
	if live, _ := j.GoLive(); live {
		t.Fatal("GoLive reported twice")
	}
	if e := j.Record(ev{Kind: "now"}); e.Seq != 1 {
		t.Fatalf("first recorded seq %d, want 1", e.Seq)
	}
	m := j.Mark()
	j.Record(ev{Kind: "sent"})
	j.Record(ev{Kind: "sent"})
	j.Restore(m)
	if got := len(j.Pending()); got != 1 || j.Seq() != 2 {
		t.Fatalf("after restore: %d pending, seq %d", got, j.Seq())
	}
	j.Committed()
	if len(j.Pending()) != 0 || j.Seq() != 2 {
		t.Fatalf("after commit: %d pending, seq %d", len(j.Pending()), j.Seq())
	}
	j.Record(ev{Kind: "now"})
	j.Discard()
	if j.Seq() != 2 {
		t.Fatalf("a discarded event kept its seq: next %d", j.Seq())
	}
	if a, b, c := j.NextID("charge"), j.NextID("charge"), j.NextID("ship"); a != "charge:1" || b != "charge:2" || c != "ship:1" {
		t.Fatalf("IDs %s %s %s", a, b, c)
	}
}

func TestReplayOnlyEndsAtHistorysEnd(t *testing.T) {
	t.Parallel()
	j := journal.NewReplay(started(ev{Kind: "now"}))
	mustStart(t, j)
	if live, err := j.GoLive(); live || err != nil {
		t.Fatalf("GoLive while replaying = %v, %v", live, err)
	}
	if _, err := j.Next("now", "", ""); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := j.GoLive(); !errors.Is(err, journal.ErrEnd) {
			t.Fatalf("GoLive past history = %v, want ErrEnd", err)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	h := started(ev{Kind: "version", Name: "old", Payload: []byte("1")},
		ev{Kind: "version", Name: "b", Payload: []byte("2")},
		ev{Kind: "version", Name: "bad", Payload: []byte("x")},
		ev{Kind: "now"})
	j := journal.New(h)
	mustStart(t, j)
	if v, found, err := j.Version("b"); v != 2 || !found || err != nil {
		t.Fatalf("Version(b) = %d, %v, %v", v, found, err)
	}
	if _, found, _ := j.Version("missing"); found {
		t.Fatal("a marker nobody recorded was found")
	}
	if _, _, err := j.Version("bad"); divergence(t, err).Seq != 3 {
		t.Fatalf("unreadable marker: %v", err)
	}
	// The marker "old" no call asked for is passed over by the next call.
	j2 := journal.New(h)
	mustStart(t, j2)
	if err := j2.SkipMarkers(); err != nil {
		t.Fatal(err)
	}
	if e, err := j2.Next("now", "", ""); err != nil || e.Seq != 4 {
		t.Fatalf("Next past markers = %+v, %v", e, err)
	}
}

func TestReplayCancel(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		h             journal.Events
		seen, decided bool
	}{
		{"recorded here", started(ev{Kind: "cancel_observed"}), true, true},
		{"behind a marker", started(ev{Kind: "version", Name: "v", Payload: []byte("1")}, ev{Kind: "cancel_observed"}), true, true},
		{"history goes on", started(ev{Kind: "now"}), false, true},
		{"only markers left", started(ev{Kind: "version", Name: "v", Payload: []byte("1")}), false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := journal.New(c.h)
			mustStart(t, j)
			seen, decided, err := j.ReplayCancel()
			if err != nil || seen != c.seen || decided != c.decided || j.Cancelled() != c.seen {
				t.Fatalf("ReplayCancel = %v, %v, %v; cancelled %v", seen, decided, err, j.Cancelled())
			}
		})
	}
}

// activity makes a call resolved by its "activity" event's payload.
func activity(id, name, digest string) *journal.Call {
	c := &journal.Call{Key: journal.ActivityKey(id), Name: name, Digest: digest}
	c.Resolve = func(e ev) (any, error) {
		if e.Error != "" {
			return nil, errors.New(e.Error)
		}
		return string(e.Payload), nil
	}
	c.Advance = func(ev) error { return nil }
	return c
}

func TestCallsResolveInHistorysOrder(t *testing.T) {
	t.Parallel()
	// Two activities issued a then b; b's result was observed first.
	h := started(
		ev{Kind: "activity_retry", Name: "charge", Ref: "a", Digest: "da"},
		ev{Kind: "activity", Name: "ship", Ref: "b", Digest: "db", Payload: []byte("B")},
		ev{Kind: "activity", Name: "charge", Ref: "a", Digest: "da", Payload: []byte("A")},
	)
	j := journal.New(h)
	mustStart(t, j)
	a, b := activity("a", "charge", "da"), activity("b", "ship", "db")
	advanced := 0
	a.Advance = func(ev) error { advanced++; return nil }
	j.Add(a)
	j.Add(b)
	if len(j.Calls()) != 2 {
		t.Fatal("two calls pending")
	}
	w, _, err := j.ReplayWait(func() bool { return a.Done() && b.Done() })
	if err != nil || w != journal.WaitDone {
		t.Fatalf("ReplayWait = %v, %v", w, err)
	}
	if advanced != 1 {
		t.Fatalf("retry record applied %d times", advanced)
	}
	if b.Order() >= a.Order() {
		t.Fatalf("resolution order a %d, b %d: b came first in history", a.Order(), b.Order())
	}
	if v, err := a.Outcome(); v != "A" || err != nil {
		t.Fatalf("a = %v, %v", v, err)
	}
	if len(j.Calls()) != 0 || j.Replaying() {
		t.Fatal("calls left or history left")
	}
	// A call refused at once still takes its place in resolution order.
	if f := j.Failed(errors.New("no")); !f.Done() || f.Order() <= a.Order() {
		t.Fatalf("failed call order %d after %d", f.Order(), a.Order())
	}
}

func TestActivityWithAnotherInputDiverges(t *testing.T) {
	t.Parallel()
	h := started(ev{Kind: "activity", Name: "charge", Ref: "a", Digest: "da"})
	for _, c := range []*journal.Call{activity("a", "charge", "other"), activity("a", "refund", "da")} {
		j := journal.New(h)
		mustStart(t, j)
		j.Add(c)
		if d := divergence(t, j.ReplayCompletions()); d.Seq != 1 || !strings.Contains(d.Got, "with another input") {
			t.Fatalf("divergence %+v", d)
		}
	}
}

func TestReplayWait(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		h    journal.Events
		want journal.Wait
		err  string // part of the divergence's Got
	}{
		{"live", started(), journal.WaitLive, ""},
		{"cancel recorded at the wait", started(ev{Kind: "cancel_observed"}), journal.WaitCancelled, ""},
		{"linked exit", started(ev{Kind: "linked_exit", Ref: "m1"}), journal.WaitLinkedExit, ""},
		{"marker then live", started(ev{Kind: "version", Name: "v", Payload: []byte("1")}), journal.WaitLive, ""},
		{"something else", started(ev{Kind: "now"}), 0, "a wait for t:sleep:1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := journal.New(c.h)
			mustStart(t, j)
			timer := &journal.Call{Key: journal.TimerKey("sleep:1"), Resolve: func(ev) (any, error) { return nil, nil }}
			j.Add(timer)
			w, e, err := j.ReplayWait(timer.Done)
			if c.err != "" {
				if d := divergence(t, err); !strings.Contains(d.Got, c.err) {
					t.Fatalf("divergence %+v, want %q", d, c.err)
				}
				return
			}
			if err != nil || w != c.want {
				t.Fatalf("ReplayWait = %v, %v; want %v", w, err, c.want)
			}
			if w == journal.WaitLinkedExit && e.Ref != "m1" {
				t.Fatalf("linked exit event %+v", e)
			}
			if w == journal.WaitCancelled && !j.Cancelled() {
				t.Fatal("a recorded cancel is not remembered")
			}
		})
	}
}

func TestEnd(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		h    journal.Events
		kind string
		out  string
		ok   bool
	}{
		{"history ends with the code", started(), "completed", "x", true},
		{"same end", started(ev{Kind: "completed", Payload: []byte("x")}), "completed", "x", true},
		{"trailing markers", started(ev{Kind: "version", Name: "v", Payload: []byte("1")}), "failed", "", true},
		{"other result", started(ev{Kind: "completed", Payload: []byte("y")}), "completed", "x", false},
		{"other end", started(ev{Kind: "failed"}), "completed", "x", false},
		{"history goes on", started(ev{Kind: "now"}), "completed", "x", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := journal.NewReplay(c.h)
			mustStart(t, j)
			err := j.End(c.kind, []byte(c.out))
			if c.ok != (err == nil) {
				t.Fatalf("End = %v", err)
			}
			if err != nil {
				divergence(t, err)
			}
		})
	}
}

func TestNewRun(t *testing.T) {
	t.Parallel()
	j := journal.New(started(ev{Kind: "now"}))
	mustStart(t, j)
	if _, err := j.Next("now", "", ""); err != nil {
		t.Fatal(err)
	}
	j.NextID("charge")
	j.Record(ev{Kind: "sent"})
	e := j.NewRun(ev{Kind: "started", Payload: []byte("next")})
	if e.Seq != 0 || len(j.Pending()) != 1 || j.Seq() != 1 || j.Replaying() {
		t.Fatalf("new run: %+v, %d pending, seq %d", e, len(j.Pending()), j.Seq())
	}
	if id := j.NextID("charge"); id != "charge:1" {
		t.Fatalf("call IDs carried over: %s", id)
	}
}

type failing struct{ journal.Events }

var errRead = errors.New("read failed")

func (f failing) At(i int) (ev, error) {
	if i > 0 {
		return ev{}, errRead
	}
	return f.Events.At(i)
}

func TestHistoryReadErrorsComeBack(t *testing.T) {
	t.Parallel()
	j := journal.New(failing{started(ev{Kind: "now"})})
	mustStart(t, j)
	if err := j.SkipMarkers(); !errors.Is(err, errRead) {
		t.Fatalf("SkipMarkers = %v", err)
	}
	if _, err := j.Next("now", "", ""); !errors.Is(err, errRead) {
		t.Fatalf("Next = %v", err)
	}
	if _, _, err := j.ReplayWait(func() bool { return false }); !errors.Is(err, errRead) {
		t.Fatalf("ReplayWait = %v", err)
	}
}

func TestReceiveWaitsThenTimesOut(t *testing.T) {
	t.Parallel()
	h := started(
		ev{Kind: "receive_wait", Name: "receive:1", Payload: []byte(`{"due":"2026-01-01T00:00:00Z"}`)},
		ev{Kind: "received", Name: "receive:2", Ref: "m1"},
		ev{Kind: "receive_timeout", Name: "receive:1"},
	)
	j := journal.New(h)
	mustStart(t, j)
	waiting := false
	errTimeout := errors.New("timeout")
	r1 := &journal.Call{Key: journal.ReceiveKey(j.NextID("receive")),
		Advance: func(e ev) error { waiting = true; return nil },
		Resolve: func(e ev) (any, error) {
			if e.Kind == "receive_timeout" {
				return nil, errTimeout
			}
			return e.Ref, nil
		}}
	r2 := &journal.Call{Key: journal.ReceiveKey(j.NextID("receive")), Resolve: func(e ev) (any, error) { return e.Ref, nil }}
	j.Add(r1)
	j.Add(r2)
	// Select over both: every outcome that comes next is read, and the
	// pick is the one history resolved first.
	if w, _, err := j.ReplayWait(func() bool { return r1.Done() || r2.Done() }); err != nil || w != journal.WaitDone {
		t.Fatalf("ReplayWait = %v, %v", w, err)
	}
	if !waiting || !r1.Done() || !r2.Done() || r2.Order() >= r1.Order() {
		t.Fatalf("waiting %v, r1 done %v (order %d), r2 done %v (order %d)", waiting, r1.Done(), r1.Order(), r2.Done(), r2.Order())
	}
	if v, _ := r2.Outcome(); v != "m1" {
		t.Fatalf("r2 = %v", v)
	}
	if _, err := r1.Outcome(); !errors.Is(err, errTimeout) {
		t.Fatalf("r1 = %v, want its timeout", err)
	}
}

func TestProgressOfACallWithoutOneDiverges(t *testing.T) {
	t.Parallel()
	j := journal.New(started(ev{Kind: "receive_wait", Name: "receive:1"}))
	mustStart(t, j)
	j.Add(&journal.Call{Key: journal.ReceiveKey("receive:1"), Resolve: func(ev) (any, error) { return nil, nil }})
	if d := divergence(t, j.ReplayCompletions()); d.Seq != 1 {
		t.Fatalf("divergence %+v", d)
	}
}
