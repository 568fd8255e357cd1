package moqt

import (
	"errors"
	"fmt"

	"github.com/moqt-go/moqt/wire"
)

// A SessionError ends a whole session (§6.6, §12.2). It is the cause of a
// closed Session's Context and the error its blocked calls return.
type SessionError struct {
	Code   wire.SessionErrorCode
	Reason string
	// Remote reports whether the peer closed the session.
	Remote bool
}

func (e *SessionError) Error() string {
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
	m := &wire.RequestError{ErrorCode: e.Code, RetryInterval: e.RetryInterval, ErrorReason: e.Reason}
	if e.Redirect != nil {
		m.Redirect = wire.Some(*e.Redirect)
	}
	return m
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

func (e *RequestError) Error() string {
	return fmt.Sprintf("moqt: request error %s: %s", e.Code, e.Reason)
}

// EffectiveCode is Code, or INTERNAL_ERROR when Code is not defined by the
// draft: unknown codes are read as INTERNAL_ERROR (§13).
func (e *RequestError) EffectiveCode() wire.RequestErrorCode {
	if e.Code.Known() {
		return e.Code
	}
	return wire.ReqInternalError
}

// A DoneError reports how the publisher ended an Established subscription
// with PUBLISH_DONE (§9.9). TRACK_ENDED is a normal end, yet still reported
// here so that the subscriber sees the status and Stream Count.
type DoneError struct {
	Code        wire.PublishDoneCode
	StreamCount uint64
	Reason      string
}

// EffectiveCode is Code, or INTERNAL_ERROR when Code is not defined by the
// draft: unknown codes are read as INTERNAL_ERROR (§13).
func (e *DoneError) EffectiveCode() wire.PublishDoneCode {
	if e.Code.Known() {
		return e.Code
	}
	return wire.DoneInternalError
}

func (e *DoneError) Error() string {
	return fmt.Sprintf("moqt: subscription done: %s: %s", e.Code, e.Reason)
}

// A MalformedTrackError reports that the publisher sent a Malformed Track
// (§12.1): objects that contradict one another or the track's rules, such
// as an object past the final object of its group, a subgroup whose streams
// disagree on its Publisher Priority, or an object carrying a Mandatory
// Track Property (§3.6). The subscriber then cancels every subscription
// to the track on the session (§6.4.2.3, C022), resetting and stopping
// their streams with MALFORMED_TRACK, and drops the object that revealed it
// (C023).
//
// Their Err reports it, and so does the SubgroupReader that read the
// offending object or FIN. It wraps ErrCancelled.
type MalformedTrackError struct {
	// Reason says which rule the track broke, naming the objects.
	Reason string
}

func (e *MalformedTrackError) Error() string { return "moqt: malformed track: " + e.Reason }

// Unwrap returns ErrCancelled: the subscription was cancelled by this end.
func (e *MalformedTrackError) Unwrap() error { return ErrCancelled }

// ErrNoDynamicGroups is returned by Subscription.Update for a
// NEW_GROUP_REQUEST on a track whose properties do not include
// DYNAMIC_GROUPS with value 1 (§9.20.20, §10.6, C018). Nothing is sent.
var ErrNoDynamicGroups = errors.New("moqt: NEW_GROUP_REQUEST needs a track with DYNAMIC_GROUPS = 1")

// ErrCancelled is returned for a request that was cancelled: by the local
// application, or by the peer with a stream reset or STOP_SENDING
// (§6.4.2.3).
var ErrCancelled = errors.New("moqt: request cancelled")

// ErrGoingAway is returned by calls that would start a new request after
// the peer sent GOAWAY on the control stream (§9.2).
var ErrGoingAway = errors.New("moqt: peer is going away")

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
