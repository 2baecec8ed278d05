// Package actor is Norn's public API: workflow and activity definitions, the
// System that runs a node, and the Context a workflow uses for every durable
// call.
//
// Each workflow instance is a persistent actor. Its live activation replays
// the instance's history and then carries on; every step it takes commits
// history, mailbox, timer and status changes in one store transaction,
// fenced by the instance's lease epoch.
//
// Every durable call goes through one journal: the live run records the
// call's outcome and returns the value decoded from that record, exactly as
// a replay does, so a workflow sees the same values before and after any
// restart. Replay checks each call (kind, name, a digest of its input)
// against history and stops the instance with a NonDeterminismError at the
// first divergence. Futures (ActivityDef.Go, Context.Timer, ReceiveAsync,
// Select, WaitAll) run work side by side; the order in which outcomes were
// observed is recorded too. Context.Version changes code under running
// instances, and Replay checks today's code against a stored history.
//
//	var charge = actor.Activity("charge", func(ctx context.Context, o Order) (Receipt, error) { ... })
//	var orderFlow = actor.Workflow("order", func(ctx *actor.Context, o Order) (Receipt, error) {
//		return charge.Run(ctx, o)
//	})
//
//	sys, err := actor.Start(ctx, actor.Config{Store: store, Workflows: actor.Register(orderFlow)})
//	defer sys.Stop(ctx)
//	pid, err := actor.Spawn(ctx, sys, orderFlow, order, actor.WithID("order-42"))
//	receipt, err := actor.Await(ctx, sys, orderFlow, pid)
//
// The types the System reports (PID, Status, Mode, Instance, HistoryEvent,
// EventKind, Timer, Subscription) are package norntype's, re-exported here;
// tools that only read them can import norntype alone.
package actor
