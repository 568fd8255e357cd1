// Package transport is the one place that knows about quic-go and
// webtransport-go. It offers a single small interface, [Conn], over a raw
// QUIC connection (§6.2.2) and a WebTransport session (§6.2.1), a [Dial]
// function for moqt:// and https:// URLs, and a [Listener] that serves both
// on one UDP port.
//
// # Errors
//
// Errors from the libraries are translated in one place (errors.go) into:
//
//   - *[StreamError]: the stream was reset (RESET_STREAM) or asked to stop
//     (STOP_SENDING), by the peer (Remote) or by this endpoint. Returned by
//     Read, Write and Close.
//   - *[CloseError]: the connection (raw QUIC) or session (WebTransport) was
//     closed with an application error code, by the peer (Remote) or by
//     this endpoint. Returned by every call once the connection is closed,
//     and available afterwards as context.Cause(conn.Context()).
//   - *[ConnError]: the connection ended, or could not be made, without
//     such a close: an idle timeout, a stateless reset, a QUIC transport
//     error such as CONNECTION_REFUSED, a WebTransport connection lost
//     under its session. Returned and recorded as a CloseError is.
//
// io.EOF, context errors and os.ErrDeadlineExceeded (a Write that passed
// its deadline) are returned unchanged. Everything else (a datagram too
// large, ...) is wrapped with a "moqt transport:" prefix and keeps the
// library error in its chain.
//
// # Error codes
//
// QUIC carries 62-bit codes; codes above [MaxQUICCode] are sent as
// MaxQUICCode. WebTransport carries 32-bit session and stream codes; codes
// above [MaxWebTransportCode] are sent as MaxWebTransportCode, which a MoQT
// peer reads as an unknown code, that is, as INTERNAL_ERROR. Every code
// registered by MoQT fits in 32 bits.
package transport

import (
	"context"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/moqt-go/moqt/internal/pending"
)

// Protocol identifiers offered and accepted by default, newest first: the
// ALPN on raw QUIC and the WT-Available-Protocols entries on WebTransport
// (§6.2). Draft 20 shares draft 21's wire format; 19 and 18 differ (see
// docs/drafts.md).
const (
	ProtocolDraft21 = "moqt-21"
	ProtocolDraft20 = "moqt-20"
	ProtocolDraft19 = "moqt-19"
	ProtocolDraft18 = "moqt-18"
)

// DefaultProtocols returns the identifiers used when a configuration gives
// none, in preference order.
func DefaultProtocols() []string {
	return []string{ProtocolDraft21, ProtocolDraft20, ProtocolDraft19, ProtocolDraft18}
}

// Conn is a raw QUIC connection or a WebTransport session carrying one MoQT
// session. All methods are safe for concurrent use.
type Conn interface {
	// AcceptStream waits for the next bidirectional stream opened by the peer.
	AcceptStream(ctx context.Context) (Stream, error)
	// AcceptUniStream waits for the next unidirectional stream opened by the peer.
	AcceptUniStream(ctx context.Context) (ReceiveStream, error)
	// OpenStreamSync opens a bidirectional stream, waiting for stream credit.
	OpenStreamSync(ctx context.Context) (Stream, error)
	// OpenUniStreamSync opens a unidirectional stream, waiting for stream credit.
	OpenUniStreamSync(ctx context.Context) (SendStream, error)
	// OpenUniStream opens a unidirectional stream if the peer's stream
	// credit allows it now, and fails at once otherwise.
	OpenUniStream() (SendStream, error)
	// SendDatagram sends b in one unreliable datagram. b may be reused once
	// it returns. A payload that does not fit one packet is an error.
	SendDatagram(b []byte) error
	// ReceiveDatagram waits for the next datagram from the peer. The library
	// queues a bounded number of datagrams and drops newer ones when the
	// queue is full, so a session reads them from a dedicated goroutine.
	ReceiveDatagram(ctx context.Context) ([]byte, error)
	// CloseWithError closes the connection (raw QUIC: CONNECTION_CLOSE) or
	// session (WebTransport: WT_CLOSE_SESSION) with an application code and
	// a reason of at most 1024 bytes (longer ones are truncated). It returns
	// once the close is on the wire, so that the process may exit: raw
	// QUIC's CONNECTION_CLOSE has been sent; WebTransport's QUIC connection
	// is closed, by the peer after reading WT_CLOSE_SESSION or by this end
	// after a second. Context is done by then.
	CloseWithError(code uint64, reason string) error
	// Context is done when the connection or session ends. Its cause is the
	// translated error: a *CloseError for a close with an application code.
	Context() context.Context
	// Protocol is the negotiated identifier, such as "moqt-21".
	Protocol() string
	// WebTransport reports whether this is a WebTransport session.
	WebTransport() bool
	// ReliableReset reports whether SendStream.SetReliableBoundary takes
	// effect: both ends negotiated RESET_STREAM_AT (on WebTransport, on
	// the QUIC connection under the session; see quicUnder).
	ReliableReset() bool
	// LocalAddr and RemoteAddr are the UDP addresses of the QUIC connection.
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
	// Path returns the QUIC connection's packet counts so far, which tell
	// a peer that stopped reading from a path recovering from loss; zero
	// where they are unknown.
	Path() PathCounts
}

// PathCounts are a QUIC connection's running counts (quic-go's
// ConnectionStats).
type PathCounts struct {
	// Received counts the packets received from the peer.
	Received uint64
	// Sent counts the bytes sent to the peer, retransmissions included.
	Sent uint64
}

// probeBytes is about one full QUIC packet: less, over a few seconds, is
// acknowledgements, PINGs and BLOCKED frames, what an idle connection
// sends.
const probeBytes = 1000

// Recovering reports whether, between the counts a and b, the peer was
// heard from and this end sent at least a packet's worth of bytes: the
// path is alive and carrying data, as it is while QUIC retransmits what
// it lost. Streams that take nothing meanwhile wait on the path, not on a
// peer that stopped reading, whose full windows leave this end nothing
// to send.
func Recovering(a, b PathCounts) bool {
	return b.Received > a.Received && b.Sent-a.Sent >= probeBytes
}

// pathOf reads a QUIC connection's counts; nil has none.
func pathOf(c *quic.Conn) PathCounts {
	if c == nil {
		return PathCounts{}
	}
	st := c.ConnectionStats()
	return PathCounts{Received: st.PacketsReceived, Sent: st.BytesSent}
}

// Send urgencies, lower first, that streams start with on raw QUIC (§5.1.2:
// control streams first, then request streams, then objects). quic-go has
// eight levels, 0 to 7; within one, incremental streams share bandwidth
// round-robin and the others go one at a time, lowest stream ID first.
const (
	// UrgencyControl is where unidirectional streams start: the control
	// stream keeps it, a data stream moves to its own level before it
	// carries anything.
	UrgencyControl int8 = 0
	// UrgencyRequest is where bidirectional (request) streams start,
	// incremental.
	UrgencyRequest int8 = 1
	// UrgencyDataMin and UrgencyDataMax bound the levels left for data.
	UrgencyDataMin int8 = 2
	UrgencyDataMax int8 = 7
)

// SendStream is the sending half of a stream.
type SendStream interface {
	io.Writer
	// Close sends FIN after the data written so far.
	Close() error
	// CancelWrite abandons sending and resets the stream with code
	// (RESET_STREAM); a Write blocked on the stream returns. Calling it more
	// than once, or after Close, has no effect beyond the first call.
	CancelWrite(code uint64)
	// SetPriority sets the stream's send urgency (lower is more urgent,
	// clipped to 0–7) and whether it shares bandwidth round-robin with
	// streams of equal urgency. On WebTransport it applies to the QUIC
	// stream under the session's (wtUrgency).
	SetPriority(urgency int8, incremental bool)
	// Context is done once the send side is finished: after Close or
	// CancelWrite, when the peer sends STOP_SENDING, or when the connection
	// ends. Its cause comes from the library; Write reports the translated
	// error.
	Context() context.Context
	// SetWriteDeadline bounds Write calls, the one blocked now included;
	// the zero time means none. A Write that passes it returns
	// os.ErrDeadlineExceeded with the count of bytes it did take, which
	// were passed to the stream and are sent; the stream stays usable.
	SetWriteDeadline(t time.Time) error
	// SetReliableBoundary marks the data written so far as data a later
	// CancelWrite does not discard: the reset is a RESET_STREAM_AT whose
	// reliable size covers it (quic-go's SendStream.SetReliableBoundary).
	// It has an effect only where Conn.ReliableReset reports true. It
	// marks nothing and reports false unless the last write was a
	// WriteMarked or WriteReserved whose bytes flow control took (see
	// reliable.go): a reset's final size would pass the peer's window.
	// Request streams always report false.
	SetReliableBoundary() bool
	// WriteReserved is Write that ends with its last bytes reserved
	// against flow control where the peer's window allows, so that a
	// SetReliableBoundary after it can mark. It costs a second call into
	// quic-go: the writer uses it for its last write before a possible
	// reset.
	WriteReserved(b []byte) (int, error)
	// WriteMarked is Write that also marks the data written through b's
	// first bytes (up to 16 KiB) as reliable, as SetReliableBoundary
	// does, but only where flow control takes those bytes at once: a
	// boundary over bytes quic-go buffered without credit makes a later
	// reset's final size pass the peer's window (see reliable.go).
	WriteMarked(b []byte) (int, error)
}

// ReceiveStream is the receiving half of a stream.
type ReceiveStream interface {
	io.Reader
	// CancelRead abandons receiving and asks the peer to stop sending with
	// code (STOP_SENDING).
	CancelRead(code uint64)
}

// Stream is a bidirectional stream.
type Stream interface {
	SendStream
	ReceiveStream
}

// Info describes an accepted connection: what the session needs to know
// that it cannot ask the Conn.
type Info struct {
	// WebTransport reports whether the client reached the server over
	// WebTransport. When false, the authority and path arrive later in the
	// client's SETUP (§6.2.2, §9.1.1, §9.1.2).
	WebTransport bool
	// Authority is the CONNECT request's :authority (WebTransport only).
	Authority string
	// Path is the request's path and query, as in "/live?token=x"
	// (WebTransport only).
	Path string
	// Header holds the CONNECT request's header fields, among them Origin
	// (WebTransport only; nil for raw QUIC).
	Header http.Header
	// ServerName is the TLS server name (SNI) the client asked for, if any.
	ServerName string
	// Ticket is the connection's place in ListenConfig.Pool, nil without
	// one. It is the receiver's: it marks it Ready once the session is set
	// up, Releases it when it no longer waits, and closes the connection
	// as busy if the ticket's Context ends (a newcomer took the place).
	Ticket *pending.Ticket
}

// Windows are QUIC flow-control receive windows, fixed at the given sizes
// (no auto-tuning). A zero field keeps quic-go's default.
type Windows struct {
	Stream, Connection uint64
}

// Options are QUIC settings of the connections Dial and Listen make. A
// zero field keeps quic-go's default.
type Options struct {
	// KeepAlivePeriod, when positive, makes an idle connection send a PING
	// this often (at least twice per idle timeout), so that it outlives
	// MaxIdleTimeout. Zero sends none.
	KeepAlivePeriod time.Duration
	// MaxIdleTimeout is this endpoint's idle timeout; the connection's is
	// the smaller of both endpoints' (RFC 9000 §10.1).
	MaxIdleTimeout time.Duration
	// MaxIncomingStreams and MaxIncomingUniStreams bound the streams of
	// each kind the peer may have open at once.
	MaxIncomingStreams, MaxIncomingUniStreams int64
	// QlogDir, if set, is where each connection writes its qlog (see
	// qlogDir); Dial and Listen create it. A connection's close waits for
	// its file, a Listener's Close for all of its connections' files.
	QlogDir string
	// QlogFailed, if set, is told of a qlog file that could not be
	// created or written.
	QlogFailed func(error)
}

func (o Options) apply(c *quic.Config) {
	c.KeepAlivePeriod = max(o.KeepAlivePeriod, 0)
	if o.MaxIdleTimeout > 0 {
		c.MaxIdleTimeout = o.MaxIdleTimeout
	}
	if o.MaxIncomingStreams > 0 {
		c.MaxIncomingStreams = o.MaxIncomingStreams
	}
	if o.MaxIncomingUniStreams > 0 {
		c.MaxIncomingUniStreams = o.MaxIncomingUniStreams
	}
}

func (w Windows) apply(c *quic.Config) {
	if w.Stream != 0 {
		c.InitialStreamReceiveWindow, c.MaxStreamReceiveWindow = w.Stream, w.Stream
	}
	if w.Connection != 0 {
		c.InitialConnectionReceiveWindow, c.MaxConnectionReceiveWindow = w.Connection, w.Connection
	}
}
