// Command norn inspects and operates a Norn store: it lists instances,
// shows their history, mailboxes and channels, sends, publishes, cancels,
// migrates the schema, lists cluster members and serves the web viewer.
// Run 'norn help'.
//
//	go install github.com/nornlabs/norn/cmd/norn@latest
//	norn --store norn-data/norn.db ls --status waiting
//
// The commands live in package github.com/nornlabs/norn/cli; a program can
// build its own norn with its workflows compiled in, which adds replay.
package main

import (
	"os"

	"github.com/nornlabs/norn/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
