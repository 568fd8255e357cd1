package moqt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// requestStream is one bidirectional request stream (§6.4.2): the framing,
// serialized writes, FIN and cancellation shared by every request type. Its
// state machine belongs to the request that owns it (a subscription, a
// TRACK_STATUS, …); requestStream only enforces the stream-level rules.
type requestStream struct {
	sess *Session
	str  transport.Stream
	mr   *wire.MessageReader
	id   uint64 // Request ID of the message that opened the stream
	// in is str as mr reads it: it starts the message timer at a
	// message's first byte. It belongs to the reader goroutine.
	in timedReader
	// unanswered counts the peer's REQUEST_UPDATEs discarded by crossed
	// (reader goroutine only).
	unanswered uint64
	// local reports whether this endpoint opened the stream (sent the request).
	local bool
	// tokenKey identifies the stream to the session's send token cache;
	// sentTokens is what the request that opened it did there, settled
	// when it is answered (§8.9). Both are set before the stream is read.
	tokenKey   *tokenStream
	sentTokens *tokenUse
	// peer is the request a peer's stream carries, once it is handed to
	// the Handler: the read loop ends its Context. Set before the loop
	// starts; the loop's goroutine alone reads it.
	peer *RequestCommon

	// onClose, if set, ends the request gracefully when Session.Close
	// lingers (a served subscription's PUBLISH_DONE).
	onClose atomic.Pointer[func()]
	// finDone is set once this end finished its direction with a FIN;
	// read without wmu by Session.Close's wait.
	finDone atomic.Bool

	wmu sync.Mutex // guards the fields below and serializes writes
	// typ is the type of the request that opened the stream: set before
	// the first read on a peer's stream, by the first write on this
	// end's.
	typ       wire.MessageType
	wbuf      []byte
	finSent   bool
	cancelled bool
	goawayIn  bool // a GOAWAY arrived on this stream (reader goroutine only)
}

// newRequestStream wraps str. Nothing is allocated for reading until
// bytes arrive: the message buffer grows with them (wire.MessageReader),
// and there is no read-ahead buffer, so an idle stream costs little.
func newRequestStream(s *Session, str transport.Stream, id uint64, local bool) *requestStream {
	rs := &requestStream{
		sess:     s,
		str:      str,
		id:       id,
		local:    local,
		tokenKey: new(tokenStream),
	}
	rs.in.rs = rs
	rs.mr = wire.NewMessageReader(&rs.in)
	return rs
}

// timedReader reads a request stream for its MessageReader. The first
// byte of a message starts the message's timer.
type timedReader struct {
	rs *requestStream
	messageTimer
}

func (r *timedReader) Read(p []byte) (int, error) {
	n, err := r.rs.str.Read(p)
	if n > 0 && !r.armed {
		r.rs.startTimer()
	}
	return n, err
}

// startTimer starts the CONTROL_MESSAGE_TIMEOUT for the message being
// read (§12.2).
func (rs *requestStream) startTimer() { rs.in.start(rs.sess, "on a request stream") }

// stopTimer ends the timing of the message just read.
func (rs *requestStream) stopTimer() { rs.in.stop() }

// requestType is the type of the request that opened the stream.
func (rs *requestStream) requestType() wire.MessageType {
	rs.wmu.Lock()
	defer rs.wmu.Unlock()
	return rs.typ
}

// answered records that the request that opened the stream, sent by this
// endpoint, has its response: the tokens it registered are usable from
// other streams now (§8.9).
func (rs *requestStream) answered() { rs.sess.sentTokens.answered(rs.sentTokens) }

// errStreamDone reports a write after FIN or cancellation.
var errStreamDone = errors.New("moqt: request stream already closed")

// write sends one framed message in a single Write.
func (rs *requestStream) write(m wire.Message) error {
	rs.wmu.Lock()
	defer rs.wmu.Unlock()
	if rs.finSent || rs.cancelled {
		return errStreamDone
	}
	if rs.typ == 0 && m.Type().IsRequest() {
		rs.typ = m.Type()
	}
	b, err := wire.AppendMessage(rs.sess.version, rs.wbuf[:0], rs.sess.rules.fitMessage(m))
	if err != nil {
		return err
	}
	rs.wbuf = b
	if _, err := rs.str.Write(b); err != nil {
		return rs.sess.streamError(err)
	}
	return nil
}

// writeAndFin sends m and then FIN, the way a final message such as
// PUBLISH_DONE or TRACK_STATUS_OK ends a direction (§6.4.2.2).
func (rs *requestStream) writeAndFin(m wire.Message) error {
	if err := rs.write(m); err != nil {
		return err
	}
	return rs.fin()
}

// fin closes the sending direction gracefully. Callers only reach it once
// the request's required messages are sent (C008). Its error is mapped as
// write's: a WebTransport stream that the session's close has reset fails
// its Close with the transport's close error, which must not reach the
// caller in place of the session's cause.
func (rs *requestStream) fin() error {
	rs.wmu.Lock()
	defer rs.wmu.Unlock()
	if rs.finSent || rs.cancelled {
		return nil
	}
	rs.finSent = true
	rs.finDone.Store(true)
	if err := rs.str.Close(); err != nil {
		return rs.sess.streamError(err)
	}
	return nil
}

// cancel abruptly ends both directions: RESET_STREAM on the sending side
// (unless a FIN was already sent) and STOP_SENDING on the receiving side
// (§6.4.2.3).
func (rs *requestStream) cancel(code wire.ResetCode) {
	// A write blocked on the peer's flow control holds wmu: a past
	// deadline wakes it, so that the cancel never waits on the peer.
	_ = rs.str.SetWriteDeadline(time.Unix(1, 0))
	rs.wmu.Lock()
	defer rs.wmu.Unlock()
	if rs.cancelled {
		return
	}
	rs.cancelled = true
	if !rs.finSent {
		rs.str.CancelWrite(uint64(code))
	}
	rs.str.CancelRead(uint64(code))
}

// peerStopped reports whether the sending direction ended without this end
// finishing or cancelling it: the peer sent STOP_SENDING (or the connection
// is gone).
func (rs *requestStream) peerStopped() bool {
	rs.wmu.Lock()
	defer rs.wmu.Unlock()
	return rs.str.Context().Err() != nil && !rs.finSent && !rs.cancelled
}

// watchStopSending calls fn, in a goroutine of its own, if the peer sends
// STOP_SENDING while this end is still sending. The send side's context
// also ends on this end's FIN or reset, which fin and cancel flag first, so
// those never call fn. The returned stop function unregisters fn; no
// goroutine exists until the context ends, and the one that runs fn ends
// with it.
func (rs *requestStream) watchStopSending(fn func()) (stop func() bool) {
	return context.AfterFunc(rs.str.Context(), func() {
		if rs.peerStopped() && rs.sess.ctx.Err() == nil {
			fn()
		}
	})
}

// crossed applies, to a message the peer sent on a request this end has
// ended (refused or cancelled) and that is otherwise discarded, the rules
// that hold whatever the request's state: a REQUEST_UPDATE consumes a
// Request ID (§6.4.2.1), its parameters must fit the request (§9.20.1),
// and, never answered, it stays outstanding against MAX_REQUEST_UPDATES
// (§9.1.7). Only the stream's reader calls it.
func (rs *requestStream) crossed(m wire.Message) error {
	u, ok := m.(*wire.RequestUpdate)
	if !ok {
		return nil
	}
	if err := rs.sess.ids.checkPeer(u.RequestID); err != nil {
		return err
	}
	if err := rs.sess.rules.checkPeerParams(&u.Parameters, updateContext(rs.requestType())); err != nil {
		return sessionErrorFrom(err)
	}
	return rs.unansweredUpdate()
}

// unansweredUpdate counts a REQUEST_UPDATE of the peer's that will never
// be answered against MAX_REQUEST_UPDATES (§9.1.7). Only the stream's
// reader calls it.
func (rs *requestStream) unansweredUpdate() error {
	if limit := rs.sess.maxRequestUpdates(); limit > 0 && rs.unanswered >= limit {
		return &SessionError{Code: wire.TooManyRequestUpdates,
			Reason: fmt.Sprintf("more than %d outstanding REQUEST_UPDATEs on request stream %d", limit, rs.id)}
	}
	rs.unanswered++
	return nil
}

// updateContext is where a REQUEST_UPDATE's parameters are checked, by
// the type of the request it updates (§9.20.2).
func updateContext(request wire.MessageType) wire.ParamContext {
	switch request {
	case wire.MsgFetch:
		return wire.InUpdateFetch
	case wire.MsgPublishNamespace:
		return wire.InUpdatePublishNamespace
	case wire.MsgSubscribeNamespace:
		return wire.InUpdateSubscribeNamespace
	case wire.MsgSubscribeTracks:
		return wire.InUpdateSubscribeTracks
	}
	return wire.InUpdateSubscription
}

// checkSender applies the rules on which end of a request may send which
// message (§9, Table 5), whatever state the request is in; the request's
// owner applies those that depend on its state. Only the responder
// answers, except that the publisher of a PUBLISH answers its
// subscriber's REQUEST_UPDATEs. REQUEST_UPDATE comes from the requester
// of anything but TRACK_STATUS, or from the subscriber of a PUBLISH
// (§9.5, §9.13). PUBLISH_STATE_NOTIFY and PUBLISH_DONE come from a
// subscription's publisher only (§9.10, §9.9). Each other response
// belongs to its request. GOAWAY may come from either end (§9.2). A
// request message past the first is out of place (§9): all of these are
// a PROTOCOL_VIOLATION.
func (rs *requestStream) checkSender(t wire.MessageType) error {
	typ := rs.requestType()
	fromRequester := !rs.local
	var ok bool
	switch t {
	case wire.MsgGoaway:
		ok = true
	case wire.MsgRequestUpdate:
		ok = fromRequester && typ != wire.MsgTrackStatus || !fromRequester && typ == wire.MsgPublish
	case wire.MsgRequestOK, wire.MsgRequestError:
		ok = !fromRequester || typ == wire.MsgPublish
	case wire.MsgPublishStateNotify, wire.MsgPublishDone:
		ok = !fromRequester && typ == wire.MsgSubscribe || fromRequester && typ == wire.MsgPublish
	case wire.MsgSubscribeOK:
		ok = !fromRequester && typ == wire.MsgSubscribe
	case wire.MsgFetchOK:
		ok = !fromRequester && typ == wire.MsgFetch
	case wire.MsgNamespace, wire.MsgNamespaceDone:
		ok = !fromRequester && typ == wire.MsgSubscribeNamespace
	case wire.MsgPublishSkipped:
		ok = !fromRequester && typ == wire.MsgSubscribeTracks
	}
	if ok {
		return nil
	}
	from := "responder"
	if fromRequester {
		from = "requester"
	}
	return protocolViolation("%s from the %s of %s on request stream %d", t, from, typ, rs.id)
}

// isReject reports a request-level parse error: the message is whole.
func isReject(err error) bool {
	_, ok := err.(*wire.RejectError)
	return ok
}

// isCancelled reports whether this end cancelled the stream.
func (rs *requestStream) isCancelled() bool {
	rs.wmu.Lock()
	defer rs.wmu.Unlock()
	return rs.cancelled
}

// readMessage reads the next message. io.EOF means the peer sent FIN at a
// message boundary. A REQUEST_UPDATE with a request-level problem comes
// back together with its *wire.RejectError. A GOAWAY is handled here for
// every request type: the first is returned to the caller, a second is a
// PROTOCOL_VIOLATION (§9.2). So are the authorization tokens of every
// REQUEST_UPDATE, which the peer sent whoever reads it: they are resolved
// in its parameters (§8.9), and registered even if the update is refused
// or ignored. Every message is held to checkSender first, and every
// REQUEST_ERROR to the Redirect rules (§9.4.1), so that no reader, live
// or draining, can miss them.
func (rs *requestStream) readMessage() (wire.Message, error) {
	m, err := rs.mr.ReadMessage(rs.sess.version)
	rs.stopTimer()
	if m != nil {
		if serr := rs.checkSender(m.Type()); serr != nil {
			return nil, serr
		}
	}
	if u, ok := m.(*wire.RequestUpdate); ok && (err == nil || isReject(err)) {
		_, tokRej, terr := rs.sess.peerTokens.take(&u.Parameters)
		if terr != nil {
			return nil, terr
		}
		if err == nil && tokRej != nil {
			err = &wire.RejectError{Code: tokRej.Code, Reason: tokRej.Reason}
		}
	}
	if err != nil {
		if errors.Is(err, io.EOF) && !errors.Is(err, wire.ErrTruncated) {
			return nil, io.EOF
		}
		var pe *wire.ProtocolError
		if errors.As(err, &pe) {
			return nil, sessionErrorFrom(err)
		}
		if _, ok := err.(*wire.RejectError); ok {
			// Only requests carry request-level rejections; mid-stream,
			// that is REQUEST_UPDATE, which its owner answers with
			// REQUEST_ERROR.
			if u, isUpdate := m.(*wire.RequestUpdate); isUpdate {
				return u, err
			}
			return nil, protocolViolation("unexpected %s on request stream %d", m.Type(), rs.id)
		}
		return nil, rs.sess.streamError(err)
	}
	switch m := m.(type) {
	case *wire.Goaway:
		if rs.goawayIn {
			return nil, protocolViolation("second GOAWAY on request stream %d", rs.id)
		}
		rs.goawayIn = true
		if err := rs.sess.checkGoaway(m, false); err != nil {
			return nil, err
		}
	case *wire.RequestError:
		// A Redirect's rules depend on who receives it and on what it
		// answers (§9.4.1); every REQUEST_ERROR passes here.
		if err := m.Check(!rs.sess.isClient, rs.requestType()); err != nil {
			return nil, sessionErrorFrom(err)
		}
	}
	return m, nil
}

// reject answers a request with REQUEST_ERROR and FIN (§6.4.2.3). The
// requester finishes its direction in turn, and whoever reads the stream
// keeps reading until it does (§6.4.2.2); the request counts as open, for
// Shutdown, until then. A STOP_SENDING here would read as a cancellation,
// so none is sent.
func (rs *requestStream) reject(e *RequestError) {
	// A failed write means the stream or session is gone already, which
	// ends the request just the same; should the message fail to encode,
	// a reset still ends it rather than leave the requester waiting.
	if err := rs.writeAndFin(e.message()); err != nil {
		rs.cancel(wire.ResetInternalError)
	}
}
