// Package mailbox holds the semantics of Norn's durable mailboxes: the
// channel modes (Broadcast, Competing, Direct), the message an actor
// receives, and the filters of a selective receive (OnChannel, From, Match,
// Timeout), and the options of a subscription (Prefetch). It is pure logic: the store keeps the messages, the actor
// package consumes them.
//
//	spec := mailbox.NewSpec(mailbox.OnChannel("payments"), mailbox.Timeout(time.Hour))
//	for _, m := range waiting {
//		if spec.Matches(m) { /* consume m */ }
//	}
package mailbox
