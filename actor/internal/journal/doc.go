// Package journal is the deterministic core of a workflow instance: it
// holds the history a run replays and the events the run records, matches
// each durable call against the next recorded event, keeps the calls that
// are still waiting for an outcome (activities, timers, receives) and
// resolves them in the order history gives.
//
// It does no IO, starts no goroutines, reads no clock and never panics: a
// history that does not match the code comes back as a *Divergence error,
// and every decision a wait takes while replaying comes back as a Wait
// value. The live activation of the actor package and its side-effect-free
// Replay both drive the same Journal; what differs is what they do once
// history is used up (go on live, or stop).
//
// A driver replays like this:
//
//	j := journal.New(journal.Events(history))
//	if _, err := j.Start(codecName); err != nil { ... }
//	// a durable call that answers at once:
//	if err := j.SkipMarkers(); err != nil { ... }
//	if j.Replaying() {
//		e, err := j.Next("now", "", "") // the recorded event, checked
//		...
//	} else {
//		e := j.Record(persistence.Event{Kind: "now", At: now, Payload: ...})
//		...
//	}
package journal
