package viewer

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/norntype"
)

// item is one row of the timeline, built from one history event.
type item struct {
	Seq      int64
	At       time.Time
	Offset   string // since the run started
	Class    string // CSS class: activity, message, timer, child, end, …
	Label    string // what happened, in a few words
	Name     string // activity, channel, timer, workflow …
	Detail   string // one line more
	Duration string
	Attempts int
	Error    string
	Payload  string // pretty, shown on demand
	Link     string // a related instance's page
	LinkText string
	MsgType  string // a received message's type name
}

// retryRecord mirrors what an activity_retry event records.
type retryRecord struct {
	Attempt int       `json:"attempt"`
	Start   time.Time `json:"start"`
	Next    time.Time `json:"next"`
	Timer   string    `json:"timer"`
	Error   string    `json:"error"`
}

// timerRecord mirrors what timer and receive_wait events record.
type timerRecord struct {
	Due    time.Time `json:"due"`
	Stored bool      `json:"stored"`
}

// receivedMessage mirrors the message a received event records.
type receivedMessage struct {
	ID          string
	Channel     string
	Sender      string
	Type        string
	Payload     []byte
	Metadata    map[string]string
	PublishedAt time.Time
}

// timeline turns events (one run's, in order, possibly a window of it) into
// rows. start is when the run started (zero if unknown). It pairs what the
// window holds: activity results with their failed attempts, fired timers
// with their due times.
func (h *handler) timeline(events []norntype.HistoryEvent, start time.Time) []item {
	retries := map[string][]retryRecord{} // activity call ID → failed attempts so far
	timerDue := map[string]time.Time{}    // timer or receive ID → due
	out := make([]item, 0, len(events))
	var prev time.Time
	for i, e := range events {
		if i == 0 && start.IsZero() {
			start = e.At
		}
		it := item{Seq: e.Seq, At: e.At, Name: e.Name, Error: e.Error, Class: "other", Label: string(e.Kind)}
		if !start.IsZero() {
			it.Offset = "+" + fmtDuration(e.At.Sub(start))
		}
		switch e.Kind {
		case norntype.EventStarted:
			it.Class, it.Label, it.Payload = "start", "started", pretty(e.Payload)
			it.Detail = "input " + short(e.Payload, 80)
		case norntype.EventActivity:
			it.Class, it.Label = "activity", "activity"
			rs := retries[e.Ref]
			it.Attempts = len(rs) + 1
			var ae *actor.ActivityError
			if errors.As(e.Failure, &ae) && ae.Attempts > 0 {
				it.Attempts = ae.Attempts
			}
			// The first attempt's start is recorded only with a retry;
			// without one the previous event bounds it (≈).
			switch {
			case len(rs) > 0 && !rs[0].Start.IsZero():
				it.Duration = fmtDuration(e.At.Sub(rs[0].Start))
			case !prev.IsZero():
				it.Duration = "≈" + fmtDuration(e.At.Sub(prev))
			}
			if e.Error != "" {
				it.Class, it.Label = "activity failed", "activity failed"
			} else {
				it.Payload = pretty(e.Payload)
				it.Detail = "result " + short(e.Payload, 80)
			}
			delete(retries, e.Ref)
		case norntype.EventActivityRetry:
			var r retryRecord
			_ = json.Unmarshal(e.Payload, &r)
			retries[e.Ref] = append(retries[e.Ref], r)
			it.Class, it.Label = "retry", "attempt failed"
			it.Error = r.Error
			if !r.Next.IsZero() {
				it.Detail = "attempt " + strconv.Itoa(r.Attempt) + "; next not before " + stamp(r.Next) +
					" (after " + fmtDuration(r.Next.Sub(e.At)) + ")"
			}
		case norntype.EventTimer, norntype.EventReceiveWait:
			var r timerRecord
			_ = json.Unmarshal(e.Payload, &r)
			timerDue[e.Name] = r.Due
			it.Class = "timer"
			if e.Kind == norntype.EventTimer {
				it.Label = "timer set"
			} else {
				it.Label = "receive waits"
			}
			it.Detail = "due " + stamp(r.Due) + " (in " + fmtDuration(r.Due.Sub(e.At)) + ")"
		case norntype.EventTimerFired, norntype.EventReceiveTimeout:
			it.Class = "timer"
			if e.Kind == norntype.EventTimerFired {
				it.Label = "timer fired"
			} else {
				it.Label = "receive timed out"
			}
			if due, ok := timerDue[e.Name]; ok {
				it.Detail = "due " + stamp(due) + ", late by " + fmtDuration(max(0, e.At.Sub(due)))
			}
		case norntype.EventReceived:
			var m receivedMessage
			_ = json.Unmarshal(e.Payload, &m)
			it.Class, it.Label = "message", "message received"
			it.Name = channelName(m.Channel)
			it.Detail = messageLine(m.Sender, m.Type, m.Payload)
			it.MsgType = m.Type
			it.Payload = pretty(m.Payload)
			if m.Sender != "" {
				it.Link, it.LinkText = h.instanceURL(m.Sender), m.Sender
			}
			if m.Channel == mailbox.DownChannel {
				// A linked child's or a monitored instance's end.
				var down mailbox.Down
				_ = json.Unmarshal(m.Payload, &down)
				it.Class, it.Label, it.Name = "child", "child ended: "+down.Status, ""
				it.Link, it.LinkText = h.instanceURL(string(down.PID)), string(down.PID)
				it.Detail, it.Payload = "", ""
				if down.Error != "" {
					it.Error = down.Error
				} else if down.Status == string(norntype.StatusCompleted) {
					it.Detail, it.Payload = "output "+short(down.Output, 80), pretty(down.Output)
				}
			}
		case norntype.EventSent:
			it.Class, it.Label = "message", "message sent"
			it.Link, it.LinkText = h.instanceURL(e.Name), e.Name
			it.Name = ""
			it.Detail = "to " + e.Name
		case norntype.EventPublished:
			it.Class, it.Label = "message", "published"
		case norntype.EventSubscribed:
			it.Class, it.Label = "message", "subscribed"
			it.Detail = string(e.Payload)
		case norntype.EventUnsubscribed:
			it.Class, it.Label = "message", "unsubscribed"
		case norntype.EventChildSpawned:
			it.Class, it.Label = "child", "child spawned"
			if e.Ref != "" {
				it.Link, it.LinkText = h.instanceURL(e.Ref), e.Ref
			}
		case norntype.EventLinkedExit:
			it.Class, it.Label = "child failed", "linked child failed"
		case norntype.EventMonitor:
			it.Class, it.Label = "child", "monitor"
			it.Link, it.LinkText = h.instanceURL(e.Name), e.Name
		case norntype.EventCancelSent:
			it.Class, it.Label = "child", "cancel sent"
		case norntype.EventCancelObserved:
			it.Class, it.Label = "cancel", "cancel seen"
		case norntype.EventCompensating:
			it.Class, it.Label = "cancel", "compensating"
		case norntype.EventCompensation:
			it.Class, it.Label = "activity", "compensation"
			if e.Error != "" {
				it.Class = "activity failed"
			}
		case norntype.EventNow:
			it.Label = "clock read"
			it.Detail = short(e.Payload, 60)
		case norntype.EventVersion:
			it.Label = "version marker"
			it.Detail = short(e.Payload, 40)
		case norntype.EventCompleted:
			it.Class, it.Label, it.Payload = "end ok", "completed", pretty(e.Payload)
			it.Detail = "output " + short(e.Payload, 80)
		case norntype.EventFailed:
			it.Class, it.Label = "end failed", "failed"
		case norntype.EventCancelled:
			it.Class, it.Label = "end cancelled", "cancelled"
		default:
			it.Payload = pretty(e.Payload)
		}
		prev = e.At
		out = append(out, it)
	}
	return out
}

func channelName(ch string) string {
	if ch == "" {
		return "(direct to PID)"
	}
	return ch
}

func messageLine(sender, typ string, payload []byte) string {
	s := ""
	if sender != "" {
		s = "from " + sender
	} else {
		s = "from outside"
	}
	if typ != "" {
		s += " · " + typ
	}
	if p := short(payload, 60); p != "" {
		s += " · " + p
	}
	return s
}
