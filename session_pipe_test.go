package moqt

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// This file runs sessions over transport.Pipe, in memory, so that tests of
// the session's timers run in a testing/synctest bubble: the bubble's clock
// jumps to the next timer once every goroutine waits, and a test of a
// ten-second timeout takes no time and has no race with the scheduler.
// Tests of what the transports themselves do stay on the real ones
// (newPair, startNetServer).

// pipeTransports are the two transports a Pipe imitates, named for
// subtests: "pipe/" and the name transports gives the real one.
var pipeTransports = []struct {
	name string
	wt   bool
}{
	{"pipe/quic", false},
	{"pipe/webtransport", true},
}

// inBubble runs f in a synctest bubble: every Pipe, session and timer
// that f makes lives in it, and must be gone when f returns (cleanups
// registered on the bubble's t run inside it, before it ends). The fake
// peer's guard and fakeCtx run on the bubble's clock too: a test that
// lets more than fakeGuard pass must not wait on them.
func inBubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, f)
}

// pipeSession wraps one end of a Pipe in a Session, as Dial and Server
// do once the transport is up. The caller runs its handshake.
func pipeSession(t *testing.T, conn transport.Conn, isClient bool, cfg *Config) *Session {
	t.Helper()
	v, ok := wire.ParseALPN(conn.Protocol())
	require.True(t, ok, "pipe protocol %q", conn.Protocol())
	s := newSession(conn, v, isClient, cfg)
	if isClient {
		s.path = pipePath
		if !conn.WebTransport() {
			s.authority = pipeAuthority
		}
	} else if conn.WebTransport() {
		// From the CONNECT request, as the Listener reports it.
		s.path, s.authority = pipePath, pipeAuthority
	}
	return s
}

// pipeClientSetup is the SETUP a library client sends: Dial's, with AUTHORITY
// and PATH on raw QUIC.
func (s *Session) pipeClientSetup() *wire.Setup {
	st := s.ownSetup()
	if !s.conn.WebTransport() {
		st.Authority, st.Path = wire.Some(s.authority), wire.Some(s.path)
	}
	return st
}

// closeOnCleanup closes sessions when the test ends and waits until
// their connections are down, as newPair does.
func closeOnCleanup(t *testing.T, sessions ...*Session) {
	t.Cleanup(func() {
		for _, s := range sessions {
			_ = s.Close()
		}
		for _, s := range sessions {
			<-s.Context().Done()
		}
	})
}

// newPipePair connects a client and a server Session over a Pipe and runs
// their SETUP exchange; serverCfg.Handler serves the client's requests,
// clientCfg.Handler the server's. Call it inside inBubble. The pair's srv
// is nil: there is no Server, but connect makes more pairs whose servers
// share serverCfg.
func newPipePair(t *testing.T, pc transport.PipeConfig, serverCfg, clientCfg *Config) *pair {
	t.Helper()
	serverCfg, clientCfg = quietConfig(serverCfg).withDefaults(), quietConfig(clientCfg).withDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), fakeGuard)
	defer cancel()
	client, server, err := connectPipe(ctx, draftPipe(t, pc), serverCfg, clientCfg)
	require.NoError(t, err)
	closeOnCleanup(t, client, server)
	return &pair{client: client, server: server, pipe: func(t *testing.T, clientCfg *Config) *pair {
		t.Helper()
		return newPipePair(t, pc, serverCfg, clientCfg)
	}}
}

// pipeServerSession is serverSession over a Pipe: the library is the
// server, a fake client has completed SETUP. Call it inside inBubble.
func pipeServerSession(t *testing.T, pc transport.PipeConfig, cfg *Config) (*Session, *fakePeer) {
	t.Helper()
	s, fp, served := pipeServerAccept(t, pc, cfg)
	st := &wire.Setup{}
	if !pc.WebTransport {
		st = &wire.Setup{Path: wire.Some("/live"), Authority: wire.Some(pipeAuthority)}
	}
	fp.sendSetup(st)
	fp.readPeerSetup()
	require.NoError(t, <-served)
	return s, fp
}

// pipeServerAccept starts a library server's SETUP exchange with a fake
// client over a Pipe, as Server does for a new connection, and returns
// with it under way: the channel gets the handshake's result. Call it
// inside inBubble.
func pipeServerAccept(t *testing.T, pc transport.PipeConfig, cfg *Config) (*Session, *fakePeer, <-chan error) {
	t.Helper()
	cfg = quietConfig(cfg).withDefaults()
	cc, sc := transport.Pipe(pipeConfig(draftPipe(t, pc), cfg))
	s := pipeSession(t, sc, false, cfg)
	closeOnCleanup(t, s)
	fp := newFakePeer(t, cc)
	served := goErr(func() error { return s.handshake(fakeCtx(t), s.ownSetup()) })
	return s, fp, served
}

// pipeClientSession is clientSession over a Pipe: the library is the
// client, a fake server has completed SETUP. Call it inside inBubble.
func pipeClientSession(t *testing.T, pc transport.PipeConfig, cfg *Config) (*Session, *fakePeer) {
	t.Helper()
	s, fp, dialed := pipeClientDial(t, pc, cfg)
	fp.readPeerSetup()
	fp.sendSetup(&wire.Setup{})
	require.NoError(t, <-dialed)
	return s, fp
}

// pipeClientDial starts a library client's SETUP exchange with a fake
// server over a Pipe and returns with it under way: the channel gets
// the handshake's result. Call it inside inBubble.
func pipeClientDial(t *testing.T, pc transport.PipeConfig, cfg *Config) (*Session, *fakePeer, <-chan error) {
	t.Helper()
	cfg = quietConfig(cfg).withDefaults()
	cc, sc := transport.Pipe(pipeConfig(draftPipe(t, pc), cfg))
	s := pipeSession(t, cc, true, cfg)
	closeOnCleanup(t, s)
	fp := newFakePeer(t, sc)
	dialed := goErr(func() error { return s.handshake(fakeCtx(t), s.pipeClientSetup()) })
	return s, fp, dialed
}
