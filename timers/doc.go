// Package timers is Norn's durable timer service. Timers live in the store;
// a node keeps the ones due within a horizon, for the instances it owns, in
// an in-memory min-heap and fires each at its due time (never before). Timers
// further out enter the heap as they come within the horizon, through one
// indexed range query per reload. Firing only signals: the owner's activation
// commits the firing (deleting the timer and appending to history in one
// transaction, conditional on its lease), so a timer never fires twice.
//
//	svc, err := timers.New(timers.Config{Source: store, Fire: func(t persistence.Timer) { wake(t.Instance) }})
//	go svc.Run(ctx)
//	svc.Schedule(persistence.Timer{Instance: id, ID: "sleep:1", Due: due})
package timers
