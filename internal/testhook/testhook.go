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
// "moqt://pipe.test:443/live?x=1". On an error both sessions are closed.
// Inside a testing/synctest bubble the sessions' goroutines and timers
// are the bubble's.
var PipeSessions func(ctx context.Context, pc transport.PipeConfig, serverCfg, clientCfg any) (client, server any, err error)
