package cli

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntype"
	"github.com/nornlabs/norn/persistence"
)

// listPageSize is how many instances bulk operations read per page (the
// most List gives).
const listPageSize = 1000

// selectIDs is the IDs of every instance q selects, all pages, read before
// a bulk command acts on any: acting changes what q would select.
func (e *env) selectIDs(c *client, q actor.ListQuery) ([]string, error) {
	q.Limit = listPageSize
	var ids []string
	for {
		p, err := c.sys.List(e.ctx, q)
		if err != nil {
			return nil, err
		}
		for _, in := range p.Instances {
			ids = append(ids, in.ID)
		}
		if p.Next == "" {
			return ids, nil
		}
		q.PageToken = p.Next
	}
}

type cancelFailure struct {
	ID    string `json:"id"`
	Error string `json:"error"`
}

type cancelResult struct {
	DryRun    bool            `json:"dry_run,omitempty"`
	Selected  []string        `json:"selected,omitempty"` // with --dry-run
	Cancelled []string        `json:"cancelled"`
	Ended     []string        `json:"ended"`
	NotFound  []string        `json:"not_found"`
	Failed    []cancelFailure `json:"failed"`
}

func cancelCommand() *command {
	return &command{
		name: "cancel", synopsis: "[--reason R] ID... | [--reason R] [--dry-run] FILTERS", summary: "cancel instances, by ID or by filters",
		help: `Records a cancel request for each instance; it ends as cancelled when its
node acts on it (its pending receive or sleep returns the cancel).

With filters instead of IDs (--workflow, --status, ... as for ls) every
matching instance is cancelled; --status defaults to the live ones
(running, waiting, compensating). --dry-run lists them and cancels nothing.
A bar shows progress on a terminal; otherwise the counts are printed at
the end.

Instances that had already ended are counted as such, not as failures.
Exits 1 if some cancel failed, else 3 if some ID does not exist, else 0.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			lf := addListFlags(fs)
			reason := fs.String("reason", "cancelled with norn cancel", "the reason recorded with the cancel")
			dry := fs.Bool("dry-run", false, "list what would be cancelled and cancel nothing (filters only)")
			return func(args []string) error {
				switch {
				case len(args) > 0 && lf.any():
					return usagef("cancel", "give instance IDs or filters, not both")
				case len(args) == 0 && !lf.any():
					return usagef("cancel", "give instance IDs, or filters (--workflow, --status, ...) to cancel in bulk")
				case len(args) > 0 && *dry:
					return usagef("cancel", "--dry-run goes with filters")
				}
				for _, id := range args {
					if err := checkID("cancel", "instance ID", id, true); err != nil {
						return err
					}
				}
				if err := persistence.ValidateReason(*reason); err != nil {
					return usagef("cancel", "--reason: %s", errorText(err))
				}
				q, err := lf.query("cancel", time.Now())
				if err != nil {
					return err
				}
				if len(q.Statuses) == 0 {
					q.Statuses = []norntype.Status{norntype.StatusRunning, norntype.StatusWaiting, norntype.StatusCompensating}
				}
				return e.withClient("cancel", func(c *client) error {
					ids := args
					if len(ids) == 0 {
						if ids, err = e.selectIDs(c, q); err != nil {
							return err
						}
					}
					if *dry {
						return e.printCancel(cancelResult{DryRun: true, Selected: ids})
					}
					res := cancelResult{Cancelled: []string{}, Ended: []string{}, NotFound: []string{}, Failed: []cancelFailure{}}
					bar := e.progress("cancelling", len(ids))
					for _, id := range ids {
						if e.ctx.Err() != nil {
							bar.finish()
							return e.ctx.Err()
						}
						err := c.sys.Cancel(e.ctx, norntype.PID(id), *reason)
						switch {
						case err == nil:
							res.Cancelled = append(res.Cancelled, id)
						case errors.Is(err, actor.ErrInstanceDone):
							res.Ended = append(res.Ended, id)
						case errors.Is(err, actor.ErrNotFound):
							res.NotFound = append(res.NotFound, id)
						default:
							res.Failed = append(res.Failed, cancelFailure{ID: id, Error: errorText(err)})
						}
						bar.step()
					}
					bar.finish()
					if err := e.printCancel(res); err != nil {
						return err
					}
					switch {
					case len(res.Failed) > 0:
						return &failedError{code: ExitFailure, msg: fmt.Sprintf("%d of %d cancels failed", len(res.Failed), len(ids))}
					case len(res.NotFound) > 0:
						return &failedError{code: ExitNotFound, msg: fmt.Sprintf("%d of %d instances not found", len(res.NotFound), len(ids))}
					}
					return nil
				})
			}
		},
	}
}

func (e *env) printCancel(r cancelResult) error {
	if e.json {
		return e.writeJSON(r)
	}
	if r.DryRun {
		for _, id := range r.Selected {
			fmt.Fprintln(e.stdout, id)
		}
		fmt.Fprintf(e.stderr, "would cancel %d instances\n", len(r.Selected))
		return nil
	}
	for _, id := range r.NotFound {
		fmt.Fprintf(e.stderr, "%s: not found\n", id)
	}
	for _, f := range r.Failed {
		fmt.Fprintf(e.stderr, "%s: %s\n", f.ID, f.Error)
	}
	fmt.Fprintf(e.stdout, "cancelled %d, already ended %d, not found %d, failed %d\n",
		len(r.Cancelled), len(r.Ended), len(r.NotFound), len(r.Failed))
	return nil
}
