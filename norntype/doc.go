// Package norntype holds the types Norn's packages read and report: the
// address of an instance (PID), its lifecycle (Status), a channel's mode
// (Mode), and what inspecting an instance returns (Instance, HistoryEvent
// with its EventKind, Timer, Subscription).
//
// It imports only the standard library, so that store drivers, the command
// line, the viewer and users' own tools can name these types without
// importing the runtime. The actor package re-exports them under the same
// names (actor.PID is norntype.PID).
//
//	func summary(in norntype.Instance, hist []norntype.HistoryEvent) string {
//		if !in.Status.Terminal() {
//			return in.ID + ": " + string(in.Status)
//		}
//		var activities int
//		for _, e := range hist {
//			if e.Kind == norntype.EventActivity {
//				activities++
//			}
//		}
//		return fmt.Sprintf("%s: %s after %d activities", in.ID, in.Status, activities)
//	}
package norntype
