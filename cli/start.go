package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/nornlabs/norn/actor"
)

type startedJSON struct {
	ID       string `json:"id"`
	Workflow string `json:"workflow"`
	// Existed: an instance with the ID was there already; nothing started.
	Existed bool `json:"existed"`
}

func startCommand() *command {
	return &command{
		name: "start", synopsis: "WORKFLOW JSON [--id ID]", summary: "start an instance of a workflow of this build",
		help: `JSON is the workflow's input as JSON text, @FILE or - (stdin); it must
decode into the workflow's input type (unknown fields are refused). The
command returns once the instance is durable; the nodes run it.

With --id the start is idempotent: if an instance with that ID exists, it
is reported and nothing new is started (exit 0); if the ID belongs to
another workflow the command fails. Without --id a fresh ID is made.

Like replay, start needs a build with your workflows:
func main() { os.Exit(cli.Main(os.Args[1:], orders.OrderFlow)) }`,
		available: func(e *env) (bool, string) {
			if len(e.opts.Workflows) == 0 {
				return false, "needs a build with your workflows: see 'help replay'"
			}
			return true, ""
		},
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			id := fs.String("id", "", "the instance's ID; an existing instance with this ID is reported, not started again")
			return func(args []string) error {
				if len(args) != 2 {
					return usagef("start", "start takes WORKFLOW JSON")
				}
				if len(e.opts.Workflows) == 0 {
					return usagef("start", "this build of %s has no workflow code to start; build your own command with cli.Main and your workflows", e.name)
				}
				def, err := e.workflow("start", args[0])
				if err != nil {
					return err
				}
				if err := checkID("start", "--id", *id, false); err != nil {
					return err
				}
				input, err := e.readJSON("start", "input", args[1])
				if err != nil {
					return err
				}
				return e.withClient("start", func(c *client) error {
					r, err := actor.SpawnJSON(e.ctx, c.sys, def, input, *id)
					var te *json.UnmarshalTypeError
					switch {
					case errors.As(err, &te):
						return usagef("start", "the input does not fit workflow %s: %v", def.Name(), jsonPosError(input, te.Offset, te))
					case errors.Is(err, actor.ErrInvalidInput):
						return usagef("start", "%s", errorText(err))
					case err != nil:
						return fmt.Errorf("start %s: %w", def.Name(), err)
					}
					out := startedJSON{ID: string(r.PID), Workflow: def.Name(), Existed: r.Existed}
					if e.json {
						return e.writeJSON(out)
					}
					if r.Existed {
						fmt.Fprintf(e.stdout, "not started: instance %s of %s exists already\n", out.ID, out.Workflow)
						return nil
					}
					fmt.Fprintf(e.stdout, "started %s (%s)\n", out.ID, out.Workflow)
					return nil
				})
			}
		},
	}
}

// workflow is the definition of this build named name.
func (e *env) workflow(cmd, name string) (actor.Definition, error) {
	names := make([]string, 0, len(e.opts.Workflows))
	for _, d := range e.opts.Workflows {
		if d.Name() == name {
			return d, nil
		}
		names = append(names, d.Name())
	}
	slices.Sort(names)
	return nil, usagef(cmd, "unknown workflow %q (this build has %s)", name, strings.Join(names, ", "))
}
