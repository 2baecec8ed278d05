// Package starts keeps the starts of activations a node has in progress:
// the instances queued for an activator, how many activators run, and what
// happened to each instance (a wake, a cancel) while its start was under
// way, so that whoever ends the start acts on it.
//
// Waking 100,000 passivated instances must not start 100,000 goroutines at
// once: a Table queues the instances and bounds the activators that take
// them. It does no IO and has no lock of its own; the runtime drives it
// under the lock that guards its table of live activations, so that an
// instance is always either live, starting, or neither.
//
//	t := starts.New(maxActivators)
//	if t.Queue(id) { go activator() }   // a wake for an instance not live here
//	for id, ok := t.Next(); ok; id, ok = t.Next() { activate(id) }
//	st := t.End(id)                     // the start launched nothing: act on st
package starts
