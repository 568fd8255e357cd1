// Package testhook reaches into package moqt for tests of other packages:
// package moqt sets its variables in an init function. It is for tests
// only; use it through internal/moqttest, which gives it types.
package testhook

import (
	"context"

	"github.com/moqt-go/moqt/internal/transport"
)

// PipeSessions connects a client and a server *moqt.Session over a
// transport.Pipe shaped by pc and runs their SETUP exchange, as Dial and
// a Server do over a real transport; serverCfg and clientCfg are
// *moqt.Config (nil for the defaults). The client asks for
// "moqt://pipe.test:443" + path. On an error both sessions are closed.
// Inside a testing/synctest bubble the sessions' goroutines and timers
// are the bubble's.
var PipeSessions func(ctx context.Context, pc transport.PipeConfig, path string, serverCfg, clientCfg any) (client, server any, err error)

// PipeServer makes a transport.Pipe shaped by pc and returns its client
// end, raw, and a function that runs the server *moqt.Session's side of
// SETUP over the other end (serverCfg a *moqt.Config, nil for the
// defaults) and returns it, for a test to play a client byte by byte; the
// client asks for path. On an error the client end is closed.
var PipeServer func(pc transport.PipeConfig, path string, serverCfg any) (client transport.Conn, serve func(ctx context.Context) (server any, err error))
