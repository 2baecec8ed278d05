// Package demo is the set-up the examples share, kept out of their main.go
// so that these show only what each example teaches.
//
// Start reads two flags, -store (default sqlite://norn-data/norn.db, the
// same file for every example, which `norn ls` reads with
// NORN_STORE=norn-data/norn.db) and
// -fresh (default true: delete that SQLite file first; -fresh=false keeps it,
// so the run resumes the instances an interrupted run left unfinished). It
// opens the store, starts a Norn node that runs the given workflows and
// returns them as a Node, whose Ctx ends at Ctrl-C or SIGTERM:
//
//	node, err := demo.Start(orderFlow)
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer node.Close()
//	pid, err := actor.Spawn(node.Ctx, node.Sys, orderFlow, order)
package demo
