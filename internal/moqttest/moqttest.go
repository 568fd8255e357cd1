// Package moqttest builds moqt sessions over the in-memory transport for
// the tests of packages other than moqt (relay, ...), which otherwise use
// moqt's public API. It is for tests only.
package moqttest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/internal/testhook"
	"github.com/moqt-go/moqt/internal/transport"
)

// setupGuard bounds the SETUP exchange: it only turns a hang into a
// failure (inside a synctest bubble, it passes only if every goroutine of
// the bubble is stuck).
const setupGuard = 10 * time.Second

// Pair connects a client session, configured by clientCfg, to a server
// session whose serverCfg.Handler serves it (a relay, say), over a
// transport.Pipe shaped by pc (pc.WebTransport imitates WebTransport), and
// returns both once SETUP has been exchanged. Nil Configs take the
// defaults, but a nil Logger is replaced by one that discards. Both
// sessions are closed when the test ends, and the cleanup waits for them.
// Call it inside a testing/synctest bubble to run the sessions' timers on
// the bubble's clock: the sessions then belong to the bubble and must end
// in it, which the cleanup sees to.
func Pair(t testing.TB, pc transport.PipeConfig, serverCfg, clientCfg *moqt.Config) (client, server *moqt.Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupGuard)
	defer cancel()
	c, s, err := testhook.PipeSessions(ctx, pc, quiet(serverCfg), quiet(clientCfg))
	if err != nil {
		t.Fatalf("moqttest: connecting over a pipe: %v", err)
	}
	client, server = c.(*moqt.Session), s.(*moqt.Session)
	t.Cleanup(func() {
		_ = client.Close()
		_ = server.Close()
		<-client.Context().Done()
		<-server.Context().Done()
	})
	return client, server
}

// quiet returns a copy of cfg, or a new Config, whose nil Logger
// discards.
func quiet(cfg *moqt.Config) *moqt.Config {
	var out moqt.Config
	if cfg != nil {
		out = *cfg
	}
	if out.Logger == nil {
		out.Logger = discard
	}
	return &out
}

var discard = slog.New(slog.DiscardHandler)
