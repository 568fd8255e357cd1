package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/moqt-go/moqt/wire"
)

var lsCommand = &command{
	name:  "ls",
	args:  "URL [PREFIX]",
	short: "list the namespaces published under a prefix, as they come and go",
	long: `
Asks the relay at URL for the namespaces published under PREFIX
(SUBSCRIBE_NAMESPACE; no PREFIX: every namespace) and prints them on stdout
as they come and go, until Ctrl-C:

  + live/cam1     live/cam1 is published (NAMESPACE)
  - live/cam1     it no longer is (NAMESPACE_DONE)

Example:
  moqt ls -sha256 PIN moqt://127.0.0.1:4443/ live`,
	minArgs: 1,
	maxArgs: 2,
	setup:   lsSetup,
}

func lsSetup(fs *flag.FlagSet) func(context.Context, *env, []string) error {
	var client clientFlags
	client.register(fs)
	return func(ctx context.Context, e *env, args []string) error {
		var prefix wire.Namespace
		if len(args) > 1 {
			var err error
			if prefix, err = parseNamespace(args[1], true); err != nil {
				return err
			}
		}
		n := &narrator{w: e.stderr, prefix: "moqt ls: ", quiet: client.quiet}
		sess, err := client.dial(ctx, e, args[0], nil)
		if err != nil {
			return err
		}
		defer sess.Close()
		ns, err := sess.SubscribeNamespace(ctx, prefix, wire.Params{})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("SUBSCRIBE_NAMESPACE: %w", explainRequestError(err))
		}
		defer ns.Close()
		what := "every namespace"
		if len(prefix) > 0 {
			what = "the namespaces under " + formatNamespace(prefix)
		}
		n.say("listing %s as they come and go (Ctrl-C to stop)", what)
		for {
			ev, err := ns.Next(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if sess.Context().Err() != nil {
					return sessionEnded(sess)
				}
				return fmt.Errorf("the listing ended: %w", err)
			}
			switch {
			case ev.Skipped:
			case ev.Done:
				fmt.Fprintf(e.stdout, "- %s\n", formatNamespace(ev.Namespace))
			default:
				fmt.Fprintf(e.stdout, "+ %s\n", formatNamespace(ev.Namespace))
			}
		}
	}
}
