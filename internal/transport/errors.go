package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"

	"github.com/moqt-go/moqt/wire"
)

// Largest codes each transport can carry. See the package documentation.
const (
	MaxQUICCode         = 1<<62 - 1      // QUIC varint (RFC 9000 §16)
	MaxWebTransportCode = math.MaxUint32 // WT_CLOSE_SESSION and WT stream codes
)

// Codes this package sends on its own.
const (
	// codeNoError is MoQT's NO_ERROR (§12.2), used on raw QUIC connections
	// that the Listener closes.
	codeNoError = 0x0
	// codeInternalError is MoQT's INTERNAL_ERROR (§12.2), used on
	// connections and sessions closed as busy: MoQT has no code for load.
	codeInternalError = 0x1
	// codeProtocolViolation is MoQT's PROTOCOL_VIOLATION (§12.2), used when
	// a raw QUIC peer did not negotiate QUIC DATAGRAM (§6.2).
	codeProtocolViolation = 0x3
	// codeH3NoError is HTTP/3's H3_NO_ERROR (RFC 9114 §8.1), used to close
	// the QUIC connection under a WebTransport session.
	codeH3NoError = 0x100
	// codeH3InternalError is HTTP/3's H3_INTERNAL_ERROR.
	codeH3InternalError = 0x102
	// codeH3ExcessiveLoad is HTTP/3's H3_EXCESSIVE_LOAD, used on HTTP/3
	// connections closed as busy before they carry a session: displaced
	// by a newcomer (their source held the most places), or finding none.
	codeH3ExcessiveLoad = 0x107
)

// ErrListenerClosed is returned by Listener.Accept after Close. It matches
// net.ErrClosed with errors.Is.
var ErrListenerClosed = fmt.Errorf("moqt transport: listener closed: %w", net.ErrClosed)

// A StreamError reports that a stream was reset (RESET_STREAM, seen by Read)
// or that its reader asked it to stop (STOP_SENDING, seen by Write), with an
// application error code. Remote is true when the peer did it.
type StreamError struct {
	Code   uint64
	Remote bool
}

func (e *StreamError) Error() string {
	return fmt.Sprintf("moqt transport: stream %s with code %#x", side(e.Remote, "reset"), e.Code)
}

// A CloseError reports that the connection (raw QUIC) or the session
// (WebTransport) was closed with an application error code and reason.
// Remote is true when the peer closed it. It matches net.ErrClosed with
// errors.Is.
type CloseError struct {
	Code   uint64
	Reason string
	Remote bool
}

func (e *CloseError) Error() string {
	s := fmt.Sprintf("moqt transport: session %s with code %#x", side(e.Remote, "closed"), e.Code)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Unwrap returns net.ErrClosed.
func (e *CloseError) Unwrap() error { return net.ErrClosed }

// A ConnError reports that a QUIC connection ended, or could not be made,
// without a close that carries an application code for the session: an
// idle timeout, a stateless reset, a CONNECTION_CLOSE with a QUIC
// transport error code (such as CONNECTION_REFUSED from a busy server), or,
// under a WebTransport session, its QUIC connection closing or failing
// without WT_CLOSE_SESSION. Err is the library's error; ConnError matches
// net.ErrClosed with errors.Is through it.
type ConnError struct {
	Kind ConnErrorKind
	// Code is the QUIC transport error code (RFC 9000 §20.1) for
	// ConnTransportClose, the application code (HTTP/3's, under
	// WebTransport) for ConnApplicationClose, and 0 otherwise.
	Code   uint64
	Reason string
	Remote bool
	Err    error
}

// ConnErrorKind says how a connection ended without a session close.
type ConnErrorKind int

// The ways a connection ends without a session close.
const (
	ConnLost             ConnErrorKind = iota // anything else, described by Err
	ConnIdleTimeout                           // no packet within the idle timeout
	ConnHandshakeTimeout                      // the QUIC handshake did not finish
	ConnStatelessReset                        // the peer lost the connection's state
	ConnTransportClose                        // CONNECTION_CLOSE with a QUIC transport error code
	ConnApplicationClose                      // the QUIC connection under a WebTransport session closed with an application code
)

var connKindNames = [...]string{
	ConnLost:             "connection lost",
	ConnIdleTimeout:      "idle timeout",
	ConnHandshakeTimeout: "handshake timeout",
	ConnStatelessReset:   "stateless reset",
	ConnTransportClose:   "connection closed with a transport error",
	ConnApplicationClose: "connection closed",
}

func (k ConnErrorKind) String() string {
	if k >= 0 && int(k) < len(connKindNames) {
		return connKindNames[k]
	}
	return fmt.Sprintf("ConnErrorKind(%d)", int(k))
}

func (e *ConnError) Error() string {
	s := "moqt transport: " + e.Kind.String()
	switch e.Kind {
	case ConnTransportClose, ConnApplicationClose:
		who := "locally"
		if e.Remote {
			who = "by peer"
		}
		s += fmt.Sprintf(" %s, code %#x", who, e.Code)
		if e.Reason != "" {
			s += ": " + e.Reason
		}
	case ConnLost:
		if e.Err != nil {
			s += ": " + e.Err.Error()
		}
	}
	return s
}

// Unwrap returns the library's error.
func (e *ConnError) Unwrap() error { return e.Err }

// connError translates an error that ended a QUIC connection, or kept one
// from being made, into a *ConnError; it reports false for errors that are
// not about the connection. An application close is a ConnError only
// where the caller says the connection's code is not the session's.
func connError(err error) (*ConnError, bool) {
	if e, ok := errors.AsType[*quic.IdleTimeoutError](err); ok {
		return &ConnError{Kind: ConnIdleTimeout, Err: e}, true
	}
	if e, ok := errors.AsType[*quic.HandshakeTimeoutError](err); ok {
		return &ConnError{Kind: ConnHandshakeTimeout, Err: e}, true
	}
	if e, ok := errors.AsType[*quic.StatelessResetError](err); ok {
		return &ConnError{Kind: ConnStatelessReset, Remote: true, Err: e}, true
	}
	if e, ok := errors.AsType[*quic.TransportError](err); ok {
		return &ConnError{Kind: ConnTransportClose, Code: uint64(e.ErrorCode), Reason: e.ErrorMessage, Remote: e.Remote, Err: e}, true
	}
	if e, ok := errors.AsType[*quic.ApplicationError](err); ok {
		return &ConnError{Kind: ConnApplicationClose, Code: uint64(e.ErrorCode), Reason: e.ErrorMessage, Remote: e.Remote, Err: e}, true
	}
	if e, ok := errors.AsType[*quic.VersionNegotiationError](err); ok {
		return &ConnError{Kind: ConnLost, Err: e}, true
	}
	return nil, false
}

func side(remote bool, verb string) string {
	if remote {
		return verb + " by peer"
	}
	return verb + " locally"
}

// fromQUIC translates an error from quic-go. It is the single mapping for raw
// QUIC connections and their streams.
func fromQUIC(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	if e, ok := errors.AsType[*quic.StreamError](err); ok {
		return &StreamError{Code: uint64(e.ErrorCode), Remote: e.Remote}
	}
	if e, ok := errors.AsType[*quic.ApplicationError](err); ok {
		return &CloseError{Code: uint64(e.ErrorCode), Reason: e.ErrorMessage, Remote: e.Remote}
	}
	if e, ok := connError(err); ok {
		return e
	}
	return passThrough(err)
}

// fromWebTransport translates the errors of webtransport-go that carry a
// code. It reports false for everything else, which the caller resolves
// against the session's state (see wtConn.translate).
func fromWebTransport(err error) (error, bool) {
	if e, ok := errors.AsType[*webtransport.StreamError](err); ok {
		return &StreamError{Code: uint64(e.ErrorCode), Remote: e.Remote}, true
	}
	if e, ok := errors.AsType[*webtransport.SessionError](err); ok {
		return &CloseError{Code: uint64(e.ErrorCode), Reason: e.Message, Remote: e.Remote}, true
	}
	return nil, false
}

// translate maps an error from the session or one of its streams. Errors
// without a WebTransport code that arrive because the session or its QUIC
// connection ended become the session's close error, so that every call
// after a close reports the same *CloseError.
func (c *wtConn) translate(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	if e, ok := fromWebTransport(err); ok {
		return e
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	ended := errors.Is(err, net.ErrClosed) // QUIC connection-level errors
	select {
	case <-c.sess.Context().Done():
		ended = true
	default:
	}
	if ended {
		// sessionEnded is running or about to run: the session's context
		// is done, or will be once its CONNECT stream sees the connection
		// close.
		<-c.ctx.Done()
		return context.Cause(c.ctx)
	}
	return passThrough(err)
}

// passThrough returns context errors unchanged, a passed write deadline as
// os.ErrDeadlineExceeded, and wraps anything else.
func passThrough(err error) error {
	switch {
	case err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, os.ErrDeadlineExceeded):
		return os.ErrDeadlineExceeded
	}
	return fmt.Errorf("moqt transport: %w", err)
}

// quicCode clamps a code to what QUIC can carry; quic-go panics on larger ones.
func quicCode(code uint64) uint64 { return min(code, MaxQUICCode) }

// wtCode clamps a code to WebTransport's 32 bits.
func wtCode(code uint64) uint32 { return uint32(min(code, MaxWebTransportCode)) }

// closeReason cuts a close reason to MoQT's Reason Phrase limit (§8.5),
// which is also WebTransport's limit for WT_CLOSE_SESSION.
func closeReason(s string) string { return wire.FitReason(s) }
