// Command moqt is Media over QUIC Transport (draft-ietf-moq-transport-21)
// from a shell: a relay, a publisher of stdin, a subscriber to stdout, and
// the tools around them.
//
//	go install github.com/moqt-go/moqt/cmd/moqt@latest
//	moqt relay                                          # prints the pin and a command to try
//	moqt relay -web 127.0.0.1:8080                      # and a web page: watch a track, publish what you type
//	moqt pub -sha256 PIN moqt://127.0.0.1:4443/ files notes < notes.txt
//	moqt sub -sha256 PIN moqt://127.0.0.1:4443/ files notes > copy.txt
//	moqt demo                                           # all of it in one process, narrated
//
// Run `moqt help` for the commands and `moqt COMMAND -h` for each one's
// flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// command is one subcommand.
type command struct {
	name  string
	args  string // the positional arguments, for the usage line
	short string // one line for `moqt help`
	long  string // what `moqt help NAME` and `moqt NAME -h` explain
	// minArgs and maxArgs bound the positional arguments.
	minArgs, maxArgs int
	// setup defines the command's flags on fs and returns what runs it
	// with the positional arguments, once fs is parsed.
	setup func(fs *flag.FlagSet) func(ctx context.Context, e *env, args []string) error
}

// commands lists the subcommands in the order `moqt help` shows them.
var commands []*command

func init() {
	commands = []*command{relayCommand, pubCommand, subCommand, fetchCommand, lsCommand, statusCommand, clockCommand, demoCommand}
}

// env is what a command runs with: its streams, so that tests and the demo
// can run commands in process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// usageError is a command line that makes no sense: exit status 2 and the
// usage line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runMain(ctx, &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}

// runMain runs the command line args and returns the exit status: 0 done,
// 1 failed, 2 a command line that makes no sense.
func runMain(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		printHelp(e.stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c := lookup(args[1]); c != nil {
				printCommandHelp(e.stdout, c, nil)
				return 0
			}
			fmt.Fprintf(e.stderr, "moqt help: no command %q\n\n", args[1])
			printHelp(e.stderr)
			return 2
		}
		printHelp(e.stdout)
		return 0
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(e.stderr, "moqt: no command %q\n\n", name)
		printHelp(e.stderr)
		return 2
	}
	err := c.execute(ctx, e, args[1:])
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "moqt %s: %s\nusage: moqt %s [flags] %s (moqt %s -h explains)\n", c.name, ue.msg, c.name, c.args, c.name)
		return 2
	default:
		fmt.Fprintf(e.stderr, "moqt %s: %s\n", c.name, err)
		return 1
	}
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func printHelp(w io.Writer) {
	fmt.Fprint(w, `moqt: Media over QUIC Transport (draft-ietf-moq-transport-21) from a shell.

Usage: moqt COMMAND [flags] ARGS

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-7s %s\n", c.name, c.short)
	}
	fmt.Fprint(w, `
Start with a relay, then publish to it and subscribe through it:

  moqt relay                 prints its URL, its certificate's pin and a command to try
  moqt clock -sha256 PIN moqt://127.0.0.1:4443/
  moqt sub -lines -sha256 PIN moqt://127.0.0.1:4443/ clock time

or see it all at once: moqt demo.

In a browser: moqt relay -web 127.0.0.1:8080 serves a web page (its URL is in
the banner) that watches a track through the relay and publishes what you type;
moqt demo -web 127.0.0.1:8080 does the same for the demo's relay.

URLs are moqt://HOST:PORT/ (raw QUIC) or https://HOST:PORT/ (WebTransport, what
browsers speak); a relay serves both on one UDP port. A NAMESPACE is one or
more fields separated by '/', such as live/cam1. -sha256 trusts a server by its
certificate's SHA-256, as moqt relay prints it (hex or base64).

"moqt help COMMAND" or "moqt COMMAND -h" explains a command and its flags.
`)
}

// execute parses args and runs c.
func (c *command) execute(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("moqt "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	run := c.setup(fs)
	pos, err := parseArgs(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		printCommandHelp(e.stdout, c, fs)
		return err
	}
	if err != nil {
		return usagef("%v", err)
	}
	switch {
	case len(pos) < c.minArgs:
		return usagef("%d arguments, want %s", len(pos), c.args)
	case len(pos) > c.maxArgs:
		return usagef("unexpected %q, want %s", strings.Join(pos[c.maxArgs:], " "), c.args)
	}
	return run(ctx, e, pos)
}

// parseArgs parses flags placed anywhere among the positional arguments,
// which it returns: moqt sub URL NS TRACK -v works as moqt sub -v URL NS
// TRACK does. After "--" everything is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// printCommandHelp explains c and its flags.
func printCommandHelp(w io.Writer, c *command, fs *flag.FlagSet) {
	if fs == nil {
		fs = flag.NewFlagSet("moqt "+c.name, flag.ContinueOnError)
		c.setup(fs)
	}
	fmt.Fprintf(w, "Usage: moqt %s [flags] %s\n\n%s\n", c.name, c.args, strings.TrimSpace(c.long))
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprint(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}
