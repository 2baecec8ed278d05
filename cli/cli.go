package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/nornlabs/norn/actor"
)

// Exit codes of the command. Scripts branch on them; the message on
// stderr says more.
const (
	// ExitOK: the command did what was asked.
	ExitOK = 0
	// ExitFailure: the command failed (store unreachable, a cancel or send
	// refused, a replay that diverged, ...).
	ExitFailure = 1
	// ExitUsage: the command line is wrong (unknown command or flag,
	// missing argument, malformed store URL or JSON); nothing was done.
	ExitUsage = 2
	// ExitNotFound: an instance named on the command line does not exist.
	ExitNotFound = 3
)

// Environment variables read when the flags are not given.
const (
	StoreEnv = "NORN_STORE"      // --store
	SeedsEnv = "NORN_SEEDS"      // --seeds
	KeyEnv   = "NORN_GOSSIP_KEY" // --secret-key
	// The cluster's remote TLS, as PEM files (--tls-ca, --tls-cert,
	// --tls-key).
	TLSCAEnv   = "NORN_TLS_CA"
	TLSCertEnv = "NORN_TLS_CERT"
	TLSKeyEnv  = "NORN_TLS_KEY"
)

// Options configure Run. The zero value is the plain norn command.
type Options struct {
	// Workflows are the program's workflow definitions. They are never run
	// by the command; replay checks stored histories against them, so
	// replay is only available when they are given.
	Workflows []actor.Definition
	// Errors are the application errors the program registers
	// (actor.Config.Errors), so that replay rebuilds recorded failures the
	// same way.
	Errors []actor.ErrorDef
	// Messages are the message names the program registers
	// (actor.Config.Messages), so that replay and query match receives as
	// its nodes do.
	Messages []actor.MessageName
	// Codec is the codec the program's nodes use. Default JSON.
	Codec actor.Codec
	// Name is the program's name in help and errors. Default "norn".
	Name string
	// Stdin, Stdout and Stderr default to the process's.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv reads the environment (NORN_STORE). Default os.Getenv.
	Getenv func(string) string
	// Logger receives the runtime's logs. Default: warnings and errors as
	// text on Stderr.
	Logger *slog.Logger
	// StderrIsTerminal reports whether Stderr is a terminal, which turns on
	// progress bars. Default: looked up on os.Stderr when Stderr is unset.
	StderrIsTerminal *bool
}

// Main runs the command with args (os.Args[1:]) and returns its exit code;
// workflows enable replay (see Options.Workflows). It stops on SIGINT and
// SIGTERM. A program that embeds the command calls
//
//	os.Exit(cli.Main(os.Args[1:], orderFlow, shipFlow))
func Main(args []string, workflows ...actor.Definition) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, args, Options{Workflows: workflows})
}

// Run runs the command with args (without the program name) and returns
// its exit code.
func Run(ctx context.Context, args []string, o Options) int {
	e := newEnv(ctx, o)
	err := e.dispatch(args)
	if err == nil {
		return ExitOK
	}
	code := exitCode(err)
	if code == ExitOK {
		return ExitOK
	}
	fmt.Fprintf(e.stderr, "%s: %s\n", e.name, errorText(err))
	var ue *usageError
	if errors.As(err, &ue) && ue.cmd != "" {
		fmt.Fprintf(e.stderr, "run '%s help %s' for usage\n", e.name, ue.cmd)
	}
	return code
}

// errorText is err's message without the "norn: " that the runtime's
// errors start with, wherever wrapping put it (the command prints its own
// name first), and without the trailing newlines of joined errors.
func errorText(err error) string {
	msg := strings.TrimPrefix(err.Error(), "norn: ")
	msg = strings.ReplaceAll(msg, ": norn: ", ": ")
	msg = strings.ReplaceAll(msg, "\nnorn: ", "\n")
	return strings.TrimRight(msg, "\n")
}

// exitCode maps an error to the documented exit codes.
func exitCode(err error) int {
	var ue *usageError
	var fe *failedError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &ue):
		return ExitUsage
	case errors.As(err, &fe):
		return fe.code
	case errors.Is(err, actor.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, actor.ErrInvalidInput):
		// An argument the runtime refused (an ID with a newline, a
		// payload too large): nothing was done, as with a usage error.
		return ExitUsage
	}
	return ExitFailure
}

// usageError is a command line the command cannot act on.
type usageError struct {
	cmd string // the command whose help to point at, if any
	msg string
}

func (e *usageError) Error() string { return e.msg }

func usagef(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, args...)}
}

// failedError is a command that reported its failures already (bulk
// cancel, replay) and only sets the exit code.
type failedError struct {
	code int
	msg  string
}

func (e *failedError) Error() string { return e.msg }

// env is one run of the command.
type env struct {
	ctx            context.Context
	opts           Options
	name           string
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	log            *slog.Logger
	tty            bool

	// Set by the common flags.
	storeURL  string
	json      bool
	seeds     string
	bind      string
	secretKey string
	tlsCA     string
	tlsCert   string
	tlsKey    string
}

func newEnv(ctx context.Context, o Options) *env {
	e := &env{ctx: ctx, opts: o, name: o.Name, stdin: o.Stdin, stdout: o.Stdout, stderr: o.Stderr, getenv: o.Getenv, log: o.Logger,
		bind: "0.0.0.0"}
	if e.name == "" {
		e.name = "norn"
	}
	if e.stdin == nil {
		e.stdin = os.Stdin
	}
	if e.stdout == nil {
		e.stdout = os.Stdout
	}
	if e.stderr == nil {
		e.stderr = os.Stderr
	}
	if e.getenv == nil {
		e.getenv = os.Getenv
	}
	if e.log == nil {
		e.log = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	switch {
	case o.StderrIsTerminal != nil:
		e.tty = *o.StderrIsTerminal
	case o.Stderr == nil:
		e.tty = isTerminal(os.Stderr)
	}
	if e.opts.Codec == nil {
		e.opts.Codec = actor.JSON{}
	}
	return e
}

// isTerminal reports whether f is a character device (a terminal, not a
// file or a pipe).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// commonFlags are accepted before the command name and by every command.
func (e *env) commonFlags(fs *flag.FlagSet) {
	fs.StringVar(&e.storeURL, "store", e.storeURL, "store: an SQLite file path, sqlite://PATH or postgres://… (default $"+StoreEnv+")")
	fs.BoolVar(&e.json, "json", e.json, "print JSON instead of tables")
	fs.StringVar(&e.seeds, "seeds", e.seeds, "gossip addresses (host:port, comma-separated) of a cluster's nodes: join as a client member, so that what the command writes wakes the owners at once (default $"+SeedsEnv+")")
	fs.StringVar(&e.bind, "bind", e.bind, "with --seeds: the IP address to listen on for gossip (free ports are picked)")
	fs.StringVar(&e.secretKey, "secret-key", e.secretKey, "with --seeds: the cluster's gossip key, hex (default $"+KeyEnv+")")
	fs.StringVar(&e.tlsCA, "tls-ca", e.tlsCA, "with --seeds, for a cluster whose remote endpoints use TLS: the PEM file of the cluster's CA (default $"+TLSCAEnv+")")
	fs.StringVar(&e.tlsCert, "tls-cert", e.tlsCert, "with --tls-ca: this client's certificate, PEM, naming the --bind address (default $"+TLSCertEnv+")")
	fs.StringVar(&e.tlsKey, "tls-key", e.tlsKey, "with --tls-ca: the key of --tls-cert, PEM (default $"+TLSKeyEnv+")")
}

// dispatch parses the common flags and the command name and runs it.
func (e *env) dispatch(args []string) error {
	top := flag.NewFlagSet(e.name, flag.ContinueOnError)
	top.SetOutput(io.Discard)
	e.commonFlags(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			e.printUsage(e.stdout)
			return nil
		}
		return usagef("", "%v (run '%s help')", err, e.name)
	}
	rest := top.Args()
	if len(rest) == 0 {
		e.printUsage(e.stderr)
		return usagef("", "no command given")
	}
	name, rest := rest[0], rest[1:]
	if name == "help" {
		return e.help(rest)
	}
	c := e.lookup(name)
	if c == nil {
		return usagef("", "unknown command %q (run '%s help')", name, e.name)
	}
	fs := e.flagSet(c)
	run := c.setup(e, fs)
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			e.printCommandHelp(e.stdout, c)
			return nil
		}
		return usagef(c.name, "%s: %v", c.name, err)
	}
	return run(pos)
}

// flagSet is a command's flag set with the common flags.
func (e *env) flagSet(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet(e.name+" "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e.commonFlags(fs)
	return fs
}

// parseInterleaved parses flags wherever they appear among the arguments
// (norn show ID --json), as users expect; after "--" everything is
// positional (norn publish orders -- -1).
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var tail []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, tail = args[:i], args[i+1:]
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(pos, tail...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
