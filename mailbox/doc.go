// Package mailbox holds the semantics of Norn's durable mailboxes: the
// channel modes (Broadcast, Competing, Direct), the message an actor
// receives, the filters of a selective receive (OnChannel, From, Match,
// Timeout), the options of a subscription (Prefetch), and how a receive
// picks its message from a mailbox read (Receive, Selection): the first it
// accepts in arrival order, spreading parallel competing consumers over
// the first few queued messages, and claiming ahead with a prefetch; and
// which queued messages a node's consumers are claiming (Claims), so that
// they do not race for the same rows. It is pure logic: the store keeps
// the messages and decides every claim, the actor runtime reads them and
// commits what a receive takes.
//
//	r := mailbox.Receive{Type: "Paid", Spec: mailbox.NewSpec(mailbox.OnChannel("payments"))}
//	m, _, ok := mailbox.Selection{}.Pick(r, waiting)
//	if ok { /* consume m */ }
package mailbox
