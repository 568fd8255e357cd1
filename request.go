package moqt

import (
	"bufio"
	"context"
	"errors"
	"io"
	"sync"

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
	// local reports whether this endpoint opened the stream (sent the request).
	local bool
	// tokenKey identifies the stream to the session's send token cache;
	// sentTokens is what the request that opened it did there, settled
	// when it is answered (§8.9). Both are set before the stream is read.
	tokenKey   *tokenStream
	sentTokens *tokenUse

	wmu       sync.Mutex // guards the fields below and serializes writes
	wbuf      []byte
	finSent   bool
	cancelled bool
	goawayIn  bool // a GOAWAY arrived on this stream (reader goroutine only)
}

func newRequestStream(s *Session, str transport.Stream, id uint64, local bool) *requestStream {
	return &requestStream{
		sess:     s,
		str:      str,
		mr:       wire.NewMessageReader(bufio.NewReader(str)),
		id:       id,
		local:    local,
		tokenKey: new(tokenStream),
	}
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
	b, err := wire.AppendMessage(rs.sess.version, rs.wbuf[:0], m)
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
// the request's required messages are sent (C008).
func (rs *requestStream) fin() error {
	rs.wmu.Lock()
	defer rs.wmu.Unlock()
	if rs.finSent || rs.cancelled {
		return nil
	}
	rs.finSent = true
	return rs.str.Close()
}

// cancel abruptly ends both directions: RESET_STREAM on the sending side
// (unless a FIN was already sent) and STOP_SENDING on the receiving side
// (§6.4.2.3).
func (rs *requestStream) cancel(code wire.ResetCode) {
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

// drain reads and discards what the peer still sends on a request that
// this end has completed, until its FIN or reset (§6.4.2.2). Messages the
// peer sent before it saw the answer, such as a REQUEST_UPDATE, are no
// error; a message this draft does not define is, as anywhere (§9).
func (rs *requestStream) drain() error {
	for {
		_, err := rs.readMessage()
		if err == nil {
			continue
		}
		var re *wire.RejectError
		if errors.As(err, &re) {
			continue
		}
		if se, ok := asSessionError(err); ok && !se.Remote {
			return se
		}
		return nil
	}
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
// or ignored.
func (rs *requestStream) readMessage() (wire.Message, error) {
	m, err := rs.mr.ReadMessage(rs.sess.version)
	if u, ok := m.(*wire.RequestUpdate); ok && (err == nil || isReject(err)) {
		_, tokRej, terr := rs.sess.takeTokens(&u.Parameters)
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
	if g, ok := m.(*wire.Goaway); ok {
		if rs.goawayIn {
			return nil, protocolViolation("second GOAWAY on request stream %d", rs.id)
		}
		rs.goawayIn = true
		if err := rs.sess.checkGoaway(g); err != nil {
			return nil, err
		}
	}
	return m, nil
}
