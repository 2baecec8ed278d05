package cli

import (
	"flag"
	"time"

	"github.com/nornlabs/norn/norntype"
)

func timersCommand() *command {
	return &command{
		name: "timers", synopsis: "ID", summary: "list an instance's pending timers, earliest first",
		help: `KIND is sleep (Sleep, SleepUntil, Timer), receive (a receive's timeout) or
retry (an activity waiting out its back-off); NAME is the call it belongs
to, as history names it. A timer fires at or after DUE, on the node that
owns the instance. Exits 3 if there is no such instance.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			return func(args []string) error {
				pid, err := oneID("timers", args)
				if err != nil {
					return err
				}
				return e.withClient("timers", func(c *client) error {
					ts, err := c.sys.Timers(e.ctx, pid)
					if err != nil {
						return err
					}
					return e.printTimers(ts)
				})
			}
		},
	}
}

type timerJSON struct {
	ID   string    `json:"id"`
	Kind string    `json:"kind"`
	Name string    `json:"name"`
	Due  time.Time `json:"due"`
}

func toTimerJSON(t norntype.Timer) timerJSON {
	return timerJSON{ID: t.ID, Kind: t.Kind, Name: t.Name, Due: t.Due.UTC()}
}

func (e *env) printTimers(ts []norntype.Timer) error {
	if e.json {
		out := make([]timerJSON, len(ts))
		for i, t := range ts {
			out[i] = toTimerJSON(t)
		}
		return e.writeJSON(out)
	}
	t := newTable(e.stdout, "ID", "KIND", "NAME", "DUE")
	for _, tm := range ts {
		t.row(tm.ID, tm.Kind, tm.Name, fmtTime(tm.Due))
	}
	return t.flush()
}
