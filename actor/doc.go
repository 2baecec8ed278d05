// Package actor is Norn's public API: workflow and activity definitions, the
// System that runs a node, and the Context a workflow uses for every durable
// call.
//
// Each workflow instance is a persistent actor. Its live activation (a
// protoactor actor plus the goroutine running the workflow function) replays
// the instance's history and then carries on; every step it takes commits
// history, mailbox, timer and status changes in one store transaction,
// fenced by the instance's lease epoch.
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
package actor
