package norntype_test

import (
	"fmt"

	"github.com/nornlabs/norn/norntype"
)

// A tool that reads instances (here from literals; in practice from
// System.Inspect or the command line's JSON) needs only this package.
func Example() {
	in := norntype.Instance{ID: "order-7", Workflow: "order", Status: norntype.StatusCompleted}
	hist := []norntype.HistoryEvent{
		{Seq: 1, Kind: norntype.EventStarted},
		{Seq: 2, Kind: norntype.EventActivity, Name: "charge"},
		{Seq: 3, Kind: norntype.EventActivity, Name: "ship"},
		{Seq: 4, Kind: norntype.EventCompleted},
	}
	var activities int
	for _, e := range hist {
		if e.Kind == norntype.EventActivity {
			activities++
		}
	}
	fmt.Printf("%s: %s (ended: %v) after %d activities\n", norntype.PID(in.ID), in.Status, in.Status.Terminal(), activities)
	// Output: order-7: completed (ended: true) after 2 activities
}
