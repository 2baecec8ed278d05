// Package compete decides which of a node's consumers wakes for each
// message published on a channel with competing subscribers.
//
// Waking every parked consumer for each message makes all but one of them
// read the queue and lose the race for the claim, so a published message
// wakes one consumer. The rules:
//
//   - A consumer registers what its receives accept (Wait) before it reads
//     its mailbox, and stays registered until a receive takes something or
//     its wait ends (Busy). A message committed after the registration
//     wakes it, or another registered consumer; one committed before is
//     seen by the read. So no message is left between a consumer's look and
//     its park.
//   - A published message wakes one registered consumer whose receives
//     accept it for sure (Route). That consumer is unregistered at once, so
//     the next message wakes another, and holds the wake until its next
//     mailbox read. A consumer whose receives may accept it (a sender or
//     payload filter may still refuse it) is woken as well. With no
//     consumer registered, busy consumers look before they park, and
//     subscribers that are not live on this node are handed back (Cold) to
//     be woken the ordinary way.
//   - A consumer that leaves its wait, stops or crashes while holding wakes
//     passes them on (Busy and Leave return them for the caller to route
//     again).
//   - A consumer that took a message looks at the queue again before it
//     parks only if something may have been left for it: Wait reports
//     whether, since the consumer's previous Wait, a message woke no
//     registered consumer (Missed, counted by Route and by the runtime)
//     or the consumer holds a wake. Otherwise every message since went
//     to a registered consumer, and the look would find nothing.
//   - Before a message is published on this node, Pick may choose a
//     registered consumer that takes it for sure and takes it from its
//     receives without a read (the runtime says which channels when it
//     registers): the store then puts the message straight into that
//     consumer's mailbox, and the runtime hands it over in memory. The
//     consumer is unregistered like Route's pick, and woken whatever the
//     store did.
//
// A Router does no IO, starts nothing and has no lock of its own: the
// runtime calls it under the lock that also guards its table of live
// activations, so that registration, routing and that table change
// together.
//
// Used by the runtime like this, under its lock:
//
//	r := compete.NewRouter[*activation]()
//	r.Wait(a, receives, handOn)                 // before a's mailbox read
//	c, ok := r.Pick(channel, typ, live)         // before a publish: hand it to c
//	d := r.Route(queued, nil, liveConsumer)     // after a commit queued a message
//	for _, c := range d.Wake { signal(c) }
//	wakeTheUsualWay(d.Cold)
package compete
