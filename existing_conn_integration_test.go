package moqt

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// Sessions over connections the application made itself (existing_conn.go):
// raw QUIC from quic-go's own Listen and Dial, WebTransport from
// webtransport-go's own Server and Transport, on 127.0.0.1.

// ownQUIC makes a raw QUIC connection the application's way: the server
// offers serverALPNs, the client clientALPNs. It returns both ends.
func ownQUIC(t *testing.T, serverALPNs, clientALPNs []string, datagrams bool) (client, server *quic.Conn) {
	t.Helper()
	serverTLS, clientTLS := fakeTLS()
	st, ct := serverTLS.Clone(), clientTLS.Clone()
	st.NextProtos, ct.NextProtos = serverALPNs, clientALPNs
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.Listen(st, &quic.Config{EnableDatagrams: datagrams})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = ln.Close()
		_ = tr.Close()
		_ = udp.Close()
	})
	ctx := fakeCtx(t)
	accepted := make(chan *quic.Conn, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	client, err = quic.DialAddr(ctx, ln.Addr().String(), ct, &quic.Config{EnableDatagrams: datagrams})
	require.NoError(t, err)
	server, ok := <-accepted
	require.True(t, ok, "no connection accepted")
	t.Cleanup(func() {
		_ = client.CloseWithError(0, "")
		_ = server.CloseWithError(0, "")
	})
	return client, server
}

// startBoth runs the client's and the server's ends of SETUP at once.
func startBoth(t *testing.T, client func() (*Session, error), server func() (*Session, error)) (c, s *Session) {
	t.Helper()
	type result struct {
		s   *Session
		err error
	}
	served := make(chan result, 1)
	go func() {
		s, err := server()
		served <- result{s, err}
	}()
	c, err := client()
	r := <-served
	if c != nil {
		closeOnCleanup(t, c)
	}
	if r.s != nil {
		closeOnCleanup(t, r.s)
	}
	require.NoError(t, err)
	require.NoError(t, r.err)
	return c, r.s
}

// roundTrip subscribes from client to testTrack, served by track on the
// server, and checks every object of one subgroup.
func roundTrip(t *testing.T, client *Session, track *LocalTrack) {
	t.Helper()
	ctx := fakeCtx(t)
	sub, err := client.Subscribe(ctx, testTrack, wire.Params{})
	require.NoError(t, err)
	w := track.OpenSubgroup(0, 0, SubgroupOptions{})
	for i := range uint64(5) {
		require.NoError(t, writeObject(w, i, nil, []byte{byte(i)}))
	}
	require.NoError(t, w.Close())
	r, err := sub.AcceptSubgroup(ctx)
	require.NoError(t, err)
	ids, payloads := readSubgroup(t, r)
	assert.Equal(t, []uint64{0, 1, 2, 3, 4}, ids)
	assert.Equal(t, [][]byte{{0}, {1}, {2}, {3}, {4}}, payloads)
}

// ownQUICAccepted runs a session over a raw QUIC connection the
// application made: the version is the ALPN it negotiated, the URL's path
// and authority reach the server in SETUP, objects flow, and Close closes
// the connection with the session's code.
func ownQUICAccepted(t *testing.T) {
	qc, qs := ownQUIC(t, wire.ALPNs(), []string{wire.Draft20.ALPN()}, true)
	track, serverCfg, _ := newServedTrack(t, testTrack, nil)
	ctx := fakeCtx(t)
	const url = "moqt://relay.test:4443/live?x=1"
	client, server := startBoth(t,
		func() (*Session, error) { return NewClientSession(ctx, qc, url, quietConfig(nil)) },
		func() (*Session, error) { return NewServerSession(ctx, qs, quietConfig(serverCfg)) })

	assert.Equal(t, wire.Draft20, client.Version())
	assert.Equal(t, wire.Draft20, server.Version())
	assert.False(t, server.WebTransport())
	assert.Equal(t, "/live?x=1", server.Path())
	assert.Equal(t, "relay.test:4443", server.Authority())
	assert.Equal(t, "/live?x=1", client.Path())
	roundTrip(t, client, track)

	require.NoError(t, client.CloseWithError(wire.NoError, "done"))
	<-server.Context().Done()
	var se *SessionError
	require.ErrorAs(t, context.Cause(server.Context()), &se)
	assert.Equal(t, wire.NoError, se.Code)
	assert.True(t, se.Remote)
	<-qs.Context().Done() // the session closed the connection
}

// ownQUICRefused: a connection without an acceptable ALPN,
// or without QUIC DATAGRAM, is refused with an error and left open; a
// URL that is not moqt:// is refused before anything is sent.
func ownQUICRefused(t *testing.T) {
	ctx := fakeCtx(t)
	t.Run("alpn", func(t *testing.T) {
		qc, qs := ownQUIC(t, []string{"other"}, []string{"other"}, true)
		_, err := NewClientSession(ctx, qc, "moqt://127.0.0.1/", quietConfig(nil))
		require.ErrorContains(t, err, "no MoQT version negotiated")
		require.ErrorContains(t, err, `"other"`)
		_, err = NewServerSession(ctx, qs, quietConfig(nil))
		require.ErrorContains(t, err, "no MoQT version negotiated")
		assert.NoError(t, qc.Context().Err(), "the connection is the caller's")
		assert.NoError(t, qs.Context().Err(), "the connection is the caller's")
	})
	t.Run("version", func(t *testing.T) {
		// moqt-20 negotiated, but the Config accepts only moqt-21.
		qc, _ := ownQUIC(t, []string{wire.Draft20.ALPN()}, []string{wire.Draft20.ALPN()}, true)
		_, err := NewClientSession(ctx, qc, "moqt://127.0.0.1/", quietConfig(&Config{Versions: []wire.Version{wire.Draft21}}))
		require.ErrorContains(t, err, "no MoQT version negotiated")
		assert.NoError(t, qc.Context().Err())
	})
	t.Run("datagram", func(t *testing.T) {
		qc, _ := ownQUIC(t, wire.ALPNs(), wire.ALPNs(), false)
		_, err := NewClientSession(ctx, qc, "moqt://127.0.0.1/", quietConfig(nil))
		require.ErrorContains(t, err, "QUIC DATAGRAM")
		assert.NoError(t, qc.Context().Err())
	})
	t.Run("url", func(t *testing.T) {
		qc, _ := ownQUIC(t, wire.ALPNs(), wire.ALPNs(), true)
		_, err := NewClientSession(ctx, qc, "https://127.0.0.1/", quietConfig(nil))
		require.ErrorContains(t, err, "moqt:// URL")
		assert.NoError(t, qc.Context().Err())
	})
}

// ownWebTransport is an application's WebTransport server on 127.0.0.1
// offering protocols; each session its handler upgrades goes to serve,
// with its request. It returns the server's https:// URL for /live?x=1.
func ownWebTransport(t *testing.T, protocols []string, serve func(*webtransport.Session, *http.Request)) string {
	t.Helper()
	serverTLS, _ := fakeTLS()
	wt := &webtransport.Server{ApplicationProtocols: protocols}
	wt.H3 = &http3.Server{
		TLSConfig: http3.ConfigureTLSConfig(serverTLS.Clone()),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sess, err := wt.Upgrade(w, r)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			serve(sess, r)
		}),
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wt.Serve(udp)
	}()
	t.Cleanup(func() {
		_ = wt.Close()
		_ = udp.Close()
		<-done
	})
	return "https://" + udp.LocalAddr().String() + "/live?x=1"
}

// dialOwnWebTransport dials url with the application's own Transport,
// offering protocols.
func dialOwnWebTransport(t *testing.T, url string, protocols []string) *webtransport.Session {
	t.Helper()
	_, clientTLS := fakeTLS()
	d := &webtransport.Transport{TLSClientConfig: clientTLS.Clone(), ApplicationProtocols: protocols}
	t.Cleanup(func() { _ = d.Close() })
	_, sess, err := d.Dial(fakeCtx(t), url, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sess.CloseWithError(0, "") })
	return sess
}

// ownWebTransportAccepted runs a session over a WebTransport
// session from webtransport-go's own Server and Transport: the version is
// the WT-Protocol, the server's Path and Authority come from the CONNECT
// request, objects flow, and Close ends the WebTransport session with
// the session's code, which the peer reads.
func ownWebTransportAccepted(t *testing.T) {
	track, serverCfg, _ := newServedTrack(t, testTrack, nil)
	ctx := fakeCtx(t)
	type result struct {
		s   *Session
		err error
	}
	served := make(chan result, 1)
	url := ownWebTransport(t, wire.ALPNs(), func(sess *webtransport.Session, r *http.Request) {
		s, err := NewWebTransportServerSession(ctx, sess, r, quietConfig(serverCfg))
		served <- result{s, err}
	})
	sess := dialOwnWebTransport(t, url, []string{wire.Draft20.ALPN(), wire.Draft21.ALPN()})
	client, err := NewWebTransportClientSession(ctx, sess, quietConfig(nil))
	r := <-served
	if client != nil {
		closeOnCleanup(t, client)
	}
	if r.s != nil {
		closeOnCleanup(t, r.s)
	}
	require.NoError(t, err)
	require.NoError(t, r.err)
	server := r.s

	assert.Equal(t, wire.Draft20, client.Version(), "the client's preference, as WT-Available-Protocols orders it")
	assert.Equal(t, wire.Draft20, server.Version())
	assert.True(t, client.WebTransport())
	assert.Equal(t, "/live?x=1", server.Path())
	assert.Equal(t, url[len("https://"):len(url)-len("/live?x=1")], server.Authority())
	roundTrip(t, client, track)

	// The server closes: webtransport-go's Transport closes the client's
	// QUIC connection as soon as its session ends, which may discard a
	// client's WT_CLOSE_SESSION (see NewWebTransportClientSession).
	require.NoError(t, server.CloseWithError(wire.NoError, "done"))
	<-client.Context().Done()
	var se *SessionError
	require.ErrorAs(t, context.Cause(client.Context()), &se)
	assert.Equal(t, wire.NoError, se.Code)
	assert.True(t, se.Remote)
	<-sess.Context().Done()
}

// ownWebTransportRefused: a WebTransport session whose
// server negotiated no protocol is refused on both ends and left open.
func ownWebTransportRefused(t *testing.T) {
	ctx := fakeCtx(t)
	refused := make(chan error, 1)
	url := ownWebTransport(t, nil, func(sess *webtransport.Session, r *http.Request) {
		_, err := NewWebTransportServerSession(ctx, sess, r, quietConfig(nil))
		if err == nil && sess.Context().Err() != nil {
			err = errors.New("session closed")
		}
		refused <- err
	})
	sess := dialOwnWebTransport(t, url, wire.ALPNs())
	_, err := NewWebTransportClientSession(ctx, sess, quietConfig(nil))
	require.ErrorContains(t, err, "no MoQT version negotiated")
	select {
	case err := <-refused:
		require.ErrorContains(t, err, "no MoQT version negotiated")
	case <-time.After(fakeGuard):
		t.Fatal("the server's session was not refused")
	}
	assert.NoError(t, sess.Context().Err(), "the session is the caller's")
}

// TestNewSessionOverOwnQUIC: a session over a raw QUIC connection the
// application made, and the connections it refuses.
func TestNewSessionOverOwnQUIC(t *testing.T) {
	t.Run("accepted", ownQUICAccepted)
	t.Run("refused", ownQUICRefused)
}

// TestNewSessionOverOwnWebTransport: a session over a WebTransport session
// the application made, and one it refuses.
func TestNewSessionOverOwnWebTransport(t *testing.T) {
	t.Run("accepted", ownWebTransportAccepted)
	t.Run("refused", ownWebTransportRefused)
}
