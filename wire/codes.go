package wire

import "fmt"

// Each error-code registry of §12 (and §16.11) is its own type, so a code of
// one registry cannot be passed where another is expected. A received code
// that a registry does not define stays representable: its String reports it
// in hex, and Known reports false so the session can read it as
// INTERNAL_ERROR (§12).

// SessionErrorCode is a session termination code (§12.2), sent in
// CONNECTION_CLOSE or CLOSE_WEBTRANSPORT_SESSION.
type SessionErrorCode uint64

// Session termination codes (§12.2).
const (
	NoError                 SessionErrorCode = 0x0
	InternalError           SessionErrorCode = 0x1
	Unauthorized            SessionErrorCode = 0x2
	ProtocolViolation       SessionErrorCode = 0x3
	InvalidRequestID        SessionErrorCode = 0x4
	DuplicateTrackAlias     SessionErrorCode = 0x5
	KeyValueFormattingError SessionErrorCode = 0x6
	InvalidPath             SessionErrorCode = 0x8
	MalformedPath           SessionErrorCode = 0x9
	GoawayTimeout           SessionErrorCode = 0x10
	ControlMessageTimeout   SessionErrorCode = 0x11
	DataStreamTimeout       SessionErrorCode = 0x12
	AuthTokenCacheOverflow  SessionErrorCode = 0x13
	DuplicateAuthTokenAlias SessionErrorCode = 0x14
	MalformedAuthToken      SessionErrorCode = 0x16
	UnknownAuthTokenAlias   SessionErrorCode = 0x17
	ExpiredAuthToken        SessionErrorCode = 0x18
	InvalidAuthority        SessionErrorCode = 0x19
	MalformedAuthority      SessionErrorCode = 0x1A
	TooManyRequestUpdates   SessionErrorCode = 0x1B

	// VersionNegotiationFailed exists in drafts 18 and 19 only (removed in
	// 20); see Profile.HasSessionError.
	VersionNegotiationFailed SessionErrorCode = 0x15
)

var sessionErrorNames = map[SessionErrorCode]string{
	NoError:                  "NO_ERROR",
	InternalError:            "INTERNAL_ERROR",
	Unauthorized:             "UNAUTHORIZED",
	ProtocolViolation:        "PROTOCOL_VIOLATION",
	InvalidRequestID:         "INVALID_REQUEST_ID",
	DuplicateTrackAlias:      "DUPLICATE_TRACK_ALIAS",
	KeyValueFormattingError:  "KEY_VALUE_FORMATTING_ERROR",
	InvalidPath:              "INVALID_PATH",
	MalformedPath:            "MALFORMED_PATH",
	GoawayTimeout:            "GOAWAY_TIMEOUT",
	ControlMessageTimeout:    "CONTROL_MESSAGE_TIMEOUT",
	DataStreamTimeout:        "DATA_STREAM_TIMEOUT",
	AuthTokenCacheOverflow:   "AUTH_TOKEN_CACHE_OVERFLOW",
	DuplicateAuthTokenAlias:  "DUPLICATE_AUTH_TOKEN_ALIAS",
	MalformedAuthToken:       "MALFORMED_AUTH_TOKEN",
	UnknownAuthTokenAlias:    "UNKNOWN_AUTH_TOKEN_ALIAS",
	ExpiredAuthToken:         "EXPIRED_AUTH_TOKEN",
	InvalidAuthority:         "INVALID_AUTHORITY",
	MalformedAuthority:       "MALFORMED_AUTHORITY",
	TooManyRequestUpdates:    "TOO_MANY_REQUEST_UPDATES",
	VersionNegotiationFailed: "VERSION_NEGOTIATION_FAILED",
}

func (c SessionErrorCode) String() string { return codeName(sessionErrorNames, c) }

// Known reports whether c is defined by draft 21 (§12.2). A session of
// another draft asks its Profile.
func (c SessionErrorCode) Known() bool { return profile21.HasSessionError(c) }

// RequestErrorCode is the Error Code of REQUEST_ERROR (§9.4, §12.3).
type RequestErrorCode uint64

// REQUEST_ERROR codes (§12.3, §16.11.2).
const (
	ReqInternalError        RequestErrorCode = 0x0
	ReqUnauthorized         RequestErrorCode = 0x1
	ReqTimeout              RequestErrorCode = 0x2
	ReqNotSupported         RequestErrorCode = 0x3
	ReqMalformedAuthToken   RequestErrorCode = 0x4
	ReqExpiredAuthToken     RequestErrorCode = 0x5
	ReqGoingAway            RequestErrorCode = 0x6
	ReqExcessiveLoad        RequestErrorCode = 0x9
	ReqDoesNotExist         RequestErrorCode = 0x10
	ReqInvalidRange         RequestErrorCode = 0x11
	ReqMalformedTrack       RequestErrorCode = 0x12
	ReqUninterested         RequestErrorCode = 0x20
	ReqPrefixOverlap        RequestErrorCode = 0x30
	ReqNamespaceTooLarge    RequestErrorCode = 0x31
	ReqUnsupportedExtension RequestErrorCode = 0x33
	ReqRedirect             RequestErrorCode = 0x34
	ReqConflictingFilters   RequestErrorCode = 0x35
	ReqInvalidFilter        RequestErrorCode = 0x36

	// Codes of the older drafts only (Profile.HasRequestError):
	// DUPLICATE_SUBSCRIPTION in 18, INVALID_JOINING_REQUEST_ID in 18 and 19.
	ReqDuplicateSubscription   RequestErrorCode = 0x19
	ReqInvalidJoiningRequestID RequestErrorCode = 0x32
)

var requestErrorNames = map[RequestErrorCode]string{
	ReqInternalError:           "INTERNAL_ERROR",
	ReqUnauthorized:            "UNAUTHORIZED",
	ReqTimeout:                 "TIMEOUT",
	ReqNotSupported:            "NOT_SUPPORTED",
	ReqMalformedAuthToken:      "MALFORMED_AUTH_TOKEN",
	ReqExpiredAuthToken:        "EXPIRED_AUTH_TOKEN",
	ReqGoingAway:               "GOING_AWAY",
	ReqExcessiveLoad:           "EXCESSIVE_LOAD",
	ReqDoesNotExist:            "DOES_NOT_EXIST",
	ReqInvalidRange:            "INVALID_RANGE",
	ReqMalformedTrack:          "MALFORMED_TRACK",
	ReqUninterested:            "UNINTERESTED",
	ReqPrefixOverlap:           "PREFIX_OVERLAP",
	ReqNamespaceTooLarge:       "NAMESPACE_TOO_LARGE",
	ReqUnsupportedExtension:    "UNSUPPORTED_EXTENSION",
	ReqRedirect:                "REDIRECT",
	ReqConflictingFilters:      "CONFLICTING_FILTERS",
	ReqInvalidFilter:           "INVALID_FILTER",
	ReqDuplicateSubscription:   "DUPLICATE_SUBSCRIPTION",
	ReqInvalidJoiningRequestID: "INVALID_JOINING_REQUEST_ID",
}

func (c RequestErrorCode) String() string { return codeName(requestErrorNames, c) }

// Known reports whether c is defined by draft 21 (§12.3). An unknown code
// MUST be treated as INTERNAL_ERROR and never closes the session (§12). A
// session of another draft asks its Profile.
func (c RequestErrorCode) Known() bool { return profile21.HasRequestError(c) }

// PublishDoneCode is the Status Code of PUBLISH_DONE (§9.9, §12.4).
type PublishDoneCode uint64

// PUBLISH_DONE status codes (§12.4). 0x3 (SUBSCRIPTION_ENDED) exists in
// drafts 18 and 19 only.
const (
	DoneInternalError  PublishDoneCode = 0x0
	DoneUnauthorized   PublishDoneCode = 0x1
	DoneTrackEnded     PublishDoneCode = 0x2
	DoneGoingAway      PublishDoneCode = 0x4
	DoneTooFarBehind   PublishDoneCode = 0x5
	DoneExpired        PublishDoneCode = 0x6
	DoneUpdateFailed   PublishDoneCode = 0x8
	DoneExcessiveLoad  PublishDoneCode = 0x9
	DoneMalformedTrack PublishDoneCode = 0x12

	DoneSubscriptionEnded PublishDoneCode = 0x3
)

var publishDoneNames = map[PublishDoneCode]string{
	DoneInternalError:     "INTERNAL_ERROR",
	DoneUnauthorized:      "UNAUTHORIZED",
	DoneTrackEnded:        "TRACK_ENDED",
	DoneGoingAway:         "GOING_AWAY",
	DoneTooFarBehind:      "TOO_FAR_BEHIND",
	DoneExpired:           "EXPIRED",
	DoneUpdateFailed:      "UPDATE_FAILED",
	DoneExcessiveLoad:     "EXCESSIVE_LOAD",
	DoneMalformedTrack:    "MALFORMED_TRACK",
	DoneSubscriptionEnded: "SUBSCRIPTION_ENDED",
}

func (c PublishDoneCode) String() string { return codeName(publishDoneNames, c) }

// Known reports whether c is defined by draft 21 (§12.4). A session of
// another draft asks its Profile.
func (c PublishDoneCode) Known() bool { return profile21.HasPublishDoneCode(c) }

// ResetCode is an error code for RESET_STREAM and STOP_SENDING on any MoQT
// stream (§12.5).
type ResetCode uint64

// Stream reset codes (§12.5).
const (
	ResetInternalError       ResetCode = 0x0
	ResetCancelled           ResetCode = 0x1
	ResetDeliveryTimeout     ResetCode = 0x2
	ResetSessionClosed       ResetCode = 0x3
	ResetGoingAway           ResetCode = 0x4
	ResetTooFarBehind        ResetCode = 0x5
	ResetUnknownObjectStatus ResetCode = 0x6
	ResetExpiredAuthToken    ResetCode = 0x7
	ResetExcessiveLoad       ResetCode = 0x9
	ResetMalformedTrack      ResetCode = 0x12
)

var resetNames = map[ResetCode]string{
	ResetInternalError:       "INTERNAL_ERROR",
	ResetCancelled:           "CANCELLED",
	ResetDeliveryTimeout:     "DELIVERY_TIMEOUT",
	ResetSessionClosed:       "SESSION_CLOSED",
	ResetGoingAway:           "GOING_AWAY",
	ResetTooFarBehind:        "TOO_FAR_BEHIND",
	ResetUnknownObjectStatus: "UNKNOWN_OBJECT_STATUS",
	ResetExpiredAuthToken:    "EXPIRED_AUTH_TOKEN",
	ResetExcessiveLoad:       "EXCESSIVE_LOAD",
	ResetMalformedTrack:      "MALFORMED_TRACK",
}

func (c ResetCode) String() string { return codeName(resetNames, c) }

// Known reports whether c is defined by §12.5.
func (c ResetCode) Known() bool { _, ok := resetNames[c]; return ok }

// IsGrease reports whether v is a grease value, 0x7f*N + 0x9D (§13), which
// every registry reserves.
func IsGrease(v uint64) bool {
	return v >= 0x9D && v <= 0x3fffffffffffffde && (v-0x9D)%0x7f == 0
}

func codeName[C ~uint64](names map[C]string, c C) string {
	if s, ok := names[c]; ok {
		return s
	}
	return fmt.Sprintf("0x%x", uint64(c))
}
