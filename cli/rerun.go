package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntype"
	"github.com/nornlabs/norn/persistence"
)

// An operator's acts on single instances: end one now, or give an ended one
// a new run (see actor.System.Terminate, Retry, Restart, Reset).

type actResult struct {
	ID    string `json:"id"`
	Done  bool   `json:"done"`
	Error string `json:"error,omitempty"`
}

// actOn runs act on each ID and reports each outcome. Exits 1 if some
// failed, else 3 if some ID does not exist.
func (e *env) actOn(cmd, verb string, ids []string, act func(ctx context.Context, sys *actor.System, pid norntype.PID) error) error {
	for _, id := range ids {
		if err := checkID(cmd, "instance ID", id, true); err != nil {
			return err
		}
	}
	return e.withClient(cmd, func(c *client) error {
		res := make([]actResult, 0, len(ids))
		failed, missing, invalid := 0, 0, 0
		for _, id := range ids {
			err := act(e.ctx, c.sys, norntype.PID(id))
			r := actResult{ID: id, Done: err == nil}
			switch {
			case err == nil:
			case errors.Is(err, actor.ErrNotFound):
				missing++
				r.Error = "not found"
			case errors.Is(err, actor.ErrInvalidInput):
				invalid++
				r.Error = errorText(err)
			default:
				failed++
				r.Error = errorText(err)
			}
			res = append(res, r)
		}
		if e.json {
			if err := e.writeJSON(res); err != nil {
				return err
			}
		} else {
			for _, r := range res {
				if r.Done {
					fmt.Fprintf(e.stdout, "%s: %s\n", r.ID, verb)
				} else {
					fmt.Fprintf(e.stderr, "%s: %s\n", r.ID, r.Error)
				}
			}
		}
		switch {
		case failed > 0:
			return &failedError{code: ExitFailure, msg: fmt.Sprintf("%d of %d not %s", failed+missing+invalid, len(ids), verb)}
		case invalid > 0:
			return &failedError{code: ExitUsage, msg: fmt.Sprintf("%d of %d not %s: nothing done", invalid, len(ids), verb)}
		case missing > 0:
			return &failedError{code: ExitNotFound, msg: fmt.Sprintf("%d of %d instances not found", missing, len(ids))}
		}
		return nil
	})
}

func terminateCommand() *command {
	return &command{
		name: "terminate", synopsis: "[--reason R] ID...", summary: "end instances now, without compensations",
		help: `Ends each instance at once, as cancelled with "terminated: REASON":
no compensation runs, and the node running it stops its activation. Its
parent and monitors hear of the end; its children go on. Use cancel to let
the workflow end itself (and compensate).

Exits 1 if some instance had already ended or could not be terminated,
else 3 if some ID does not exist.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			reason := fs.String("reason", "norn terminate", "the reason recorded with the end")
			return func(args []string) error {
				if len(args) == 0 {
					return usagef("terminate", "give the IDs of the instances to terminate")
				}
				if err := persistence.ValidateReason(*reason); err != nil {
					return usagef("terminate", "--reason: %s", errorText(err))
				}
				return e.actOn("terminate", "terminated", args, func(ctx context.Context, sys *actor.System, pid norntype.PID) error {
					return sys.Terminate(ctx, pid, *reason)
				})
			}
		},
	}
}

// idsCommand is a command that acts on each instance ID it is given.
func idsCommand(name, summary, help, verb string, act func(ctx context.Context, sys *actor.System, pid norntype.PID) error) *command {
	return &command{
		name: name, synopsis: "ID...", summary: summary, help: help,
		setup: func(e *env, _ *flag.FlagSet) func([]string) error {
			return func(args []string) error {
				if len(args) == 0 {
					return usagef(name, "give the IDs of the instances to %s", name)
				}
				return e.actOn(name, verb, args, act)
			}
		},
	}
}

func retryCommand() *command {
	return idsCommand("retry", "resume failed instances from their last recorded step",
		`Gives each failed instance a new run, same ID, that replays its history
but the failure and carries on live: the work recorded before is not done
again; an activity whose retries ran out runs again with its retry policy
afresh. Deploy the fix first: the new run uses the code of the nodes.

Exits 1 if some instance is live or did not fail, else 3 if some ID does
not exist.`, "retried", func(ctx context.Context, sys *actor.System, pid norntype.PID) error {
			return sys.Retry(ctx, pid)
		})
}

func restartCommand() *command {
	return idsCommand("restart", "run ended instances again from their start, same input",
		`Gives each ended instance (completed, failed or cancelled) a new run, same
ID and input, from its start: everything runs again. Terminate a live
instance first.

Exits 1 if some instance is live, else 3 if some ID does not exist.`, "restarted", func(ctx context.Context, sys *actor.System, pid norntype.PID) error {
			return sys.Restart(ctx, pid)
		})
}

func resetCommand() *command {
	return &command{
		name: "reset", synopsis: "ID SEQ", summary: "run an ended instance again from a point of its history",
		help: `Gives the ended instance a new run, same ID, that keeps its history up to
(not including) event SEQ, as 'norn history' numbers them, and carries on
live from there: what was recorded before SEQ is not done again, what came
after runs anew. Timers and subscriptions the kept events hold come back;
messages received after SEQ are not delivered again.

Exits 1 if the instance is live, 2 if SEQ is out of its history's range,
3 if it does not exist.`,
		setup: func(e *env, _ *flag.FlagSet) func([]string) error {
			return func(args []string) error {
				if len(args) != 2 {
					return usagef("reset", "give the instance ID and the SEQ of the first event to drop")
				}
				keep, err := strconv.ParseInt(args[1], 10, 64)
				if err != nil || keep < 1 {
					return usagef("reset", "SEQ %q: want a positive event number (0 is the run's input, which is always kept)", args[1])
				}
				return e.actOn("reset", "reset", args[:1], func(ctx context.Context, sys *actor.System, pid norntype.PID) error {
					return sys.Reset(ctx, pid, keep)
				})
			}
		},
	}
}
