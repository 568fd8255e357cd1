package transport

import (
	"context"
	"net"
	"time"

	"github.com/quic-go/quic-go"
)

// quicConn is a Conn over a raw QUIC connection (§6.2.2).
type quicConn struct {
	conn     *quic.Conn
	protocol string // the negotiated ALPN

	// ctx is cancelled, with the translated close error as its cause, once
	// conn's own context is done.
	ctx context.Context
}

func newQUICConn(conn *quic.Conn) *quicConn {
	ctx, cancel := context.WithCancelCause(context.Background())
	context.AfterFunc(conn.Context(), func() {
		cancel(fromQUIC(context.Cause(conn.Context())))
	})
	return &quicConn{conn: conn, protocol: conn.ConnectionState().TLS.NegotiatedProtocol, ctx: ctx}
}

func (c *quicConn) AcceptStream(ctx context.Context) (Stream, error) {
	s, err := c.conn.AcceptStream(ctx)
	if err != nil {
		return nil, fromQUIC(err)
	}
	s.SetPriority(UrgencyRequest, true)
	return quicStream{s}, nil
}

func (c *quicConn) AcceptUniStream(ctx context.Context) (ReceiveStream, error) {
	s, err := c.conn.AcceptUniStream(ctx)
	if err != nil {
		return nil, fromQUIC(err)
	}
	return quicReceiveStream{s}, nil
}

func (c *quicConn) OpenStreamSync(ctx context.Context) (Stream, error) {
	s, err := c.conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, fromQUIC(err)
	}
	s.SetPriority(UrgencyRequest, true)
	return quicStream{s}, nil
}

func (c *quicConn) OpenUniStreamSync(ctx context.Context) (SendStream, error) {
	s, err := c.conn.OpenUniStreamSync(ctx)
	if err != nil {
		return nil, fromQUIC(err)
	}
	s.SetPriority(UrgencyControl, false)
	return &quicSendStream{s: s}, nil
}

func (c *quicConn) OpenUniStream() (SendStream, error) {
	s, err := c.conn.OpenUniStream()
	if err != nil {
		return nil, fromQUIC(err)
	}
	s.SetPriority(UrgencyControl, false)
	return &quicSendStream{s: s}, nil
}

func (c *quicConn) SendDatagram(b []byte) error { return fromQUIC(c.conn.SendDatagram(b)) }

func (c *quicConn) ReceiveDatagram(ctx context.Context) ([]byte, error) {
	b, err := c.conn.ReceiveDatagram(ctx)
	return b, fromQUIC(err)
}

func (c *quicConn) CloseWithError(code uint64, reason string) error {
	err := c.conn.CloseWithError(quic.ApplicationErrorCode(quicCode(code)), closeReason(reason))
	<-c.ctx.Done()
	waitQlog(c.conn)
	return fromQUIC(err)
}

func (c *quicConn) Context() context.Context { return c.ctx }
func (c *quicConn) Protocol() string         { return c.protocol }
func (c *quicConn) WebTransport() bool       { return false }
func (c *quicConn) Path() PathCounts         { return pathOf(c.conn) }

func (c *quicConn) ReliableReset() bool {
	st := c.conn.ConnectionState().SupportsStreamResetPartialDelivery
	return st.Local && st.Remote
}
func (c *quicConn) LocalAddr() net.Addr  { return c.conn.LocalAddr() }
func (c *quicConn) RemoteAddr() net.Addr { return c.conn.RemoteAddr() }

// quicStream, quicSendStream and quicReceiveStream translate the codes and
// errors of quic-go streams.
type quicStream struct{ s *quic.Stream }

func (s quicStream) Read(b []byte) (int, error) {
	n, err := s.s.Read(b)
	return n, fromQUIC(err)
}

func (s quicStream) Write(b []byte) (int, error) {
	n, err := s.s.Write(b)
	return n, fromQUIC(err)
}

func (s quicStream) Close() error               { return fromQUIC(s.s.Close()) }
func (s quicStream) CancelWrite(code uint64)    { s.s.CancelWrite(quic.StreamErrorCode(quicCode(code))) }
func (s quicStream) CancelRead(code uint64)     { s.s.CancelRead(quic.StreamErrorCode(quicCode(code))) }
func (s quicStream) SetPriority(u int8, i bool) { s.s.SetPriority(u, i) }
func (s quicStream) Context() context.Context   { return s.s.Context() }
func (s quicStream) SetWriteDeadline(t time.Time) error {
	return s.s.SetWriteDeadline(t)
}

// quicSendStream also tracks what its writes left unreserved
// (reliable.go).
type quicSendStream struct {
	s *quic.SendStream
	r reservation
}

func (s *quicSendStream) Close() error { return fromQUIC(s.s.Close()) }
func (s *quicSendStream) CancelWrite(code uint64) {
	s.s.CancelWrite(quic.StreamErrorCode(quicCode(code)))
}
func (s *quicSendStream) SetPriority(u int8, i bool) { s.s.SetPriority(u, i) }
func (s *quicSendStream) Context() context.Context   { return s.s.Context() }
func (s *quicSendStream) SetWriteDeadline(t time.Time) error {
	return s.s.SetWriteDeadline(t)
}

type quicReceiveStream struct{ s *quic.ReceiveStream }

func (s quicReceiveStream) Read(b []byte) (int, error) {
	n, err := s.s.Read(b)
	return n, fromQUIC(err)
}

func (s quicReceiveStream) CancelRead(code uint64) {
	s.s.CancelRead(quic.StreamErrorCode(quicCode(code)))
}
