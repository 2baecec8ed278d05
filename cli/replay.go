package cli

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntype"
)

type replayJSON struct {
	ID       string `json:"id"`
	Workflow string `json:"workflow"`
	// Result is ok, diverged (the code no longer replays the history),
	// skipped (this build lacks the workflow) or error (reading failed).
	Result string `json:"result"`
	Detail string `json:"detail,omitempty"`
	// Seq is the history event where a diverged replay parted.
	Seq *int64 `json:"seq,omitempty"`

	notFound bool
}

func replayCommand() *command {
	return &command{
		name: "replay", synopsis: "[ID... | FILTERS]", summary: "check stored histories against this build's workflow code",
		help: `Replays each instance's stored history through the workflow code of this
program, without side effects (no activity runs, nothing is written), and
reports the first divergence: the check that a deploy will not break the
instances that are running. With no IDs, the instances the filters select
(as for ls; --status defaults to running, waiting, compensating).

The stock norn binary holds no workflow code, so there replay is not
available. Build a command of your own that includes your workflows:

	package main

	import (
		"os"

		"github.com/nornlabs/norn/cli"
	)

	func main() { os.Exit(cli.Main(os.Args[1:], orders.OrderFlow, orders.ShipFlow)) }

It has every norn command, and replay. Instances of workflows it does
not have are reported as skipped. Exits 1 if some instance diverged or
could not be read.`,
		available: func(e *env) (bool, string) {
			if len(e.opts.Workflows) == 0 {
				return false, "needs a build with your workflows: see 'help replay'"
			}
			return true, ""
		},
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			lf := addListFlags(fs)
			return func(args []string) error {
				if len(e.opts.Workflows) == 0 {
					return usagef("replay", "this build of %s has no workflow code to replay against; build your own command with cli.Main and your workflows", e.name)
				}
				if len(args) > 0 && lf.any() {
					return usagef("replay", "give instance IDs or filters, not both")
				}
				for _, id := range args {
					if err := checkID("replay", "instance ID", id, true); err != nil {
						return err
					}
				}
				q, err := lf.query("replay", time.Now())
				if err != nil {
					return err
				}
				if len(q.Statuses) == 0 {
					q.Statuses = []norntype.Status{norntype.StatusRunning, norntype.StatusWaiting, norntype.StatusCompensating}
				}
				defs := map[string]actor.Definition{}
				for _, d := range e.opts.Workflows {
					defs[d.Name()] = d
				}
				return e.withClient("replay", func(c *client) error {
					ids := args
					if len(ids) == 0 {
						if ids, err = e.selectIDs(c, q); err != nil {
							return err
						}
					}
					bar := e.progress("replaying", len(ids))
					results := make([]replayJSON, 0, len(ids))
					bad, notFound := 0, 0
					for _, id := range ids {
						if e.ctx.Err() != nil {
							bar.finish()
							return e.ctx.Err()
						}
						r := e.replayOne(c, defs, id)
						switch {
						case r.notFound:
							notFound++
						case r.Result == "diverged", r.Result == "error":
							bad++
						}
						results = append(results, r)
						bar.step()
					}
					bar.finish()
					if err := e.printReplay(results); err != nil {
						return err
					}
					switch {
					case bad > 0:
						return &failedError{code: ExitFailure, msg: fmt.Sprintf("%d of %d instances do not replay", bad, len(ids))}
					case notFound > 0:
						return &failedError{code: ExitNotFound, msg: fmt.Sprintf("%d of %d instances not found", notFound, len(ids))}
					}
					return nil
				})
			}
		},
	}
}

func (e *env) replayOne(c *client, defs map[string]actor.Definition, id string) replayJSON {
	r := replayJSON{ID: id}
	info, err := c.sys.Inspect(e.ctx, norntype.PID(id))
	if err != nil {
		r.Result, r.Detail, r.notFound = "error", errorText(err), errors.Is(err, actor.ErrNotFound)
		return r
	}
	r.Workflow = info.Workflow
	def, ok := defs[info.Workflow]
	if !ok {
		r.Result, r.Detail = "skipped", "workflow not in this build"
		return r
	}
	err = actor.Replay(e.ctx, def, info.History, actor.ReplayCodec(e.opts.Codec), actor.ReplayErrors(e.opts.Errors...),
		actor.ReplayMessages(e.opts.Messages...))
	var nd *actor.NonDeterminismError
	switch {
	case err == nil:
		r.Result = "ok"
	case errors.As(err, &nd):
		r.Result, r.Detail, r.Seq = "diverged", errorText(err), &nd.Seq
	default:
		r.Result, r.Detail = "diverged", errorText(err)
	}
	return r
}

func (e *env) printReplay(results []replayJSON) error {
	if e.json {
		return e.writeJSON(results)
	}
	t := newTable(e.stdout, "ID", "WORKFLOW", "RESULT", "DETAIL")
	for _, r := range results {
		t.row(r.ID, r.Workflow, r.Result, r.Detail)
	}
	return t.flush()
}
