package chaosrun

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// PrintTable writes one row per store and workload.
func PrintTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tmode\titems\tcompleted\trecorded twice\tdup executions\tlost\tstuck\tfailed\tnever ran\tkills\tcrashes\telapsed\t")
	for _, r := range results {
		counted := "-"
		if r.Counted >= 0 {
			counted = fmt.Sprint(r.Counted)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%s\t\n", r.Store, r.Mode, r.Items, r.Completed,
			r.RecordedTwice, r.DupExecutions, r.Lost, r.Stuck, r.Failed, r.NeverRan, counted, r.Kills, r.Crashes,
			r.Elapsed.Round(100*time.Millisecond))
	}
	return tw.Flush()
}
