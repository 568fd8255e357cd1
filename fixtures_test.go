package moqt

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Fixtures shared by the package's tests: the setup most of them repeat,
// and the runners that take one test body over both transports, in memory
// in a synctest bubble. Connecting sessions is in integration_test.go
// (real transports), session_pipe_test.go (in memory), server_pipe_test.go
// (a Server and Dial in memory) and fakepeer_test.go (a fake peer).

// newServedTrack makes a LocalTrack named name with props and a server
// Config whose Handler accepts every SUBSCRIBE to it, handing each
// ServedSubscription to served (trackServer).
func newServedTrack(t *testing.T, name wire.FullTrackName, props wire.KVList) (*LocalTrack, *Config, chan *ServedSubscription) {
	t.Helper()
	track, err := NewLocalTrack(name, props)
	require.NoError(t, err)
	cfg, served := trackServer(t, track)
	return track, cfg, served
}

// testCtx is a context that ends after d or with the test, whichever
// comes first: the bound on a test's waits.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// connector connects a client and a server session: over a Pipe or over
// a real transport.
type connector func(t *testing.T, serverCfg, clientCfg *Config) *pair

// overPipe connects over a Pipe imitating WebTransport (wt) or raw QUIC.
// Use it inside inBubble.
func overPipe(wt bool) connector {
	return func(t *testing.T, serverCfg, clientCfg *Config) *pair {
		t.Helper()
		return newPipePair(t, transport.PipeConfig{WebTransport: wt}, serverCfg, clientCfg)
	}
}

// overWire connects over loopback QUIC ("moqt") or WebTransport ("https").
func overWire(scheme string) connector {
	return func(t *testing.T, serverCfg, clientCfg *Config) *pair {
		t.Helper()
		return newPair(t, scheme, serverCfg, clientCfg)
	}
}

// forTransports runs f over both transports in memory, in a synctest
// bubble ("pipe/quic", "pipe/webtransport"). The real transports are the
// subject of the *_integration_test.go files only: on a loaded machine
// their wall-clock timers were the tests that failed.
func forTransports(t *testing.T, f func(t *testing.T, connect connector)) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) { f(t, overPipe(tr.wt)) })
		})
	}
}

// advance lets the bubble's clock run d, with every goroutine of the
// bubble blocked meanwhile: the timers due in d fire, in order. Inside
// inBubble only; outside it would sleep.
func advance(d time.Duration) { time.Sleep(d) }

// fakeConnector makes a library session and a fake peer that has
// completed SETUP with it.
type fakeConnector func(t *testing.T, cfg *Config) (*Session, *fakePeer)

// forServerSessions runs f, as subtest name, with the library as the
// server of a fake client, over both transports in memory, in a synctest
// bubble ("pipe/quic/name", "pipe/webtransport/name").
func forServerSessions(t *testing.T, name string, f func(t *testing.T, connect fakeConnector)) {
	forFakeSessions(t, name, f, pipeServerSession)
}

// forClientSessions is forServerSessions with the library as the client
// of a fake server.
func forClientSessions(t *testing.T, name string, f func(t *testing.T, connect fakeConnector)) {
	forFakeSessions(t, name, f, pipeClientSession)
}

func forFakeSessions(t *testing.T, name string, f func(t *testing.T, connect fakeConnector),
	overPipe func(*testing.T, transport.PipeConfig, *Config) (*Session, *fakePeer)) {
	for _, tr := range pipeTransports {
		t.Run(tr.name+"/"+name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				f(t, func(t *testing.T, cfg *Config) (*Session, *fakePeer) {
					t.Helper()
					return overPipe(t, transport.PipeConfig{WebTransport: tr.wt}, cfg)
				})
			})
		})
	}
}

// settle requires cond once the test's goroutines have settled. In a
// synctest bubble that is once every other goroutine of the bubble is
// blocked, and cond is checked once; over a real transport there is no
// such moment, and cond is polled for up to fakeGuard.
func settle(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	settleWithin(t, fakeGuard, cond, msg)
}

// settleWithin is settle polling for up to within over a real transport,
// for a cond that must hold soon, not merely eventually.
func settleWithin(t *testing.T, within time.Duration, cond func() bool, msg string) {
	t.Helper()
	if bubbled() {
		synctest.Wait()
		require.True(t, cond(), msg)
		return
	}
	require.Eventually(t, cond, within, time.Millisecond, msg)
}

// bubbled reports whether the caller runs in a synctest bubble: the
// bubble's clock has no monotonic reading.
func bubbled() bool {
	now := time.Now()
	return now == now.Round(0)
}

var testTrack = wire.FullTrackName{Namespace: wire.NewNamespace("live", "cam1"), Name: []byte("video")}

// acceptAll is a Handler that accepts every SUBSCRIBE and PUBLISH and hands
// the resulting ends to the test.
type acceptAll struct {
	served chan *ServedSubscription
	subs   chan *Subscription
}

func newAcceptAll() *acceptAll {
	return &acceptAll{served: make(chan *ServedSubscription, 4), subs: make(chan *Subscription, 4)}
}

func (a *acceptAll) ServeMOQT(r Request) {
	switch r := r.(type) {
	case *SubscribeRequest:
		if ss, err := acceptLocal(r, AcceptOptions{}); err == nil {
			a.served <- ss
		}
	case *PublishRequest:
		if sub, err := r.Accept(wire.Params{}); err == nil {
			a.subs <- sub
		}
	default:
		DefaultHandler.ServeMOQT(r)
	}
}

func waitDone(t *testing.T, ctx context.Context, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%s did not end", what)
	}
}
