package transport

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"
)

// closeLinger bounds how long the QUIC connection under a WebTransport
// session that this endpoint closed stays open for its WT_CLOSE_SESSION
// capsule to be delivered. A peer closes the connection as soon as it reads
// the capsule (this package does); closing it ourselves at once could discard
// the capsule, and the peer would never learn the code.
const closeLinger = time.Second

// wtConn is a Conn over a WebTransport session (§6.2.1). Each session this
// package makes has its own QUIC connection: Dial opens one per session
// and the Listener's WebTransport server accepts one session per
// connection. A session the application made (WrapWebTransport) leaves
// its connection, which may carry other sessions, to the application.
type wtConn struct {
	sess *webtransport.Session
	// qconn is the connection under sess, closed when sess ends; nil when
	// the connection is the application's.
	qconn    *quic.Conn
	protocol string // the negotiated WT-Protocol

	// ctx is cancelled by sessionEnded, with the translated close error as
	// its cause.
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newWTConn(sess *webtransport.Session, qconn *quic.Conn) *wtConn {
	c := &wtConn{sess: sess, qconn: qconn, protocol: sess.SessionState().ApplicationProtocol}
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	context.AfterFunc(sess.Context(), c.sessionEnded)
	return c
}

// sessionEnded runs once when the session's context is done. It records the
// close error and closes the QUIC connection, if it is ours: at once if the
// peer ended the session, after the peer closes it or closeLinger if we did.
func (c *wtConn) sessionEnded() {
	err := sessionError(c.sess)
	if e, ok := errors.AsType[*webtransport.SessionError](err); ok {
		if e.Remote || c.qconn == nil {
			c.closeQUIC()
		} else {
			t := time.AfterFunc(closeLinger, c.closeQUIC)
			context.AfterFunc(c.qconn.Context(), func() { t.Stop() })
		}
		cause, _ := fromWebTransport(err)
		c.cancel(cause)
		return
	}
	// The CONNECT stream failed without WT_CLOSE_SESSION: the QUIC
	// connection went away under the session, or the peer reset or ended
	// the stream. Prefer the connection's reason when it has one.
	c.closeQUIC()
	if c.qconn != nil {
		if connErr := context.Cause(c.qconn.Context()); connErr != nil {
			if e, ok := errors.AsType[*quic.ApplicationError](connErr); !ok || e.Remote {
				err = connErr
			}
		}
	}
	if e, ok := connError(err); ok {
		c.cancel(e)
		return
	}
	c.cancel(&ConnError{Kind: ConnLost, Err: err})
}

func (c *wtConn) closeQUIC() {
	if c.qconn != nil {
		_ = c.qconn.CloseWithError(codeH3NoError, "")
	}
}

// sessionError returns the error a closed session was closed with.
// webtransport-go has no accessor for it, but every call on a closed session
// returns it first; AcceptUniStream with a cancelled context neither blocks
// nor changes anything.
func sessionError(sess *webtransport.Session) error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := sess.AcceptUniStream(ctx)
	return err
}

func (c *wtConn) AcceptStream(ctx context.Context) (Stream, error) {
	s, err := c.sess.AcceptStream(ctx)
	if err != nil {
		return nil, c.translate(err)
	}
	return c.bidi(s), nil
}

func (c *wtConn) AcceptUniStream(ctx context.Context) (ReceiveStream, error) {
	s, err := c.sess.AcceptUniStream(ctx)
	if err != nil {
		return nil, c.translate(err)
	}
	return wtReceiveStream{s, c}, nil
}

func (c *wtConn) OpenStreamSync(ctx context.Context) (Stream, error) {
	s, err := c.sess.OpenStreamSync(ctx)
	if err != nil {
		return nil, c.translate(err)
	}
	return c.bidi(s), nil
}

func (c *wtConn) OpenUniStreamSync(ctx context.Context) (SendStream, error) {
	s, err := c.sess.OpenUniStreamSync(ctx)
	if err != nil {
		return nil, c.translate(err)
	}
	return c.uni(s), nil
}

func (c *wtConn) OpenUniStream() (SendStream, error) {
	s, err := c.sess.OpenUniStream()
	if err != nil {
		return nil, c.translate(err)
	}
	return c.uni(s), nil
}

// bidi and uni start a stream at the urgency a raw QUIC one starts with
// (see quicConn), placed among the HTTP/3 streams (wtUrgency). A stream
// this end opens has its WebTransport header sent at once (sendHeader).
func (c *wtConn) bidi(s *webtransport.Stream) wtStream {
	str := wtStream{s, c}
	str.SetPriority(UrgencyRequest, true)
	if send := bidiSend(s); send != nil {
		sendHeader(send)
	}
	return str
}

func (c *wtConn) uni(s *webtransport.SendStream) *wtSendStream {
	str := &wtSendStream{s: s, c: c}
	str.SetPriority(UrgencyControl, false)
	if sent, reserved := sendHeader(s); sent {
		str.u = quicUnder(s)
		str.r.unreserved.Store(!reserved)
	}
	return str
}

func (c *wtConn) SendDatagram(b []byte) error { return c.translate(c.sess.SendDatagram(b)) }

func (c *wtConn) ReceiveDatagram(ctx context.Context) ([]byte, error) {
	b, err := c.sess.ReceiveDatagram(ctx)
	if err == io.EOF {
		// The CONNECT stream ended, and the session with it.
		<-c.ctx.Done()
		return nil, context.Cause(c.ctx)
	}
	return b, c.translate(err)
}

// CloseWithError returns once the QUIC connection under the session is
// closed too: when the peer, having read WT_CLOSE_SESSION, closes it, or
// after closeLinger. Until then the capsule may sit in a send buffer, and
// a process that exits once Close returns would never send it. On the
// application's connection it returns once the capsule is queued: the
// connection's life is the application's.
func (c *wtConn) CloseWithError(code uint64, reason string) error {
	err := c.sess.CloseWithError(webtransport.SessionErrorCode(wtCode(code)), closeReason(reason))
	<-c.ctx.Done()
	if c.qconn != nil {
		<-c.qconn.Context().Done()
		waitQlog(c.qconn)
	}
	return c.translate(err)
}

func (c *wtConn) Context() context.Context { return c.ctx }
func (c *wtConn) Protocol() string         { return c.protocol }
func (c *wtConn) WebTransport() bool       { return true }
func (c *wtConn) ReliableReset() bool {
	st := c.sess.SessionState().ConnectionState.SupportsStreamResetPartialDelivery
	return st.Local && st.Remote && wtFields.ok
}
func (c *wtConn) Path() PathCounts     { return pathOf(cmp.Or(c.qconn, sessionQUIC(c.sess))) }
func (c *wtConn) LocalAddr() net.Addr  { return c.sess.LocalAddr() }
func (c *wtConn) RemoteAddr() net.Addr { return c.sess.RemoteAddr() }

// wtStream, wtSendStream and wtReceiveStream translate the codes and errors
// of webtransport-go streams through their session.
type wtStream struct {
	s *webtransport.Stream
	c *wtConn
}

func (s wtStream) Read(b []byte) (int, error) {
	n, err := s.s.Read(b)
	return n, s.c.translate(err)
}

func (s wtStream) Write(b []byte) (int, error) {
	n, err := s.s.Write(b)
	return n, s.c.translate(err)
}

func (s wtStream) Close() error { return s.c.translate(s.s.Close()) }

// CancelWrite first sets a past write deadline: a Write on a stream the
// peer stopped because its session is going away waits for this end's
// session to be torn down, and webtransport-go's CancelWrite does not wake
// it (nor does the session's close, once CancelWrite has forgotten the
// stream). Set before CancelWrite, the deadline cannot cut short the
// stream header that CancelWrite still sends on a stream never written to.
func (s wtStream) CancelWrite(code uint64) {
	_ = s.s.SetWriteDeadline(time.Unix(1, 0))
	s.s.CancelWrite(webtransport.StreamErrorCode(wtCode(code)))
}

// CancelRead also sets a past read deadline: webtransport-go's CancelRead
// does not wake a Read that is waiting for its session to be torn down.
func (s wtStream) CancelRead(code uint64) {
	s.s.CancelRead(webtransport.StreamErrorCode(wtCode(code)))
	_ = s.s.SetReadDeadline(time.Unix(1, 0))
}
func (s wtStream) SetPriority(u int8, i bool) {
	if send := bidiSend(s.s); send != nil {
		setWTPriority(send, u, i)
	}
}

// A request stream is never cut with a reliable size (see quicStream).
func (s wtStream) SetReliableBoundary() bool           { return false }
func (s wtStream) WriteMarked(b []byte) (int, error)   { return s.Write(b) }
func (s wtStream) WriteReserved(b []byte) (int, error) { return s.Write(b) }
func (s wtStream) Context() context.Context            { return s.s.Context() }
func (s wtStream) SetWriteDeadline(t time.Time) error {
	return s.c.translate(s.s.SetWriteDeadline(t))
}

// wtSendStream also keeps the QUIC stream under it (quicUnder), once its
// header is sent, and tracks what its writes left unreserved
// (reliable.go).
type wtSendStream struct {
	s *webtransport.SendStream
	c *wtConn
	u quicWriter // nil: writes and marks go through webtransport-go only
	r reservation
}

func (s *wtSendStream) Write(b []byte) (int, error) {
	n, err := s.r.plain(s.s.Write, b)
	return n, s.c.translate(err)
}

// WriteReserved is Write ending with its last bytes reserved on the QUIC
// stream under s (reservation).
func (s *wtSendStream) WriteReserved(b []byte) (int, error) {
	if s.u == nil {
		return s.Write(b)
	}
	n, err := s.r.write(s.u, s.s.Write, b)
	return n, s.c.translate(err)
}

// WriteMarked is writeMarked on the QUIC stream under s; the rest of b,
// and any error, through webtransport-go's Write.
func (s *wtSendStream) WriteMarked(b []byte) (int, error) {
	if s.u == nil {
		return s.Write(b)
	}
	n, err := s.r.writeMarked(s.u, s.s.Write, b)
	return n, s.c.translate(err)
}

// SetReliableBoundary marks what was written as reliable, on the QUIC
// stream under the WebTransport one, where all of it is sent or reserved
// (reservation).
func (s *wtSendStream) SetReliableBoundary() bool { return s.u != nil && s.r.mark(s.u) }

func (s *wtSendStream) Close() error { return s.c.translate(s.s.Close()) }
func (s *wtSendStream) CancelWrite(code uint64) {
	_ = s.s.SetWriteDeadline(time.Unix(1, 0)) // see wtStream.CancelWrite
	s.s.CancelWrite(webtransport.StreamErrorCode(wtCode(code)))
}
func (s *wtSendStream) SetPriority(u int8, i bool) { setWTPriority(s.s, u, i) }
func (s *wtSendStream) Context() context.Context   { return s.s.Context() }
func (s *wtSendStream) SetWriteDeadline(t time.Time) error {
	return s.c.translate(s.s.SetWriteDeadline(t))
}

type wtReceiveStream struct {
	s *webtransport.ReceiveStream
	c *wtConn
}

func (s wtReceiveStream) Read(b []byte) (int, error) {
	n, err := s.s.Read(b)
	return n, s.c.translate(err)
}

func (s wtReceiveStream) CancelRead(code uint64) {
	s.s.CancelRead(webtransport.StreamErrorCode(wtCode(code)))
	_ = s.s.SetReadDeadline(time.Unix(1, 0)) // see wtStream.CancelRead
}
