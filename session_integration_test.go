package moqt

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Sessions over loopback QUIC and WebTransport where the transports
// themselves are the subject: idle timeouts and keep-alives, stream limits,
// how closes and transport errors reach the session, a process that exits
// right after Close, the Server's pool and Serve on a real port, a hook
// that blocks on a lock (which a bubble cannot wait out). The rest of the
// session's behaviour is tested over Pipes in synctest bubbles.

// TestAcceptQueueBounded: sessions waiting for Accept are bounded; past
// the bound the server refuses connections with CONNECTION_REFUSED, which
// Dial reports as a typed error, and takes them again once Accept made room.
func TestAcceptQueueBounded(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			ls := startNetServer(t, quietConfig(nil), &ServerOptions{MaxPendingSessions: 1})
			cfg := func() *Config {
				_, clientTLS := fakeTLS()
				return quietConfig(&Config{TLSConfig: clientTLS})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			url := tr.scheme + "://" + ls.srv.Addr().String() + "/"
			first, err := Dial(ctx, url, cfg())
			require.NoError(t, err)
			defer func() { first.Close() }()

			var refused error
			for range 50 {
				s, err := Dial(ctx, url, cfg())
				if err == nil {
					// It got in while the first was still in its
					// SETUP exchange on the server, and took its
					// place: the first is closed as busy.
					select {
					case <-first.Context().Done():
					case <-ctx.Done():
						require.FailNow(t, "two sessions in a pool of one")
					}
					var se *SessionError
					require.ErrorAs(t, context.Cause(first.Context()), &se)
					assert.Equal(t, wire.InternalError, se.Code)
					assert.Equal(t, "server busy", se.Reason)
					first.Close()
					first = s
					continue
				}
				if errors.Is(err, ErrConnectionRefused) {
					refused = err
					break
				}
				// It passed the handshake while the first was
				// still setting up, and found no place once the
				// first had set up: closed as busy, raw QUIC with
				// INTERNAL_ERROR, HTTP/3 before its CONNECT with
				// H3_EXCESSIVE_LOAD.
				if tr.scheme == "https" {
					var te *TransportError
					require.ErrorAs(t, err, &te, "a busy server closes a connection that got in: %v", err)
					assert.Equal(t, transport.ConnApplicationClose, te.kind)
					assert.Equal(t, uint64(0x107), te.Code)
					assert.True(t, te.Remote)
				} else {
					var se *SessionError
					require.ErrorAs(t, err, &se, "a busy server closes a session that got in: %v", err)
					assert.Equal(t, wire.InternalError, se.Code)
				}
				time.Sleep(20 * time.Millisecond)
			}
			require.Error(t, refused, "the server never refused a connection")
			var te *TransportError
			require.ErrorAs(t, refused, &te)
			assert.Equal(t, transport.ConnTransportClose, te.kind)
			assert.Equal(t, uint64(0x2), te.Code)
			assert.True(t, te.Remote)
			var qe *quic.TransportError
			assert.ErrorAs(t, refused, &qe)

			s, err := ls.srv.Accept(ctx)
			require.NoError(t, err)
			defer s.Close()
			second, err := Dial(ctx, url, cfg())
			require.NoError(t, err, "room again after Accept")
			second.Close()
		})
	}
}

// closeBeforeExitReachesPeer: a client that closes and then loses its
// socket at once, as a process that exits, still tells the server: the
// server's session ends promptly with the client's code, not after an
// idle timeout.
func closeBeforeExitReachesPeer(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			for i := range 5 {
				t.Run(fmt.Sprint(i), func(t *testing.T) { closeBeforeExit(t, tr.scheme) })
			}
		})
	}
}

// finAfterSessionEndReportsCause: a request's FIN that comes after the
// session ended fails, on WebTransport, where the close reset the stream,
// with the session's cause and not the transport's close error. A
// TrackStatus whose TRACK_STATUS the handler had already received, but
// which was still finishing its stream when the session ended, returned
// that error (TestSessionEndReachesBlockedCalls/call, on a busy machine).
// Here the FIN comes after the end every time.
func finAfterSessionEndReportsCause(t *testing.T) {
	for _, tr := range transports {
		for _, local := range []bool{true, false} {
			name := tr.name + "/peer"
			if local {
				name = tr.name + "/local"
			}
			t.Run(name, func(t *testing.T) {
				started := make(chan struct{}, 1)
				p := newPair(t, tr.scheme, &Config{Handler: blockingTrackStatus(started)}, nil)
				str, err := p.client.conn.OpenStreamSync(testCtx(t, fakeGuard))
				require.NoError(t, err)
				rs := newRequestStream(p.client, str, p.client.ids.allocate(), true)
				require.NoError(t, rs.write(&wire.TrackStatus{RequestID: rs.id, TrackNamespace: testTrack.Namespace, TrackName: testTrack.Name}))
				recvOrFail(t, started)
				if local {
					require.NoError(t, p.client.CloseWithError(wire.GoawayTimeout, "bye"))
				} else {
					require.NoError(t, p.server.CloseWithError(wire.GoawayTimeout, "bye"))
					<-p.client.Context().Done()
				}
				if err := rs.fin(); err != nil {
					assert.Same(t, context.Cause(p.client.Context()), err)
				}
			})
		}
	}
}

// idleSessionStaysUp: with keep-alive on by default, a session idle for
// longer than its idle timeout stays up.
func idleSessionStaysUp(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			p := newPair(t, tr.scheme, &Config{MaxIdleTimeout: time.Second}, &Config{MaxIdleTimeout: time.Second})
			time.Sleep(3 * time.Second)
			assert.NoError(t, p.client.Context().Err(), "client session")
			assert.NoError(t, p.server.Context().Err(), "server session")
			_, err := p.client.TrackStatus(context.Background(), testTrack, wire.Params{})
			var re *RequestError
			assert.ErrorAs(t, err, &re, "the session still serves requests")
		})
	}
}

// idleTimeoutIsTransportError: without keep-alive an idle session
// dies, and says it was an idle timeout, not a protocol violation; the
// blocked call and the session's cause agree.
func idleTimeoutIsTransportError(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			started := make(chan struct{}, 1)
			cfg := func(h Handler) *Config {
				return &Config{MaxIdleTimeout: time.Second, KeepAlivePeriod: -1, Handler: h}
			}
			p := newPair(t, tr.scheme, cfg(blockingTrackStatus(started)), cfg(nil))
			errc := startBlockedCall(t, p, started)
			for _, s := range []*Session{p.client, p.server} {
				errs := errc
				if s == p.server {
					errs = nil
				}
				var se *SessionError
				if errs != nil {
					se = endedWith(t, s, errs, 10*time.Second)
				} else {
					select {
					case <-s.Context().Done():
					case <-time.After(10 * time.Second):
						require.FailNow(t, "server session still up")
					}
					require.ErrorAs(t, context.Cause(s.Context()), &se)
				}
				assert.Equal(t, wire.InternalError, se.Code, "no MoQT code: %v", se)
				require.NotNil(t, se.Transport, "a transport death: %v", se)
				assert.Equal(t, transport.ConnIdleTimeout, se.Transport.kind)
				var ne net.Error // what the QUIC library reports, unwrapped
				require.ErrorAs(t, se.Transport, &ne)
				assert.True(t, ne.Timeout())
				assert.Contains(t, se.Error(), "idle timeout")
				var te *TransportError
				assert.ErrorAs(t, se, &te)
				var qe *quic.IdleTimeoutError
				assert.ErrorAs(t, se, &qe, "quic-go's error is in the chain")
				assert.ErrorIs(t, se, net.ErrClosed)
			}
		})
	}
}

// TestMaxIncomingStreams: the peer may have no more request streams open
// than Config.MaxIncomingStreams allows; the next waits for credit.
func TestMaxIncomingStreams(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			limit := int64(1)
			if tr.scheme == "https" {
				limit = 2 // the CONNECT stream is one of them
			}
			started := make(chan struct{}, 1)
			p := newPair(t, tr.scheme, &Config{Handler: blockingTrackStatus(started), MaxIncomingStreams: limit}, nil)
			_ = startBlockedCall(t, p, started)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			_, err := p.client.TrackStatus(ctx, testTrack, wire.Params{})
			assert.ErrorIs(t, err, context.DeadlineExceeded, "no stream credit for a second request")
			select {
			case <-started:
				assert.Fail(t, "a second request reached the handler")
			default:
			}
		})
	}
}

// blockedCallsGetSessionCause: a call blocked when the session
// ends, by a local or a peer close, returns the session's cause.
func blockedCallsGetSessionCause(t *testing.T) {
	for _, tr := range transports {
		for _, local := range []bool{true, false} {
			name := tr.name + "/peer"
			if local {
				name = tr.name + "/local"
			}
			t.Run(name, func(t *testing.T) {
				started := make(chan struct{}, 1)
				p := newPair(t, tr.scheme, &Config{Handler: blockingTrackStatus(started)}, nil)
				errc := startBlockedCall(t, p, started)
				if local {
					require.NoError(t, p.client.CloseWithError(wire.GoawayTimeout, "bye"))
				} else {
					require.NoError(t, p.server.CloseWithError(wire.GoawayTimeout, "bye"))
				}
				se := endedWith(t, p.client, errc, 5*time.Second)
				assert.Equal(t, SessionError{Code: wire.GoawayTimeout, Reason: "bye", Remote: !local}, *se)
			})
		}
	}
}

// CloseWithError reaches the peer with its code and reason; the Context's
// cause is the *SessionError.
func closeWithErrorReachesPeer(t *testing.T) {
	for _, scheme := range []string{"moqt", "https"} {
		t.Run(scheme, func(t *testing.T) {
			ls := startNetServer(t, nil, nil)
			fp := ls.dial(scheme)
			st := &wire.Setup{}
			if scheme == "moqt" {
				st = ls.clientSetup()
			}
			fp.sendSetup(st)
			s := ls.accept()
			require.NoError(t, s.CloseWithError(wire.Unauthorized, "token expired"))
			ce := fp.expectClose(wire.Unauthorized)
			assert.Equal(t, "token expired", ce.Reason)
			se := expectSessionError(t, s, wire.Unauthorized)
			assert.Equal(t, "token expired", se.Reason)
			assert.False(t, se.Remote)
			// The first close wins.
			require.NoError(t, s.CloseWithError(wire.InternalError, "later"))
			assert.Equal(t, wire.Unauthorized, expectSessionError(t, s, wire.Unauthorized).Code)
		})
	}
}

// C003 over WebTransport, whose streams come from another library.
func TestC003_PublisherResetsAfterStopSendingWebTransport(t *testing.T) {
	h, served := servedCh(AcceptOptions{})
	ls := startNetServer(t, &Config{Handler: h}, nil)
	fp := ls.dial("https")
	fp.sendSetup(&wire.Setup{})
	ls.accept()
	fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
	expect[*wire.SubscribeOK](fs)
	ss := recvOrFail(t, served)
	fs.stopSending(wire.ResetCancelled)
	closedOrFail(t, ss.Context().Done(), "publisher did not see STOP_SENDING")
	assert.ErrorIs(t, ss.Err(), ErrCancelled)
	assert.True(t, ss.rs.isCancelled())
	fp.alive(2)
}

// TestSubgroupCloseBetweenFanOutHeaders: Close that stops an object's
// start after one stream got the header, its payload still to come, must
// reset that stream too. Finishing it would put a FIN inside an object,
// which the subscriber reads as a protocol violation (§11.3.2: a stream
// that lacks an object it carries is reset).
func TestSubgroupCloseBetweenFanOutHeaders(t *testing.T) {
	for _, scheme := range []string{"moqt", "https"} {
		t.Run(scheme, func(t *testing.T) {
			var w *SubgroupWriter
			closed := make(chan error, 1)
			var once sync.Once
			cfg := &Config{hooks: &sessionHooks{}}
			f := newFanOut(t, scheme, cfg, wire.Params{})
			fast := readSubgroupAsync(f.ctx, f.fast)
			slow := readSubgroupAsync(f.ctx, f.slow)
			w = f.track.OpenSubgroup(0, 0, SubgroupOptions{})
			require.NoError(t, writeObject(w, 0, nil, []byte("x")))
			cfg.hooks.headerSent = func() {
				once.Do(func() {
					go func() { closed <- w.Close() }()
					require.Eventually(t, w.sq.Stopped, 5*time.Second, time.Millisecond, "Close stops the write")
				})
			}
			err := writeObject(w, 1, nil, make([]byte, 5000)) // payload after the header
			assert.ErrorIs(t, err, ErrSubgroupClosed)
			assert.NoError(t, <-closed)
			for name, ch := range map[string]<-chan received{"fast": fast, "slow": slow} {
				// A stream whose bytes were all still queued at the reset
				// may never reach its subscriber: it need not end, but
				// it must not end with a FIN.
				finished, err := streamEnd(f.ctx, ch, 3*time.Second)
				assert.False(t, finished, "%s: a stream without object 1 whole is not finished", name)
				if err != nil {
					var se *StreamError
					assert.ErrorAs(t, err, &se, "%s: the stream is reset", name)
				}
			}
			assert.NoError(t, f.fast.Err(), "no protocol violation at the subscriber")
			assert.NoError(t, f.slow.Err())
		})
	}
}

// TestServe: Listen and Serve, and no Accept loop of the test's own, take
// more sessions over both transports than MaxPendingSessions holds, whose
// Handler answers their requests; ending Serve's context drains every one
// with GOAWAY and NO_ERROR, and Serve returns nil. Serving a closed
// Server returns net.ErrClosed.
func TestServe(t *testing.T) {
	cert, hash, err := GenerateCertificate("127.0.0.1")
	require.NoError(t, err)
	h := newAcceptAll()
	srv, err := Listen("127.0.0.1:0", quietConfig(&Config{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, Handler: h}),
		&ServerOptions{MaxPendingSessions: 2, DrainTimeout: 10 * time.Second})
	require.NoError(t, err)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	serveCtx, stop := context.WithCancel(ctx)
	served := goErr(func() error { return srv.Serve(serveCtx) })

	var clients []*Session
	for range 3 { // more than MaxPendingSessions of each: without Serve the third is refused
		for _, tr := range transports {
			c, err := Dial(ctx, tr.scheme+"://"+srv.Addr().String()+"/live", quietConfig(&Config{
				TLSConfig: &tls.Config{RootCAs: x509.NewCertPool()}, ServerCertificateHashes: [][32]byte{hash}}))
			require.NoError(t, err, tr.name)
			defer c.Close()
			_, err = c.Subscribe(ctx, testTrack, wire.Params{})
			require.NoError(t, err, "the Handler serves the accepted session")
			clients = append(clients, c)
		}
	}
	for range clients {
		ss := <-h.served
		require.NoError(t, ss.End(wire.DoneTrackEnded, ""))
	}
	// The subscriptions end as the publisher ended them, so the drain
	// needs no timeout.

	stop()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-ctx.Done():
		require.FailNow(t, "Serve did not return")
	}
	for _, c := range clients {
		require.Error(t, c.Context().Err(), "Serve returns once every session has ended")
		select {
		case <-c.GoingAway():
		default:
			assert.Fail(t, "no GOAWAY before the close")
		}
		code, _ := closeOf(t, c)
		assert.Equal(t, wire.NoError, code)
	}

	require.NoError(t, srv.Close())
	assert.ErrorIs(t, srv.Serve(ctx), net.ErrClosed)
}

// TestIdleTimeout: QUIC's idle timeout, which keep-alive (on by default)
// holds off, and which otherwise ends the session as a transport error.
func TestIdleTimeout(t *testing.T) {
	t.Run("keep-alive", idleSessionStaysUp)
	t.Run("no keep-alive", idleTimeoutIsTransportError)
}

// TestSessionEndReachesBlockedCalls: a request blocked when the session
// ends, on either transport, by either end, fails with the session's
// cause.
func TestSessionEndReachesBlockedCalls(t *testing.T) {
	t.Run("call", blockedCallsGetSessionCause)
	t.Run("fin", finAfterSessionEndReportsCause)
}

// TestCloseReachesPeer: a close's code and reason reach the peer over
// each transport, even from a process that exits right after it.
func TestCloseReachesPeer(t *testing.T) {
	t.Run("code", closeWithErrorReachesPeer)
	t.Run("before exit", closeBeforeExitReachesPeer)
}
