package cli

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntype"
	"github.com/nornlabs/norn/persistence"
)

// typedJSON is a message given as JSON text and stored under a chosen type
// name, so that a workflow's Receive[T] for the type of that name takes it
// (and one for another type leaves it).
type typedJSON struct {
	data json.RawMessage
	typ  string
}

func (m typedJSON) MarshalJSON() ([]byte, error) { return m.data, nil }
func (m typedJSON) MessageType() string          { return m.typ }

// message is what send and publish put in the store: the JSON as given,
// without a type name (a Receive of any type takes it), or with --type.
func message(data []byte, typ string) any {
	if typ == "" {
		return data
	}
	return typedJSON{data: data, typ: typ}
}

// readJSON reads a JSON argument (what: "message", "input"): JSON text,
// @FILE, or - for stdin.
func (e *env) readJSON(cmd, what, arg string) ([]byte, error) {
	var b []byte
	switch {
	case arg == "-":
		var err error
		if b, err = io.ReadAll(e.stdin); err != nil {
			return nil, fmt.Errorf("read %s from stdin: %w", what, err)
		}
	case strings.HasPrefix(arg, "@"):
		var err error
		if b, err = os.ReadFile(arg[1:]); err != nil {
			return nil, usagef(cmd, "read %s: %v", what, err)
		}
	default:
		b = []byte(arg)
	}
	if err := checkJSON(b); err != nil {
		return nil, usagef(cmd, "the %s is not valid JSON: %v", what, err)
	}
	return b, nil
}

// checkJSON reports where b stops being one JSON value: the decoder's
// reason with the line, column and byte offset, so that a long message or
// file can be fixed.
func checkJSON(b []byte) error {
	if json.Valid(b) {
		return nil
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return errors.New("it is empty")
	}
	var v any
	err := json.Unmarshal(b, &v)
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return fmt.Errorf("%w (%d bytes)", err, len(b))
	}
	off := se.Offset
	if strings.HasPrefix(se.Error(), "unexpected end") {
		off = int64(len(b)) + 1
	}
	return jsonPosError(b, off, se)
}

// jsonPosError is err with the position of byte offset off of b (the
// decoders' offsets count the bytes read, the offending one included).
func jsonPosError(b []byte, off int64, err error) error {
	at := int(min(max(off, 1), int64(len(b)+1))) - 1
	line := 1 + bytes.Count(b[:min(at, len(b))], []byte("\n"))
	col := at + 1
	if i := bytes.LastIndexByte(b[:min(at, len(b))], '\n'); i >= 0 {
		col = at - i
	}
	if at >= len(b) {
		return fmt.Errorf("%w (at the end: line %d, column %d, byte offset %d)", err, line, col, len(b))
	}
	return fmt.Errorf("%w (line %d, column %d, byte offset %d)", err, line, col, at)
}

// messageFlags are send's and publish's.
type messageFlags struct {
	typ, id string
	meta    kvFlag
}

func addMessageFlags(fs *flag.FlagSet, meta bool) *messageFlags {
	f := &messageFlags{}
	fs.StringVar(&f.typ, "type", "", "the message's type name, as a workflow's Receive[T] matches it: T's MessageType(), else its Go name (orders.Approval); default none, which a Receive of any type takes")
	fs.StringVar(&f.id, "id", "", "message ID; a retry with the same ID delivers nothing more (default: a fresh random ID)")
	if meta {
		fs.Var(&f.meta, "meta", "message metadata `key=value` (repeatable)")
	}
	return f
}

// check checks --id, --type and --meta as the store will.
func (f *messageFlags) check(cmd string) error {
	if err := checkID(cmd, "--id", f.id, false); err != nil {
		return err
	}
	if err := persistence.ValidateText("--type", f.typ, persistence.MaxNameLen); err != nil {
		return usagef(cmd, "%s", errorText(err))
	}
	for k, v := range f.meta {
		err := firstErr(persistence.ValidateText("--meta key", k, persistence.MaxMetadataKeyLen),
			persistence.ValidateText("--meta "+k, v, persistence.MaxMetadataValueLen))
		if err != nil {
			return usagef(cmd, "%s", errorText(err))
		}
	}
	return nil
}

// firstErr is the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (f *messageFlags) messageID() string {
	if f.id != "" {
		return f.id
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "cli-" + hex.EncodeToString(b[:])
}

type sentJSON struct {
	MessageID string `json:"message_id"`
	Instance  string `json:"instance,omitempty"`
	Channel   string `json:"channel,omitempty"`
	Duplicate bool   `json:"duplicate"`
	// Listeners and Queued: see actor.Sent (publish only).
	Listeners *int `json:"listeners,omitempty"`
	Queued    bool `json:"queued,omitempty"`
}

func (e *env) printSent(s sentJSON) error {
	if e.json {
		return e.writeJSON(s)
	}
	to := s.Instance
	switch {
	case s.Instance != "" && s.Channel != "":
		to = s.Instance + " on channel " + s.Channel
	case s.Instance == "":
		to = "channel " + s.Channel
	}
	if s.Duplicate {
		fmt.Fprintf(e.stdout, "not sent: message %s was delivered to %s before\n", s.MessageID, to)
		return nil
	}
	fmt.Fprintf(e.stdout, "sent message %s to %s\n", s.MessageID, to)
	return nil
}

func sendCommand() *command {
	return &command{
		name: "send", synopsis: "ID [CHANNEL] JSON", summary: "send a message to an instance (by PID, or direct on a channel)",
		help: `JSON is the message as JSON text, @FILE to read it from a file, or - to
read it from stdin. The command returns once the message is durable.
It warns when the instance is parked in receives that do not take the
message (another type, channel or sender): it then waits in the mailbox
for a later receive. Exits 3 if there is no such instance, 1 if it has
ended.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			mf := addMessageFlags(fs, false)
			return func(args []string) error {
				var pid, channel, arg string
				switch len(args) {
				case 2:
					pid, arg = args[0], args[1]
				case 3:
					pid, channel, arg = args[0], args[1], args[2]
				default:
					return usagef("send", "send takes ID [CHANNEL] JSON")
				}
				if pid == "" {
					return usagef("send", "send needs an instance ID")
				}
				if err := firstErr(checkID("send", "instance ID", pid, true), checkID("send", "channel", channel, false),
					mf.check("send")); err != nil {
					return err
				}
				data, err := e.readJSON("send", "message", arg)
				if err != nil {
					return err
				}
				return e.withClient("send", func(c *client) error {
					s := sentJSON{MessageID: mf.messageID(), Instance: pid, Channel: channel}
					r, err := c.sys.Deliver(e.ctx, actor.Outgoing{Channel: channel, Target: norntype.PID(pid),
						Message: message(data, mf.typ), ID: s.MessageID})
					if err != nil {
						return fmt.Errorf("send to %s: %w", pid, err)
					}
					s.Duplicate = r.Duplicate
					if inst, err := c.sys.Instance(e.ctx, norntype.PID(pid)); err == nil && !r.Duplicate {
						warnNotAwaited(e, inst, mf.typ, channel)
					}
					return e.printSent(s)
				})
			}
		},
	}
}

// warnNotAwaited warns when no receive inst is parked in takes a message
// of type typ on channel from outside.
func warnNotAwaited(e *env, inst norntype.Instance, typ, channel string) {
	if inst.Status != norntype.StatusWaiting || len(inst.Waits) == 0 {
		return
	}
	for _, w := range inst.Waits {
		if w.MayTake(typ, channel, "") {
			return
		}
	}
	what := typ
	if what == "" {
		what = "without a type"
	} else {
		what = "of type " + what
	}
	fmt.Fprintf(e.stderr, "warning: %s waits for %s; no receive it waits in takes this message (%s): it stays in the mailbox\n",
		inst.ID, describeWaits(inst.Waits), what)
}

func publishCommand() *command {
	return &command{
		name: "publish", synopsis: "CHANNEL JSON", summary: "publish a message on a channel",
		help: `JSON is the message as JSON text, @FILE or - (stdin). Broadcast subscribers
get a copy each; on a channel without them the message waits in the
channel's queue for a competing consumer.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			mf := addMessageFlags(fs, true)
			return func(args []string) error {
				if len(args) != 2 {
					return usagef("publish", "publish takes CHANNEL JSON")
				}
				if args[0] == "" {
					return usagef("publish", "publish needs a channel name")
				}
				if err := firstErr(checkID("publish", "channel", args[0], true), mf.check("publish")); err != nil {
					return err
				}
				data, err := e.readJSON("publish", "message", args[1])
				if err != nil {
					return err
				}
				return e.withClient("publish", func(c *client) error {
					s := sentJSON{MessageID: mf.messageID(), Channel: args[0]}
					r, err := c.sys.Deliver(e.ctx, actor.Outgoing{Channel: args[0], Message: message(data, mf.typ),
						Metadata: mf.meta, ID: s.MessageID})
					if err != nil {
						return fmt.Errorf("publish on %s: %w", args[0], err)
					}
					s.Duplicate, s.Queued = r.Duplicate, r.Queued
					if !r.Duplicate {
						s.Listeners = &r.Listeners
					}
					if err := e.printSent(s); err != nil {
						return err
					}
					if !r.Duplicate && r.Listeners == 0 {
						fmt.Fprintf(e.stderr, "warning: nobody subscribes to %s: the message waits in its queue for a competing consumer (for at most the nodes' Config.QueueRetention, 7 days by default)\n", args[0])
					}
					return nil
				})
			}
		},
	}
}
