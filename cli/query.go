package cli

import (
	"encoding/json"
	"flag"
	"fmt"

	"github.com/nornlabs/norn/actor"
)

func queryCommand() *command {
	return &command{
		name: "query", synopsis: "ID NAME [JSON]", summary: "ask an instance a query its workflow handles (actor.HandleQuery)",
		help: `Answers the query NAME of the instance with the argument JSON (JSON text,
@FILE, or - for stdin; none for a query without one) and prints the answer
as JSON. The command replays the instance's stored history through this
program's workflow code, without side effects (nothing runs, nothing is
written), and runs the query handler there: the answer is the instance's
state as of its last committed step, which is what its live activation
holds whenever it waits.

The stock norn binary holds no workflow code, so there query is not
available. Build a command of your own that includes your workflows
(see 'help replay'); or call System.Query in your program, which asks a
live activation on that node directly.

Exits 2 if the instance has no handler of that name or the argument does
not fit it, 3 if there is no such instance, 1 if the handler failed.`,
		available: func(e *env) (bool, string) {
			if len(e.opts.Workflows) == 0 {
				return false, "needs a build with your workflows: see 'help query'"
			}
			return true, ""
		},
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			return func(args []string) error {
				if len(e.opts.Workflows) == 0 {
					return usagef("query", "this build of %s has no workflow code to answer queries with; build your own command with cli.Main and your workflows", e.name)
				}
				if len(args) < 2 || len(args) > 3 {
					return usagef("query", "query takes an instance ID, a query name and an optional JSON argument")
				}
				if err := checkID("query", "instance ID", args[0], true); err != nil {
					return err
				}
				if err := checkID("query", "query name", args[1], true); err != nil {
					return err
				}
				var arg []byte
				if len(args) == 3 {
					var err error
					if arg, err = e.readJSON("query", "argument", args[2]); err != nil {
						return err
					}
				}
				return e.withClient("query", func(c *client) error {
					info, err := c.sys.Inspect(e.ctx, actor.PID(args[0]))
					if err != nil {
						return err
					}
					var def actor.Definition
					for _, d := range e.opts.Workflows {
						if d.Name() == info.Workflow {
							def = d
						}
					}
					if def == nil {
						return &failedError{code: ExitFailure, msg: fmt.Sprintf("%s runs workflow %q, which this build does not have", args[0], info.Workflow)}
					}
					out, err := actor.QueryHistory(e.ctx, def, actor.PID(args[0]), info.History, args[1], arg,
						actor.ReplayCodec(e.opts.Codec), actor.ReplayErrors(e.opts.Errors...), actor.ReplayMessages(e.opts.Messages...))
					if err != nil {
						return err
					}
					return e.writeJSON(json.RawMessage(out))
				})
			}
		},
	}
}
