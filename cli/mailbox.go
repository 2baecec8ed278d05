package cli

import (
	"flag"
	"time"
)

type messageJSON struct {
	Seq         int64             `json:"seq"`
	ID          string            `json:"id"`
	Channel     string            `json:"channel,omitempty"`
	Sender      string            `json:"sender,omitempty"`
	Type        string            `json:"type,omitempty"`
	Payload     any               `json:"payload,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	PublishedAt *time.Time        `json:"published_at,omitempty"`
	Queued      bool              `json:"queued"`
	// Unmatched: the instance is parked and no receive it waits in takes
	// the message.
	Unmatched bool `json:"unmatched"`
}

func mailboxCommand() *command {
	return &command{
		name: "mailbox", synopsis: "ID", summary: "list the messages waiting for an instance, in arrival order",
		help: `Messages sent to the instance, its copies of broadcasts, and the queues of
the channels it consumes competitively (QUEUED: yes; another consumer may
take those first). It receives them in this order, skipping those its
pending receive does not match. TAKEN says whether a receive the instance
is parked in takes the message: "no" when its type, channel or sender is
refused, or the instance looked at it and left it (a message without a
type that does not decode into the awaited type, or one a Match filter
refused); "maybe" while it has not looked yet. Exits 3 if there is no such
instance.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			limit := fs.Int("limit", 100, "at most this many messages (1 to 1000)")
			full := fs.Bool("full", false, "do not cut payloads short in the table")
			return func(args []string) error {
				pid, err := oneID("mailbox", args)
				if err != nil {
					return err
				}
				if *limit <= 0 || *limit > 1000 {
					return usagef("mailbox", "--limit must be between 1 and 1000")
				}
				return e.withClient("mailbox", func(c *client) error {
					msgs, err := c.sys.Mailbox(e.ctx, pid, *limit)
					if err != nil {
						return err
					}
					if e.json {
						out := make([]messageJSON, len(msgs))
						for i, m := range msgs {
							out[i] = messageJSON{Seq: m.Seq, ID: m.ID, Channel: m.Channel, Sender: m.Sender, Type: m.Type,
								Payload: payload(m.Payload), Metadata: m.Metadata, PublishedAt: optTime(m.PublishedAt), Queued: m.Queued,
								Unmatched: m.Unmatched}
						}
						return e.writeJSON(out)
					}
					width := 60
					if *full {
						width = 0
					}
					t := newTable(e.stdout, "ID", "CHANNEL", "SENDER", "TYPE", "QUEUED", "TAKEN", "PUBLISHED", "PAYLOAD")
					for _, m := range msgs {
						queued, taken := "no", "maybe"
						if m.Queued {
							queued = "yes"
						}
						if m.Unmatched {
							taken = "no"
						}
						t.row(m.ID, m.Channel, m.Sender, m.Type, queued, taken, fmtTime(m.PublishedAt), preview(m.Payload, width))
					}
					return t.flush()
				})
			}
		},
	}
}
