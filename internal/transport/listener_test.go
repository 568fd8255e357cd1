package transport_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/moqt-go/moqt/internal/pending"
	"github.com/moqt-go/moqt/internal/transport"
)

// TestSharedPort serves a raw QUIC client and a WebTransport client on one
// UDP port at the same time.
func TestSharedPort(t *testing.T) {
	l := listen(t, nil)
	ctx := guardCtx(t)

	type dialed struct {
		conn transport.Conn
		err  error
	}
	dials := make(chan dialed, len(kinds))
	for _, k := range kinds {
		go func() {
			c, err := transport.Dial(ctx, url(l, k, "/shared"), clientTLS, nil)
			dials <- dialed{c, err}
		}()
	}
	servers := map[bool]transport.Conn{}
	for range kinds {
		c, _, err := l.Accept(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, c.CloseWithError(0, "")) })
		servers[c.WebTransport()] = c
	}
	clients := map[bool]transport.Conn{}
	for range kinds {
		d := <-dials
		require.NoError(t, d.err)
		t.Cleanup(func() { assert.NoError(t, d.conn.CloseWithError(0, "")) })
		clients[d.conn.WebTransport()] = d.conn
	}
	require.Len(t, servers, 2, "want one raw QUIC and one WebTransport connection")
	require.Len(t, clients, 2)
	for _, wt := range []bool{false, true} {
		assert.Equal(t, l.Addr().String(), servers[wt].LocalAddr().String())
		roundTrip(t, clients[wt], servers[wt], "shared port")
	}
}

// TestWebTransportRefused checks the requests that must not become
// sessions. After each refusal a good client connects, and Accept must
// return it first: the refused one never reached Accept.
func TestWebTransportRefused(t *testing.T) {
	tests := []struct {
		name   string
		dial   func(ctx context.Context, url string) error
		status int
	}{
		{
			name: "unknown protocol",
			dial: func(ctx context.Context, url string) error {
				c, err := transport.Dial(ctx, url, clientTLS, &transport.DialConfig{Protocols: []string{"moqt-99"}})
				if err == nil {
					return c.CloseWithError(0, "")
				}
				return err
			},
			status: http.StatusBadRequest,
		},
		{
			name: "no protocols",
			dial: func(ctx context.Context, url string) error {
				return dialWebTransport(ctx, url, nil, nil)
			},
			status: http.StatusBadRequest,
		},
		{
			name: "foreign origin",
			dial: func(ctx context.Context, url string) error {
				c, err := transport.Dial(ctx, url, clientTLS, &transport.DialConfig{
					Header: http.Header{"Origin": {"https://evil.example"}},
				})
				if err == nil {
					return c.CloseWithError(0, "")
				}
				return err
			},
			status: http.StatusForbidden,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := listen(t, nil)
			ctx := guardCtx(t)
			https := url(l, kinds[1], "/refused")
			err := tc.dial(ctx, https)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "status "+strconv.Itoa(tc.status))

			client, server, info := connect(t, l, kinds[1], "/good", nil)
			assert.Equal(t, "/good", info.Path)
			assert.Equal(t, transport.ProtocolDraft21, server.Protocol())
			roundTrip(t, client, server, "after refusal")
		})
	}
}

// dialWebTransport dials with webtransport-go directly, offering protocols
// (none if nil), and reports a refusal as an error naming the status.
func dialWebTransport(ctx context.Context, url string, protocols []string, hdr http.Header) error {
	tlsConf := clientTLS.Clone()
	tlsConf.NextProtos = []string{http3.NextProtoH3}
	d := webtransport.Transport{TLSClientConfig: tlsConf, ApplicationProtocols: protocols}
	defer d.Close()
	rsp, sess, err := d.Dial(ctx, url, hdr)
	if err != nil {
		if rsp != nil {
			return errors.New("refused with status " + strconv.Itoa(rsp.StatusCode))
		}
		return err
	}
	return sess.CloseWithError(0, "")
}

func TestCheckOrigin(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	l := listen(t, &transport.ListenConfig{CheckOrigin: func(r *http.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Header.Get("Origin"))
		return r.Header.Get("Origin") == "https://player.example"
	}})
	_, _, info := connect(t, l, kinds[1], "/", &transport.DialConfig{
		Header: http.Header{"Origin": {"https://player.example"}},
	})
	assert.Equal(t, "https://player.example", info.Header.Get("Origin"))

	_, err := transport.Dial(guardCtx(t), url(l, kinds[1], "/"), clientTLS, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "403")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"https://player.example", ""}, seen)
}

func TestDefaultCheckOrigin(t *testing.T) {
	l := listen(t, nil)
	tests := []struct {
		origin string
		ok     bool
	}{
		{"https://" + l.Addr().String(), true},
		{"https://" + strings.ToUpper("localhost") + ":1", false},
		{"null", false},
	}
	for _, tc := range tests {
		t.Run(tc.origin, func(t *testing.T) {
			c, err := transport.Dial(guardCtx(t), url(l, kinds[1], "/"), clientTLS, &transport.DialConfig{
				Header: http.Header{"Origin": {tc.origin}},
			})
			if !tc.ok {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "403")
				return
			}
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, c.CloseWithError(0, "")) })
			s, _, err := l.Accept(guardCtx(t))
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, s.CloseWithError(0, "")) })
		})
	}
}

// TestRawQUICForeignALPN checks that a QUIC client offering no MoQT ALPN
// (nor h3) fails the TLS handshake with no_application_protocol.
func TestRawQUICForeignALPN(t *testing.T) {
	l := listen(t, nil)
	for _, alpn := range []string{"h2", "moqt-99", "moq-00"} {
		t.Run(alpn, func(t *testing.T) {
			tlsConf := clientTLS.Clone()
			tlsConf.NextProtos = []string{alpn}
			conn, err := quic.DialAddr(guardCtx(t), l.Addr().String(), tlsConf, &quic.Config{EnableDatagrams: true})
			if err == nil {
				_ = conn.CloseWithError(0, "")
				t.Fatal("handshake succeeded")
			}
			var terr *quic.TransportError
			require.ErrorAs(t, err, &terr)
			const noApplicationProtocol = 120 // TLS alert, RFC 7301 §3.2
			assert.Equal(t, quic.TransportErrorCode(0x100+noApplicationProtocol), terr.ErrorCode)
		})
	}
}

// TestRawQUICWithoutDatagrams checks that the server refuses a raw QUIC
// client that did not negotiate QUIC DATAGRAM (§6.2).
func TestRawQUICWithoutDatagrams(t *testing.T) {
	l := listen(t, nil)
	ctx := guardCtx(t)
	tlsConf := clientTLS.Clone()
	tlsConf.NextProtos = []string{transport.ProtocolDraft21}
	conn, err := quic.DialAddr(ctx, l.Addr().String(), tlsConf, &quic.Config{})
	require.NoError(t, err)
	_, err = conn.AcceptStream(ctx)
	var aerr *quic.ApplicationError
	require.ErrorAs(t, err, &aerr)
	assert.True(t, aerr.Remote)
	assert.Equal(t, quic.ApplicationErrorCode(0x3), aerr.ErrorCode) // PROTOCOL_VIOLATION
}

func TestListenerClose(t *testing.T) {
	before := goleak.IgnoreCurrent()
	l, err := transport.Listen("127.0.0.1:0", serverTLS, nil)
	require.NoError(t, err)
	ctx := guardCtx(t)

	var clients, servers []transport.Conn
	for _, k := range kinds {
		accepted := make(chan acceptResult, 1)
		go func() {
			c, info, err := l.Accept(ctx)
			accepted <- acceptResult{c, info, err}
		}()
		c, err := transport.Dial(ctx, url(l, k, "/"), clientTLS, nil)
		require.NoError(t, err)
		a := <-accepted
		require.NoError(t, a.err)
		clients = append(clients, c)
		servers = append(servers, a.conn)
		// Streams that are open, and an Accept that is blocked, when the
		// listener closes.
		str, err := c.OpenStreamSync(ctx)
		require.NoError(t, err)
		_, err = str.Write([]byte("open"))
		require.NoError(t, err)
		go func() { _, _ = a.conn.AcceptUniStream(ctx) }()
	}
	// A client that completed only the QUIC handshake.
	tlsConf := clientTLS.Clone()
	tlsConf.NextProtos = []string{http3.NextProtoH3}
	idle, err := quic.DialAddr(ctx, l.Addr().String(), tlsConf, &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true})
	require.NoError(t, err)

	acceptErr := make(chan error, 1)
	go func() {
		_, _, err := l.Accept(ctx)
		acceptErr <- err
	}()

	require.NoError(t, l.Close())
	require.NoError(t, l.Close(), "a second Close is a no-op")

	err = <-acceptErr
	assert.ErrorIs(t, err, transport.ErrListenerClosed)
	assert.ErrorIs(t, err, net.ErrClosed)
	_, _, err = l.Accept(ctx)
	assert.ErrorIs(t, err, transport.ErrListenerClosed)

	for _, c := range append(servers, clients...) {
		select {
		case <-c.Context().Done():
		case <-ctx.Done():
			t.Fatal("connection still open after Listener.Close")
		}
	}
	// The raw QUIC client sees MoQT's NO_ERROR.
	var ce *transport.CloseError
	require.ErrorAs(t, context.Cause(clients[0].Context()), &ce)
	assert.Equal(t, transport.CloseError{Code: 0, Reason: "server closed", Remote: true}, *ce)
	// The WebTransport client sees its connection go.
	assert.ErrorIs(t, context.Cause(clients[1].Context()), net.ErrClosed)
	select {
	case <-idle.Context().Done():
	case <-ctx.Done():
		t.Fatal("idle connection still open after Listener.Close")
	}

	goleak.VerifyNone(t, before)
}

// dialH3 completes an HTTP/3 handshake with l and sends nothing: no
// CONNECT. It returns once the server serves the connection (its control
// stream arrived), that is, once l has admitted it.
func dialH3(t *testing.T, l *transport.Listener) *quic.Conn {
	t.Helper()
	ctx := guardCtx(t)
	tlsConf := clientTLS.Clone()
	tlsConf.NextProtos = []string{http3.NextProtoH3}
	conn, err := quic.DialAddr(ctx, l.Addr().String(), tlsConf, &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.CloseWithError(0, "") })
	_, err = conn.AcceptUniStream(ctx)
	require.NoError(t, err, "the server's HTTP/3 control stream")
	return conn
}

// closedBy waits for conn to end and requires that the server closed it
// with code and reason.
func closedBy(t *testing.T, conn *quic.Conn, code quic.ApplicationErrorCode, reason string) {
	t.Helper()
	select {
	case <-conn.Context().Done():
	case <-guardCtx(t).Done():
		require.FailNow(t, "connection still open")
	}
	var ae *quic.ApplicationError
	require.ErrorAs(t, context.Cause(conn.Context()), &ae)
	assert.True(t, ae.Remote)
	assert.Equal(t, code, ae.ErrorCode)
	assert.Equal(t, reason, ae.ErrorMessage)
}

// TestListenerPool: every connection takes a place in the pool at the end
// of its handshake, HTTP/3 ones before their CONNECT too; a newcomer
// takes the place of the oldest one still setting up (an HTTP/3 one
// without a session is closed with H3_EXCESSIVE_LOAD), and a pool full of
// connections set up refuses newcomers in their handshake.
func TestListenerPool(t *testing.T) {
	pool := pending.NewPool(2)
	l := listen(t, &transport.ListenConfig{Pool: pool})
	older := dialH3(t, l)
	newer := dialH3(t, l)
	setting, ready := pool.Counts()
	require.Equal(t, []int{2, 0}, []int{setting, ready})

	_, _, wtInfo := connect(t, l, kinds[1], "/", nil)
	require.NotNil(t, wtInfo.Ticket, "the session carries its connection's place")
	closedBy(t, older, 0x107, "server busy")
	assert.NoError(t, newer.Context().Err(), "one newcomer displaces one connection")
	require.True(t, wtInfo.Ticket.Ready())

	_, _, quicInfo := connect(t, l, kinds[0], "/", nil)
	require.NotNil(t, quicInfo.Ticket)
	closedBy(t, newer, 0x107, "server busy")
	require.True(t, quicInfo.Ticket.Ready())
	setting, ready = pool.Counts()
	require.Equal(t, []int{0, 2}, []int{setting, ready})

	for _, k := range kinds {
		_, err := transport.Dial(guardCtx(t), url(l, k, "/"), clientTLS, nil)
		var ce *transport.ConnError
		require.ErrorAs(t, err, &ce, "%s: a pool full of sessions set up refuses", k.name)
		assert.Equal(t, transport.ConnTransportClose, ce.Kind)
		assert.Equal(t, uint64(quic.ConnectionRefused), ce.Code)
		assert.True(t, ce.Remote)
	}

	wtInfo.Ticket.Release()
	_, _, info := connect(t, l, kinds[0], "/", nil)
	assert.NotNil(t, info.Ticket, "a place given back takes the next connection")
}

// TestConnectTimeout: an HTTP/3 connection that opens no WebTransport
// session within ListenConfig.ConnectTimeout is closed with H3_NO_ERROR;
// one whose session came in time is left alone.
func TestConnectTimeout(t *testing.T) {
	l := listen(t, &transport.ListenConfig{ConnectTimeout: 200 * time.Millisecond})
	client, server, _ := connect(t, l, kinds[1], "/", nil)
	idle := dialH3(t, l)
	closedBy(t, idle, 0x100, "no WebTransport session")
	// The session's connection started its wait first.
	roundTrip(t, client, server, "after the timeout")
	assert.NoError(t, client.Context().Err())
}
