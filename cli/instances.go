package cli

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntype"
	"github.com/nornlabs/norn/persistence"
)

// instanceJSON is an instance in --json output.
type instanceJSON struct {
	ID           string     `json:"id"`
	Workflow     string     `json:"workflow"`
	Status       string     `json:"status"`
	Run          int64      `json:"run"`
	Restarts     int64      `json:"restarts"`
	HistoryLen   int64      `json:"history_len"`
	Parent       string     `json:"parent,omitempty"`
	Node         string     `json:"node,omitempty"`
	CancelReason string     `json:"cancel_reason,omitempty"`
	Error        string     `json:"error,omitempty"`
	Input        any        `json:"input,omitempty"`
	Output       any        `json:"output,omitempty"`
	CreatedAt    *time.Time `json:"created_at,omitempty"`
	UpdatedAt    *time.Time `json:"updated_at,omitempty"`
}

func toInstanceJSON(in norntype.Instance) instanceJSON {
	return instanceJSON{ID: in.ID, Workflow: in.Workflow, Status: string(in.Status), Run: in.Run, Restarts: in.Restarts,
		HistoryLen: in.HistoryLen, Parent: in.Parent, Node: in.Node, CancelReason: in.CancelReason, Error: in.Error,
		Input: payload(in.Input), Output: payload(in.Output), CreatedAt: optTime(in.CreatedAt), UpdatedAt: optTime(in.UpdatedAt)}
}

// oneID checks that args is exactly one instance ID.
func oneID(cmd string, args []string) (norntype.PID, error) {
	if len(args) != 1 || args[0] == "" {
		return "", usagef(cmd, "%s takes one instance ID", cmd)
	}
	if err := checkID(cmd, "instance ID", args[0], true); err != nil {
		return "", err
	}
	return norntype.PID(args[0]), nil
}

// checkID checks an ID or name from the command line as the store would
// (persistence.ValidateID: length, UTF-8, no control characters), so that
// a bad one is a usage error before anything is opened or written.
func checkID(cmd, what, v string, required bool) error {
	if v == "" {
		if required {
			return usagef(cmd, "the %s is empty", what)
		}
		return nil
	}
	if err := persistence.ValidateID(what, v); err != nil {
		var ie *persistence.InvalidError
		if errors.As(err, &ie) {
			return usagef(cmd, "%s: %s", what, ie.Reason)
		}
		return usagef(cmd, "%s: %v", what, err)
	}
	return nil
}

func showCommand() *command {
	return &command{
		name: "show", synopsis: "ID", summary: "show one instance: status, input, output, mailbox, subscriptions",
		help: `Exits 3 if there is no such instance.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			return func(args []string) error {
				pid, err := oneID("show", args)
				if err != nil {
					return err
				}
				return e.withClient("show", func(c *client) error {
					info, err := c.sys.Inspect(e.ctx, pid)
					if err != nil {
						return fmt.Errorf("show %s: %w", pid, err)
					}
					timers, err := c.sys.Timers(e.ctx, pid)
					if err != nil {
						return fmt.Errorf("show %s: %w", pid, err)
					}
					children, err := c.sys.List(e.ctx, actor.ListQuery{Parent: string(pid), Limit: maxChildren})
					if err != nil {
						return fmt.Errorf("show %s: %w", pid, err)
					}
					return e.printInstance(info, timers, children)
				})
			}
		},
	}
}

// maxChildren bounds the children show lists; ls --parent pages through
// all of them.
const maxChildren = 1000

type showJSON struct {
	instanceJSON
	MailboxDepth  int                `json:"mailbox_depth"`
	Subscriptions []subscriptionJSON `json:"subscriptions"`
	Timers        []timerJSON        `json:"timers"`
	// Waits is what a waiting instance is parked on.
	Waits []norntype.Wait `json:"waits"`
	// Children are the IDs of the first maxChildren children, newest
	// first; MoreChildren says there are more.
	Children     []string `json:"children"`
	MoreChildren bool     `json:"more_children,omitempty"`
}

type subscriptionJSON struct {
	Channel string `json:"channel"`
	Mode    string `json:"mode"`
}

func (e *env) printInstance(info actor.InstanceInfo, timers []norntype.Timer, children actor.InstancePage) error {
	subs := make([]subscriptionJSON, 0, len(info.Subscriptions))
	var names []string
	for _, s := range info.Subscriptions {
		subs = append(subs, subscriptionJSON{Channel: s.Channel, Mode: string(s.Mode)})
		names = append(names, fmt.Sprintf("%s (%s)", s.Channel, s.Mode))
	}
	kids := make([]string, len(children.Instances))
	for i, c := range children.Instances {
		kids[i] = c.ID
	}
	if e.json {
		ts := make([]timerJSON, len(timers))
		for i, t := range timers {
			ts[i] = toTimerJSON(t)
		}
		return e.writeJSON(showJSON{instanceJSON: toInstanceJSON(info.Instance), MailboxDepth: info.MailboxDepth, Subscriptions: subs,
			Timers: ts, Children: kids, MoreChildren: children.Next != "", Waits: waitsOrEmpty(info.Waits)})
	}
	pending := fmt.Sprintf("%d pending", len(timers))
	if len(timers) > 0 {
		pending += ", next due " + fmtTime(timers[0].Due)
	}
	nkids := strconv.Itoa(len(kids))
	if children.Next != "" {
		nkids += " or more"
	}
	in := info.Instance
	t := newTable(e.stdout)
	for _, kv := range [][2]string{
		{"ID", in.ID},
		{"Workflow", in.Workflow},
		{"Status", string(in.Status)},
		{"Run", strconv.FormatInt(in.Run, 10)},
		{"Restarts", strconv.FormatInt(in.Restarts, 10)},
		{"Parent", in.Parent},
		{"Node", in.Node},
		{"Created", fmtTime(in.CreatedAt)},
		{"Updated", fmtTime(in.UpdatedAt)},
		{"History", fmt.Sprintf("%d events", in.HistoryLen)},
		{"Mailbox", fmt.Sprintf("%d waiting", info.MailboxDepth)},
		{"Channels", strings.Join(names, ", ")},
		{"Timers", pending},
		{"Waits for", describeWaits(info.Waits)},
		{"Children", nkids},
		{"Input", preview(in.Input, 200)},
		{"Output", preview(in.Output, 200)},
		{"Error", in.Error},
		{"Cancel", in.CancelReason},
	} {
		t.row(kv[0]+":", kv[1])
	}
	return t.flush()
}

func waitsOrEmpty(w []norntype.Wait) []norntype.Wait {
	if w == nil {
		return []norntype.Wait{}
	}
	return w
}

// describeWaits says what a parked instance waits for, one wait after
// another.
func describeWaits(waits []norntype.Wait) string {
	var out []string
	for _, w := range waits {
		what, detail := w.Describe()
		s := what
		if detail != "" {
			s += " (" + detail + ")"
		}
		if !w.Due.IsZero() {
			s += ", until " + fmtTime(w.Due)
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

func historyCommand() *command {
	return &command{
		name: "history", synopsis: "ID", summary: "list an instance's history (its current run)",
		help: `Each event is one durable step: activity results, messages received,
timers, children, the input and the end. DETAIL shows the recorded error,
else the recorded value, cut short unless --full is given.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			after := fs.Int64("after", -1, "only events with a sequence number above this")
			limit := fs.Int("limit", 0, "at most this many events (0: all)")
			full := fs.Bool("full", false, "do not cut values short in the table")
			return func(args []string) error {
				pid, err := oneID("history", args)
				if err != nil {
					return err
				}
				if *limit < 0 {
					return usagef("history", "--limit must not be negative")
				}
				return e.withClient("history", func(c *client) error {
					var page []norntype.HistoryEvent
					for from := *after; *limit == 0 || len(page) < *limit; {
						n := historyPageSize
						if *limit > 0 {
							n = min(n, *limit-len(page))
						}
						evs, err := c.sys.HistoryPage(e.ctx, pid, from, n)
						if err != nil {
							return err
						}
						page = append(page, evs...)
						if len(evs) < n {
							break
						}
						from = evs[len(evs)-1].Seq
					}
					return e.printHistory(page, *full)
				})
			}
		},
	}
}

// historyPageSize is how many events history reads at a time.
const historyPageSize = 1000

type eventJSON struct {
	Seq     int64     `json:"seq"`
	Kind    string    `json:"kind"`
	Name    string    `json:"name,omitempty"`
	Ref     string    `json:"ref,omitempty"`
	Payload any       `json:"payload,omitempty"`
	Error   string    `json:"error,omitempty"`
	Digest  string    `json:"digest,omitempty"`
	At      time.Time `json:"at"`
}

func (e *env) printHistory(hist []norntype.HistoryEvent, full bool) error {
	if e.json {
		out := make([]eventJSON, len(hist))
		for i, h := range hist {
			out[i] = eventJSON{Seq: h.Seq, Kind: string(h.Kind), Name: h.Name, Ref: h.Ref, Payload: payload(h.Payload), Error: h.Error,
				Digest: h.Digest, At: h.At.UTC()}
		}
		return e.writeJSON(out)
	}
	width := 60
	if full {
		width = 0
	}
	t := newTable(e.stdout, "SEQ", "KIND", "NAME", "REF", "AT", "DETAIL")
	for _, h := range hist {
		detail := preview(h.Payload, width)
		if h.Error != "" {
			detail = "error: " + h.Error
		}
		t.row(strconv.FormatInt(h.Seq, 10), string(h.Kind), h.Name, h.Ref, fmtTime(h.At), detail)
	}
	return t.flush()
}

func channelsCommand() *command {
	return &command{
		name: "channels", summary: "list channels: mode, subscribers, waiting messages",
		help: `OLDEST is when the oldest waiting message was published: on a queue that
no competing consumer drains it shows how soon the nodes' queue retention
starts deleting messages.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			return func(args []string) error {
				if len(args) != 0 {
					return usagef("channels", "channels takes no arguments")
				}
				return e.withClient("channels", func(c *client) error {
					stats, err := c.sys.ChannelStats(e.ctx)
					if err != nil {
						return fmt.Errorf("channel stats: %w", err)
					}
					if e.json {
						type channelJSON struct {
							Channel     string     `json:"channel"`
							Mode        string     `json:"mode,omitempty"`
							Subscribers int        `json:"subscribers"`
							Waiting     int        `json:"waiting"`
							Oldest      *time.Time `json:"oldest,omitempty"`
						}
						out := make([]channelJSON, len(stats))
						for i, s := range stats {
							out[i] = channelJSON{Channel: s.Channel, Mode: string(s.Mode), Subscribers: s.Subscribers, Waiting: s.Waiting, Oldest: optTime(s.Oldest)}
						}
						return e.writeJSON(out)
					}
					t := newTable(e.stdout, "CHANNEL", "MODE", "SUBSCRIBERS", "WAITING", "OLDEST")
					for _, s := range stats {
						t.row(s.Channel, string(s.Mode), strconv.Itoa(s.Subscribers), strconv.Itoa(s.Waiting), fmtTime(s.Oldest))
					}
					return t.flush()
				})
			}
		},
	}
}
