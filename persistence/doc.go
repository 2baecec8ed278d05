// Package persistence defines Norn's durable state: the Store interface every
// driver implements, the records it keeps (instances, history, mailbox
// messages, subscriptions, timers) and the errors callers branch on.
//
// Every transition of an instance is one Step, applied atomically by
// Store.Apply: history append, mailbox change, timer change and status in one
// transaction, conditional on the writer's lease epoch (fencing). Drivers may
// batch concurrent steps into one commit (group commit) but each step still
// succeeds or fails on its own.
//
//	res, err := store.Apply(ctx, persistence.Step{
//		Instance: id, Epoch: epoch,
//		History:  []persistence.Event{{Seq: 3, Kind: "activity", Name: "charge", Payload: out}},
//	})
//
// Every store accepts the same records: Step.Validate (and ValidateID and
// ValidateReason for the other methods' arguments) rejects text that is not
// valid UTF-8, contains NUL bytes or exceeds the Max* limits, with an
// *InvalidError naming the field, before a driver writes anything.
//
// Step's documentation is the specification of a transition that every
// driver implements: the order in which its concerns apply, the conditions
// that fence it and the error each failure gives, and what StepResult
// reports. Drivers live in sub-packages (sqlite, postgres) and are checked
// by the shared conformance suite in storetest, which has a case for each
// combination of Step fields the runtime uses.
//
// Capabilities that not every driver has (notifications, wake requests,
// the outbox, statistics) are methods of Store like the others; a driver
// without one refuses it with ErrUnsupported, so that a wrapper embedding a
// Store forwards them all:
//
//	if err := store.Listen(ctx, wake); errors.Is(err, persistence.ErrUnsupported) {
//		// poll instead
//	}
package persistence
