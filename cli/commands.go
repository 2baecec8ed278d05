package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// command is one entry of the command table. setup declares the command's
// flags on fs and returns the function that runs it with the positional
// arguments; flags are parsed in between.
//
// To add a command, write a function that returns its entry and add it to
// commandTable.
type command struct {
	name     string
	synopsis string // arguments after the name, for usage lines
	summary  string // one line for 'norn help'
	help     string // paragraphs for 'norn help NAME'
	setup    func(e *env, fs *flag.FlagSet) func(args []string) error
	// available reports whether the command can run in this program, and
	// why not; nil means always.
	available func(e *env) (bool, string)
}

// commandTable is the command table, in the order 'norn help' lists it.
func commandTable() []*command {
	return []*command{
		lsCommand(),
		showCommand(),
		historyCommand(),
		mailboxCommand(),
		timersCommand(),
		channelsCommand(),
		statsCommand(),
		startCommand(),
		sendCommand(),
		publishCommand(),
		cancelCommand(),
		terminateCommand(),
		retryCommand(),
		restartCommand(),
		resetCommand(),
		purgeCommand(),
		replayCommand(),
		queryCommand(),
		migrateCommand(),
		membersCommand(),
		viewerCommand(),
		versionCommand(),
	}
}

func (e *env) lookup(name string) *command {
	for _, c := range commandTable() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// help is 'norn help [COMMAND]'.
func (e *env) help(args []string) error {
	switch len(args) {
	case 0:
		e.printUsage(e.stdout)
		return nil
	case 1:
		c := e.lookup(args[0])
		if c == nil {
			return usagef("", "unknown command %q (run '%s help')", args[0], e.name)
		}
		e.printCommandHelp(e.stdout, c)
		return nil
	}
	return usagef("", "help takes at most one command name")
}

func (e *env) printUsage(w io.Writer) {
	fmt.Fprintf(w, "%s inspects and operates a Norn store: instances, their history and mailboxes, channels.\n\n", e.name)
	fmt.Fprintf(w, "Usage:\n  %s [--store URL] [--json] COMMAND [flags] [args]\n\nCommands:\n", e.name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commandTable() {
		summary := c.summary
		if c.available != nil {
			if ok, why := c.available(e); !ok {
				summary += " (" + why + ")"
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, summary)
	}
	fmt.Fprintf(tw, "  help\tshow help for a command\n")
	_ = tw.Flush() // help text to w; a write error shows in the next Fprintf too
	fmt.Fprintf(w, `
The store is given by --store or $%s: a path to an SQLite file
(sqlite://PATH?synchronous=normal also works) or a postgres:// URL.
Output is a table for people, with times in UTC (said so); --json prints
JSON for scripts. The commands other than migrate open an existing store
only: they create no SQLite file and no schema.

The command runs no instances: what it writes (send, publish, cancel) the
nodes act on. PostgreSQL tells them at once; on an SQLite file the command
leaves wake requests that the nodes read within a tenth of a second. With
--seeds the command joins the nodes' cluster as a client member and wakes
the owners directly (a cluster whose remote endpoints use TLS also needs
--tls-ca, --tls-cert and --tls-key).

Exit codes: 0 ok, 1 failure, 2 usage error (nothing done), 3 instance not found.
Run '%s help COMMAND' for a command's flags.
`, StoreEnv, e.name)
}

func (e *env) printCommandHelp(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: %s %s", e.name, c.name)
	if c.synopsis != "" {
		fmt.Fprintf(w, " %s", c.synopsis)
	}
	fmt.Fprintf(w, "\n\n%s\n", c.summary)
	if c.help != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.help))
	}
	if c.available != nil {
		if ok, why := c.available(e); !ok {
			fmt.Fprintf(w, "\nNot available here: %s.\n", why)
		}
	}
	fs := e.flagSet(c)
	c.setup(e, fs)
	fmt.Fprintf(w, "\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
}
