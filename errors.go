package moqt

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// A SessionError ends a whole session (§6.6, §12.2). It is the cause of a
// closed Session's Context and the error its blocked calls return.
type SessionError struct {
	Code   wire.SessionErrorCode
	Reason string
	// Remote reports whether the peer closed the session.
	Remote bool
	// Transport is set when no MoQT close ended the session: its
	// connection died beneath it (an idle timeout, a stateless reset, a
	// QUIC transport error, a WebTransport connection lost). Code is then
	// INTERNAL_ERROR and Reason the transport's description, and
	// errors.As finds the *TransportError too.
	Transport *TransportError
}

// Unwrap returns Transport, if set.
func (e *SessionError) Unwrap() error {
	if e.Transport == nil {
		return nil
	}
	return e.Transport
}

// Error describes the session error.
func (e *SessionError) Error() string {
	if e.Transport != nil {
		return "moqt: session ended: " + e.Transport.Error()
	}
	who := "local"
	if e.Remote {
		who = "peer"
	}
	if e.Reason == "" {
		return fmt.Sprintf("moqt: session closed by %s: %s", who, e.Code)
	}
	return fmt.Sprintf("moqt: session closed by %s: %s: %s", who, e.Code, e.Reason)
}

// A RequestError ends one request: a REQUEST_ERROR received or sent (§9.4).
type RequestError struct {
	// Code is as received. One this draft does not define
	// (Code.Known() is false) must be treated as INTERNAL_ERROR (§13).
	Code wire.RequestErrorCode
	// RetryInterval is the wire value: 0 means do not retry, otherwise the
	// minimum wait in milliseconds plus one.
	RetryInterval uint64
	Reason        string
	// Redirect is set when Code is REDIRECT.
	Redirect *wire.Redirect
}

// requestErrorFrom converts a received REQUEST_ERROR.
func requestErrorFrom(m *wire.RequestError) *RequestError {
	e := &RequestError{Code: m.ErrorCode, RetryInterval: m.RetryInterval, Reason: m.ErrorReason}
	if m.Redirect.Set {
		r := m.Redirect.Value
		e.Redirect = &r
	}
	return e
}

// message returns the REQUEST_ERROR that reports e.
func (e *RequestError) message() *wire.RequestError {
	m := &wire.RequestError{ErrorCode: e.Code, RetryInterval: e.RetryInterval, ErrorReason: wire.FitReason(e.Reason)}
	if e.Redirect != nil {
		m.Redirect = wire.Some(*e.Redirect)
	}
	return m
}

// loadRetryDelay is about how long a peer refused with EXCESSIVE_LOAD by
// one of the library's limits is asked to wait before it retries.
const loadRetryDelay = time.Second

// LoadRetryInterval returns a Retry Interval for an EXCESSIVE_LOAD refusal,
// which "SHOULD use the Retry Interval" (§12.3): about a second, spread at
// random between half and one and a half of it so that the peers refused
// together do not all retry together (§9.4.2). The library's own limits
// use it; a relay or handler refusing for load can too, with RejectWith.
func LoadRetryInterval() uint64 {
	d := loadRetryDelay/2 + rand.N(loadRetryDelay)
	return uint64(d.Milliseconds()) + 1 // the wait in milliseconds plus one
}

// refusalOf is the REQUEST_ERROR for a refusal the codec or one of the
// library's limits made: with a Retry Interval when it is for load.
func refusalOf(rej *wire.RejectError) *RequestError {
	e := &RequestError{Code: rej.Code, Reason: rej.Reason}
	if e.Code == wire.ReqExcessiveLoad {
		e.RetryInterval = LoadRetryInterval()
	}
	return e
}

// asRequestError turns any error a Handler or hook returns into the
// REQUEST_ERROR to send: a *RequestError as is, anything else as
// INTERNAL_ERROR.
func asRequestError(err error) *RequestError {
	var re *RequestError
	if errors.As(err, &re) {
		return re
	}
	return &RequestError{Code: wire.ReqInternalError, Reason: err.Error()}
}

// Error describes the refusal.
func (e *RequestError) Error() string {
	return fmt.Sprintf("moqt: request error %s: %s", e.Code, e.Reason)
}

// A DoneError reports how the publisher ended an Established subscription
// with PUBLISH_DONE (§9.9). TRACK_ENDED is a normal end, yet still reported
// here so that the subscriber sees the status and Stream Count.
type DoneError struct {
	// Code is as received. One this draft does not define
	// (Code.Known() is false) must be treated as INTERNAL_ERROR (§13).
	Code wire.PublishDoneCode
	// StreamCount is the number of data streams the publisher opened for
	// the subscription, or 2^64−1 when it said it does not know exactly
	// (whatever the draft's value for that: 2^62−1 on 18 and 19).
	StreamCount uint64
	Reason      string
	// Missing counts the data streams StreamCount promised that had not
	// arrived when the subscription stopped waiting for them (after
	// Config.DoneLinger, or the delivery timeouts if longer, §9.9): their
	// objects never reached this end. It is 0 when every stream came, or
	// when StreamCount was unknown. A *DoneError never changes once
	// returned: when streams are found missing, Subscription.Err and the
	// reads that return the subscription's end (AcceptSubgroup,
	// ReadObject, ReadDatagram, AcceptFill) return a copy with Missing
	// set, which wraps ErrStreamsMissing.
	Missing uint64
}

// Error describes the PUBLISH_DONE.
func (e *DoneError) Error() string {
	if e.Missing > 0 {
		return fmt.Sprintf("moqt: subscription done: %s: %s; %d of its %d data streams never arrived", e.Code, e.Reason, e.Missing, e.StreamCount)
	}
	return fmt.Sprintf("moqt: subscription done: %s: %s", e.Code, e.Reason)
}

// Unwrap returns ErrStreamsMissing when Missing is set, else nil.
func (e *DoneError) Unwrap() error {
	if e.Missing > 0 {
		return ErrStreamsMissing
	}
	return nil
}

// A MalformedTrackError reports that the publisher sent a Malformed Track
// (§12.1): objects that contradict one another or the track's rules, such
// as an object past the final object of its group, a subgroup whose streams
// disagree on its Publisher Priority, or an object carrying a Mandatory
// Track Property (§3.6). The subscriber then cancels every subscription
// to the track on the session (§6.4.2.3), resetting and stopping
// their streams with MALFORMED_TRACK, and drops the object that revealed
// it.
//
// Their Err reports it, and so does the SubgroupReader that read the
// offending object or FIN. It wraps ErrCancelled.
type MalformedTrackError struct {
	// Reason says which rule the track broke, naming the objects.
	Reason string
}

// Error describes the Malformed Track.
func (e *MalformedTrackError) Error() string { return "moqt: malformed track: " + e.Reason }

// Unwrap returns ErrCancelled: the subscription was cancelled by this end.
func (e *MalformedTrackError) Unwrap() error { return ErrCancelled }

// sessionErrorFrom classifies err for closing the session: codec errors
// carry their code; anything else is an INTERNAL_ERROR. This is the one
// place where an error becomes a session close code.
func sessionErrorFrom(err error) *SessionError {
	var se *SessionError
	if errors.As(err, &se) {
		return se
	}
	var pe *wire.ProtocolError
	if errors.As(err, &pe) {
		return &SessionError{Code: pe.Code, Reason: pe.Reason}
	}
	return &SessionError{Code: wire.InternalError, Reason: err.Error()}
}

// asSessionError reports whether err must close the session: a
// *SessionError, or a codec *wire.ProtocolError (a malformed message, or a
// parameter the message's context does not allow), which it converts.
func asSessionError(err error) (*SessionError, bool) {
	var se *SessionError
	if errors.As(err, &se) {
		return se, true
	}
	var pe *wire.ProtocolError
	if errors.As(err, &pe) {
		return &SessionError{Code: pe.Code, Reason: pe.Reason}, true
	}
	return nil, false
}

// protocolViolation returns a local PROTOCOL_VIOLATION session error.
func protocolViolation(format string, args ...any) *SessionError {
	return &SessionError{Code: wire.ProtocolViolation, Reason: fmt.Sprintf(format, args...)}
}

// A TransportError reports that a session's QUIC connection ended, or
// could not be made, without a MoQT close: Dial returns it for a
// connection that failed (a server that refused it, a handshake that timed
// out), and a session whose connection died beneath it ends with a
// *SessionError whose Transport it is. Error says how it ended (idle
// timeout, stateless reset, …). It wraps quic-go's error, so that
// errors.As also finds *quic.IdleTimeoutError, *quic.StatelessResetError
// and the like, and matches net.ErrClosed with errors.Is.
type TransportError struct {
	// Code is the code of the CONNECTION_CLOSE that ended the connection:
	// a QUIC transport error code (RFC 9000 §20.1) such as
	// CONNECTION_REFUSED (0x2), or, for the QUIC connection under a
	// WebTransport session closed without WT_CLOSE_SESSION, its
	// application code (HTTP/3's, RFC 9114 §8.1). Otherwise 0.
	Code   uint64
	Reason string
	// Remote reports whether the peer sent the close or the reset.
	Remote bool
	kind   transport.ConnErrorKind
	err    error
}

// quicConnectionRefused is QUIC's CONNECTION_REFUSED (RFC 9000 §20.1).
const quicConnectionRefused = 0x2

// Error describes the transport error.
func (e *TransportError) Error() string {
	return "moqt: " + strings.TrimPrefix(e.err.Error(), "moqt transport: ")
}

// Unwrap returns the QUIC library's error.
func (e *TransportError) Unwrap() error { return errors.Unwrap(e.err) }

// Is reports whether target is ErrConnectionRefused and e a refusal.
func (e *TransportError) Is(target error) bool {
	return target == ErrConnectionRefused && e.kind == transport.ConnTransportClose && e.Code == quicConnectionRefused && e.Remote
}

// A StreamError reports that a stream of the session was reset
// (RESET_STREAM, seen by reads) or that its reader asked it to stop
// (STOP_SENDING, seen by writes), with a reset code (§12.5). Remote is
// true when the peer did it. SubgroupReader reads return it for a reset
// data stream.
type StreamError struct {
	Code   wire.ResetCode
	Remote bool
	err    *transport.StreamError
}

// Error describes the stream error.
func (e *StreamError) Error() string {
	verb := "reset"
	if e.Remote {
		verb = "reset by peer"
	}
	return fmt.Sprintf("moqt: stream %s: %s", verb, e.Code)
}

// Unwrap returns the transport's error.
func (e *StreamError) Unwrap() error {
	if e.err == nil {
		return nil
	}
	return e.err
}

// publicError converts the transport's errors that applications may see
// into this package's types: *StreamError and *TransportError. Others
// are returned as they are.
func publicError(err error) error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*transport.StreamError](err); ok {
		return &StreamError{Code: wire.ResetCode(e.Code), Remote: e.Remote, err: e}
	}
	if e, ok := errors.AsType[*transport.ConnError](err); ok {
		return transportError(e)
	}
	return err
}

// transportError converts e.
func transportError(e *transport.ConnError) *TransportError {
	return &TransportError{Code: e.Code, Reason: e.Reason, Remote: e.Remote, kind: e.Kind, err: e}
}

// Errors a caller can test for with errors.Is.
var (
	// ErrAuthToken is wrapped by the errors of requests whose authorization
	// tokens break a rule of §8.9 towards the peer's token cache: an alias
	// registered twice, an alias that is unknown or not yet usable, a
	// registration past the peer's MAX_AUTH_TOKEN_CACHE_SIZE, a repeated token.
	// Nothing is sent.
	ErrAuthToken = errors.New("moqt: authorization token")

	// ErrNoDynamicGroups is returned by Subscription.Update for a
	// NEW_GROUP_REQUEST on a track whose properties do not include
	// DYNAMIC_GROUPS with value 1 (§9.20.20, §10.6). Nothing is sent.
	ErrNoDynamicGroups = errors.New("moqt: NEW_GROUP_REQUEST needs a track with DYNAMIC_GROUPS = 1")

	// ErrCancelled is returned for a request that was cancelled: by the local
	// application, or by the peer with a stream reset or STOP_SENDING
	// (§6.4.2.3).
	ErrCancelled = errors.New("moqt: request cancelled")

	// ErrGoingAway is returned by calls that would start a new request after
	// the peer sent GOAWAY on the control stream (§9.2).
	ErrGoingAway = errors.New("moqt: peer is going away")

	// ErrCloseTimeout is wrapped by the error of Session.Close when
	// Config.CloseTimeout passed before the peer confirmed what was sent
	// (it finishes a request stream once it has read what the request
	// carried): the session was closed all the same, and stream data
	// still in flight was lost. The error says how many requests were
	// not confirmed.
	ErrCloseTimeout = errors.New("moqt: Close timed out before the peer confirmed delivery")

	// ErrConnectionRefused matches, with errors.Is, the *TransportError of a
	// connection the server refused with QUIC's CONNECTION_REFUSED: a busy
	// server (see ServerOptions.MaxPendingSessions). Trying again later may
	// succeed.
	ErrConnectionRefused = errors.New("moqt: connection refused by the server")

	// ErrUntrustedCertificate is wrapped by Dial's error when this end did
	// not trust the server's certificate: no chain to Config.TLSConfig's
	// roots (a self-signed certificate, say), a name or validity that
	// does not fit, or no match in Config.ServerCertificateHashes. The
	// fix is to pin the certificate with ServerCertificateHashes
	// (ParseCertificateHash of the SHA-256 the server prints) or to trust
	// its CA with TLSConfig.RootCAs. The error says why, and wraps the
	// *TransportError (QUIC reports the refusal as a TLS alert, such as
	// CRYPTO_ERROR 0x12a, bad_certificate) and crypto/tls's
	// *tls.CertificateVerificationError when chain verification failed.
	ErrUntrustedCertificate = errors.New("moqt: the server's certificate is not trusted")

	// ErrFellBehind is wrapped by the error of a subscription cancelled
	// because its application left received data unread for longer than
	// Config.ReadStallTimeout. It also wraps ErrCancelled.
	ErrFellBehind = errors.New("moqt: subscriber fell behind")

	// ErrObjectTooLarge is wrapped by the error of SubgroupReader.ReadObject,
	// and by Subscription.ReadObject's Object.Incomplete, for an object whose
	// payload is larger than Config.MaxObjectSize.
	ErrObjectTooLarge = errors.New("moqt: object payload exceeds Config.MaxObjectSize")

	// ErrFillFailed is wrapped by Subscription.ReadObject's Object.Incomplete
	// for a fill fetch stream that ended without delivering its whole range
	// (§3.4.1): reset by the publisher, not opened within Config.FillWait,
	// or stalled while the subscription's objects waited.
	ErrFillFailed = errors.New("moqt: fill incomplete")

	// ErrStreamsMissing reports that data streams PUBLISH_DONE counted
	// (its Stream Count, §9.9) never arrived before the subscription
	// stopped waiting for them (Config.DoneLinger, or the delivery timeouts
	// if longer): whole subgroups, or fills, may be missing, whatever the
	// PUBLISH_DONE's status, TRACK_ENDED included. Subscription.ReadObject
	// yields an entry whose Object.Incomplete wraps it, saying how many,
	// just before the subscription's end; the *DoneError returned at the
	// end wraps it too, with DoneError.Missing set.
	ErrStreamsMissing = errors.New("moqt: data streams PUBLISH_DONE counted never arrived")

	// errNotAnObject refuses a write of an entry that only reports
	// (Object.Incomplete, Object.EndOfRange where it has no place).
	errNotAnObject = errors.New("moqt: the entry reports missing objects and is not an object")

	// ErrSubgroupClosed is returned by writes after Close or Reset, and by a
	// write that Close or Reset interrupted.
	ErrSubgroupClosed = errors.New("moqt: subgroup closed")

	// ErrFilterRanges is returned by Session.Subscribe and Subscription.Update
	// for range filters with more Ranges than the peer's MAX_FILTER_RANGES
	// Setup Option allows (§9.1.6; 0, the default, allows none). The peer
	// would refuse them with INVALID_FILTER; nothing is sent.
	ErrFilterRanges = errors.New("moqt: more filter Ranges than the peer's MAX_FILTER_RANGES")

	// ErrFillOnTracks is returned by Session.SubscribeTracks and
	// LocalTrack.PublishTracks for FILL_PARAMETERS in a SUBSCRIBE_TRACKS:
	// the draft names no Request ID for the fill fetch stream of a
	// subscription a PUBLISH started (§3.4), so neither end could tell
	// which track a fill is for. Nothing is sent. A peer's SUBSCRIBE_TRACKS
	// carrying it is refused with NOT_SUPPORTED. A REQUEST_UPDATE with
	// FILL_PARAMETERS on one of the subscriptions asks for its fill.
	ErrFillOnTracks = errors.New("moqt: " + fillOnTracksReason)
)
