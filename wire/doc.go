// Package wire encodes and decodes every MoQT draft-21 control message and
// data-plane format (draft-ietf-moq-transport-21, §8, §9, §11), and those of
// drafts 18, 19 and 20: each call takes the negotiated Version, whose
// Profile says what that draft has (docs/drafts.md lists the differences).
// Section numbers in doc comments are draft 21's unless they say otherwise.
//
// The package is pure: it imports only the standard library and knows nothing
// about streams, goroutines or sessions.
//
// Encoding is append-style: every Append method writes into a caller's buffer
// and allocates nothing when the buffer has room. Decoding is cursor-based and
// strict: lengths are checked before slicing, counts are capped at the spec's
// limits, and trailing bytes inside a length-delimited body are rejected.
// Unless a doc comment says otherwise, []byte fields of a parsed value alias
// the input buffer; copy them if the buffer is reused.
//
// Every decoding error is one of two kinds, so the session can map it to the
// spec's wire action in one place:
//   - *ProtocolError: the session must be closed with Code (most often
//     PROTOCOL_VIOLATION).
//   - *RejectError: the message was well formed but the request it carries
//     must be rejected with REQUEST_ERROR and Code (for example
//     INVALID_FILTER).
//
// Encoding something the negotiated draft cannot express fails with a
// *NotInDraftError, which wraps ErrNotInDraft.
package wire
