// Package cli is the norn command: list and inspect instances (ls, show,
// history), look at channels, send and publish messages, cancel instances
// one by one or in bulk, migrate a store's schema, list a cluster's
// members, and replay stored histories against workflow code (query too:
// it answers an instance's query handlers from its replayed history).
//
// The stock command is github.com/nornlabs/norn/cmd/norn. It holds no
// workflow code, so it cannot replay; a program that wants replay builds
// its own command with its workflows:
//
//	package main
//
//	import (
//		"os"
//
//		"github.com/nornlabs/norn/cli"
//	)
//
//	func main() { os.Exit(cli.Main(os.Args[1:], orders.OrderFlow, orders.ShipFlow)) }
//
// The command never runs those workflows: it reads and writes the store
// through a System that activates no instance.
//
// Output is a table by default and JSON with --json. Exit codes: 0 ok, 1
// failure, 2 usage error (nothing was done), 3 instance not found.
package cli
