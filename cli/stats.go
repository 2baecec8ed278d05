package cli

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/nornlabs/norn/norntype"
)

func statsCommand() *command {
	return &command{
		name: "stats", summary: "count instances by workflow and status",
		help: `Prints one row per workflow with its instances in each status, ended ones
included, and a TOTAL row; --json prints the counts as a list of
{workflow, status, count}. The store counts from an index, visiting one
entry per instance: on a store of millions of instances it takes seconds.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			return func(args []string) error {
				if len(args) != 0 {
					return usagef("stats", "stats takes no arguments")
				}
				return e.withClient("stats", func(c *client) error {
					counts, err := c.sys.CountInstances(e.ctx)
					if err != nil {
						return fmt.Errorf("stats: %w", err)
					}
					return e.printCounts(counts)
				})
			}
		},
	}
}

type countJSON struct {
	Workflow string `json:"workflow"`
	Status   string `json:"status"`
	Count    int    `json:"count"`
}

// printCounts prints counts (ordered by workflow) as a workflow × status
// table, with a column per status and a total row and column.
func (e *env) printCounts(counts []norntype.InstanceCount) error {
	if e.json {
		out := make([]countJSON, len(counts))
		for i, c := range counts {
			out[i] = countJSON{Workflow: c.Workflow, Status: string(c.Status), Count: c.Count}
		}
		return e.writeJSON(out)
	}
	statuses := norntype.Statuses()
	header := []string{"WORKFLOW"}
	for _, s := range statuses {
		header = append(header, strings.ToUpper(string(s)))
	}
	t := newTable(e.stdout, append(header, "TOTAL")...)
	totals := map[norntype.Status]int{}
	row := func(name string, by map[norntype.Status]int) {
		cells := []string{name}
		sum := 0
		for _, s := range statuses {
			cells = append(cells, strconv.Itoa(by[s]))
			sum += by[s]
		}
		t.row(append(cells, strconv.Itoa(sum))...)
	}
	for i := 0; i < len(counts); {
		wf := counts[i].Workflow
		by := map[norntype.Status]int{}
		for ; i < len(counts) && counts[i].Workflow == wf; i++ {
			by[counts[i].Status] += counts[i].Count
			totals[counts[i].Status] += counts[i].Count
		}
		row(wf, by)
	}
	row("TOTAL", totals)
	return t.flush()
}
