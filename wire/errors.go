package wire

import (
	"errors"
	"fmt"
)

// A ProtocolError reports peer input after which the session must be closed
// with Code (§12.2). Most parse failures are PROTOCOL_VIOLATION; a few rules
// name another code, such as KEY_VALUE_FORMATTING_ERROR.
type ProtocolError struct {
	Code   SessionErrorCode
	Reason string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("moqt: %s: %s", e.Code, e.Reason)
}

// A RejectError reports a well-formed request that must be answered with
// REQUEST_ERROR carrying Code (§12.3), for example a repeated range filter
// (INVALID_FILTER, §3.3.2). The session stays open.
type RejectError struct {
	Code   RequestErrorCode
	Reason string
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("moqt: request rejected: %s: %s", e.Code, e.Reason)
}

// ErrTruncated is wrapped by the ProtocolError returned when input ends
// inside a structure. Callers that parse a stream incrementally test for it
// with errors.Is to tell "need more bytes" from malformed input.
var ErrTruncated = errors.New("truncated")

// violation returns a PROTOCOL_VIOLATION error.
func violation(format string, args ...any) error {
	return &ProtocolError{Code: ProtocolViolation, Reason: fmt.Sprintf(format, args...)}
}

// truncated returns a PROTOCOL_VIOLATION error that wraps ErrTruncated.
func truncated(what string) error {
	return &truncatedError{ProtocolError{Code: ProtocolViolation, Reason: what + ": " + ErrTruncated.Error()}}
}

type truncatedError struct{ ProtocolError }

func (e *truncatedError) Unwrap() []error { return []error{&e.ProtocolError, ErrTruncated} }

// reject returns a request-level error.
func reject(code RequestErrorCode, format string, args ...any) error {
	return &RejectError{Code: code, Reason: fmt.Sprintf(format, args...)}
}

// ErrNotInDraft is wrapped by the error an encoder returns for something the
// negotiated draft cannot express, such as a parameter, message or code
// that only another draft defines, so a session can refuse before sending.
var ErrNotInDraft = errors.New("not in the negotiated draft")

// NotInDraftError names what the draft Version cannot express. It wraps
// ErrNotInDraft.
type NotInDraftError struct {
	What    string
	Version Version
}

func (e *NotInDraftError) Error() string {
	return fmt.Sprintf("moqt: %s is not in %s", e.What, e.Version)
}

func (e *NotInDraftError) Unwrap() error { return ErrNotInDraft }
