package moqt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// acceptRequestStreams serves the request streams the peer opens.
func (s *Session) acceptRequestStreams() {
	for {
		str, err := s.conn.AcceptStream(s.ctx)
		if err != nil {
			return
		}
		s.goroutines.Go(func() {
			if err := s.serveRequestStream(str); err != nil {
				s.fail(err)
			}
		})
	}
}

// serveRequestStream reads the request that opens a peer's stream and
// dispatches it (§6.4.2). Requests that arrive before the peer's SETUP wait
// in their stream's flow-control window, which bounds them (§6.3).
func (s *Session) serveRequestStream(str transport.Stream) error {
	select {
	case <-s.setupDone:
	default:
		s.hook(func(h *sessionHooks) func() { return h.requestWaitsForSetup })
		select {
		case <-s.setupDone:
		case <-s.ctx.Done():
			return nil
		}
	}
	rs := newRequestStream(s, str, 0, false)
	// The peer opened the stream to send its request: it has
	// ControlMessageTimeout to get it here whole.
	rs.startTimer()
	t, body, err := rs.mr.ReadFrameOf(checkRequestOpener)
	rs.stopTimer()
	if err != nil {
		if _, ok := errors.AsType[*wire.ProtocolError](err); ok {
			return err // a truncated request, or one of a type no request has
		}
		str.CancelRead(uint64(wire.ResetCancelled))
		str.CancelWrite(uint64(wire.ResetCancelled))
		return nil // closed or reset before its first message
	}
	kind := requestKinds[t]
	rs.typ = t
	parsed, perr := wire.ParseMessage(s.version, t, body)
	var rej *wire.RejectError
	if perr != nil && !errors.As(perr, &rej) {
		return perr
	}
	m := parsed.(wire.Request) // every request type is one (wire tests)
	rs.id = m.ID()
	if t == wire.MsgSubscribe && s.profile().JoiningFetch {
		// A Joining FETCH may name it before it is registered
		// (serveSubscribe); a refused one never is. Expected before its
		// ID is taken: a Joining FETCH that finds the ID taken then finds
		// it expected too (awaitJoined).
		s.joins.expect(rs.id)
		defer s.joins.forget(rs.id)
	}
	if err := s.ids.checkPeer(rs.id); err != nil {
		return err
	}
	// Tokens are resolved whatever becomes of the request: a REGISTER
	// stands even if the request fails (§8.9).
	toks, tokRej, err := s.peerTokens.take(m.Params())
	if err != nil {
		return err
	}
	if !s.requests.add(rs) {
		return nil
	}
	defer s.requests.remove(rs)
	if e := s.refusal(m, rej, tokRej); e != nil {
		s.joins.forget(rs.id)
		rs.reject(e)
		return rs.drain()
	}
	return kind.serve(s, rs, m, toks)
}

// checkRequestOpener refuses a request stream that starts with a message
// no request has, as soon as its type is read (§6.3: PROTOCOL_VIOLATION),
// rather than once a body that may never come has arrived.
func checkRequestOpener(t wire.MessageType) error {
	if _, ok := requestKinds[t]; !ok {
		return &wire.ProtocolError{Code: wire.ProtocolViolation, Reason: "request stream starts with " + t.String()}
	}
	return nil
}

// requestKind says how this end serves one kind of request a peer opens a
// stream with.
type requestKind struct {
	// serve serves m on rs, once the steps every kind shares are done:
	// the Request ID and the authorization tokens (toks) are taken, and
	// the refusals of refusal applied. It returns the error that must
	// close the session, if any.
	serve func(s *Session, rs *requestStream, m wire.Request, toks []AuthToken) error
}

// requestKinds has an entry for every message that may open a request
// stream (§6.4.2, Table 5); a stream opened by any other is a
// PROTOCOL_VIOLATION. A kind this end does not serve is refused with
// NOT_SUPPORTED (§9.4).
//
// To serve a new kind (PUBLISH_NAMESPACE, SUBSCRIBE_NAMESPACE,
// SUBSCRIBE_TRACKS), replace its notSupported with serveKind(f), where f,
// given the detached message:
//   - applies the checks of the kind that come before the application
//     (a rs.reject then rs.drain refuses it);
//   - builds the kind's Request, which embeds incoming (newIncoming with
//     the namespace ServeMux routes by) and sends each answer through
//     incoming.answer, so that it is answered once (Reject comes with
//     incoming);
//   - calls s.handOff with it, and returns rs.serve(side), where side, a
//     requestSide, applies the requester's later messages and the end of
//     its direction. The loop ends the request's Context and applies what
//     every request shares (GOAWAY, REQUEST_UPDATE Request IDs, who may
//     send what).
//
// The kind's own requests, the outgoing side, open a stream with
// Session.openRequest, write the request, and read the answers with
// requestStream.goServe and a requestSide of their own.
var requestKinds = map[wire.MessageType]requestKind{
	wire.MsgSubscribe:          serveKind(serveSubscribe),
	wire.MsgPublish:            serveKind(servePublish),
	wire.MsgTrackStatus:        serveKind(serveTrackStatus),
	wire.MsgFetch:              serveKind(serveFetch),
	wire.MsgPublishNamespace:   serveKind(servePublishNamespace),
	wire.MsgSubscribeNamespace: serveKind(serveSubscribeNamespace),
	wire.MsgSubscribeTracks:    serveKind(serveSubscribeTracks),
}

// serveKind is the entry of a kind served by f, which gets its own copy of
// the request (detach): the message read aliases the stream's buffer.
func serveKind[M wire.Request](f func(*Session, *requestStream, M, []AuthToken) error) requestKind {
	return requestKind{serve: func(s *Session, rs *requestStream, m wire.Request, toks []AuthToken) error {
		own, err := detach(s.version, m.(M))
		if err != nil {
			return err
		}
		return f(s, rs, own, toks)
	}}
}

// notSupported is the entry of a kind this end does not serve.
var notSupported = requestKind{serve: func(_ *Session, rs *requestStream, m wire.Request, _ []AuthToken) error {
	rs.reject(&RequestError{Code: wire.ReqNotSupported, Reason: m.Type().String() + " is not supported"})
	return rs.drain()
}}

// refusal returns the REQUEST_ERROR that answers request m without any
// application processing, or nil when the request goes on (§6.4.2.3): a
// problem found in parsing, then one with its authorization tokens.
func (s *Session) refusal(m wire.Request, rej *wire.RejectError, tokRej *RequestError) *RequestError {
	if rej != nil {
		return &RequestError{Code: rej.Code, Reason: rej.Reason}
	}
	if tokRej != nil {
		return tokRej
	}
	if s.away.sent.Load() {
		return &RequestError{Code: wire.ReqGoingAway, Reason: "session is draining"}
	}
	if s.closing.Load() {
		return &RequestError{Code: wire.ReqGoingAway, Reason: "session is closing"}
	}
	if !isSessionNamespace(m.Namespace()) {
		return nil
	}
	if _, ok := m.Track(); ok {
		// Session-level tracks are the implementation's, never the
		// application's; none are defined, so none exist (§6.5).
		return &RequestError{Code: wire.ReqDoesNotExist, Reason: "unknown session-level track"}
	}
	// The same for session-level namespaces: DOES_NOT_EXIST, not the
	// NOT_SUPPORTED of other namespace requests (§6.5).
	return &RequestError{Code: wire.ReqDoesNotExist, Reason: "unknown session-level namespace"}
}

// handOff gives r, ready for its answer, to the Handler; the read loop of
// its stream, which the caller runs next, ends r's Context.
func (s *Session) handOff(r Request) {
	in := r.base()
	in.rs.peer = in
	s.serve(r)
}

// serve starts the Handler for r in a goroutine of its own, which Close
// does not wait for, and rejects r if the handler did not answer.
//
// A panicking Handler is recovered, as net/http does, and logged with its
// stack: the session stays up, and the request alone ends with
// INTERNAL_ERROR, as a REQUEST_ERROR if it was not answered yet, else as a
// reset of its stream.
func (s *Session) serve(r Request) {
	s.handlers.Go(func() {
		defer func() {
			in := r.base()
			v := recover()
			if s.ctx.Err() != nil {
				// The request ended with the session. An answer now could
				// still slip out before the connection's close, between
				// the session's cancellation and it, and reach the peer
				// as the request's end instead of the session's.
				in.answer(func() error { return nil })
				if v != nil {
					s.logPanic(r, v)
				}
				return
			}
			if v != nil {
				s.logPanic(r, v)
				e := &RequestError{Code: wire.ReqInternalError, Reason: "internal error"}
				if in.rejectWith(e) == errAlreadyAnswered {
					in.rs.cancel(wire.ResetInternalError)
				}
				return
			}
			_ = in.rejectWith(&RequestError{Code: wire.ReqInternalError, Reason: "request not answered"})
		}()
		s.handler.ServeMOQT(r)
	})
}

// logPanic logs a Handler's panic with its stack, as net/http does.
func (s *Session) logPanic(r Request, v any) {
	s.log.Error("moqt: request", "event", "handler_panic", "request_id", r.base().requestID(), "request", fmt.Sprintf("%T", r),
		"panic", v, "stack", string(debug.Stack()))
}

// TrackStatus asks the peer for the status of track (§9.13). A
// REQUEST_ERROR is returned as *RequestError. A peer that sends GOAWAY on
// the request's stream and ends it unanswered migrates the request (§9.2):
// the error wraps ErrGoingAway.
func (s *Session) TrackStatus(ctx context.Context, track wire.FullTrackName, params wire.Params) (*TrackStatus, error) {
	return askTrackStatus(ctx, s, track, params)
}

// startPublish is openPublish, for LocalTrack.Publish and its join.
func (s *Session) startPublish(ctx context.Context, track wire.FullTrackName, params wire.Params, props wire.KVList,
	join func(*ServedSubscription) (wire.Opt[wire.Location], error)) (*ServedSubscription, error) {
	return openPublish(ctx, s, track, params, props, join)
}

// openRequest opens a request stream for a new request of this endpoint,
// whose message will carry toks. The tokens are checked against the peer's
// token cache first (§8.9): if they break its rules, nothing is opened.
func (s *Session) openRequest(ctx context.Context, toks []wire.Token) (*requestStream, error) {
	if s.away.received() {
		return nil, ErrGoingAway
	}
	if cause := context.Cause(s.ctx); cause != nil {
		return nil, cause
	}
	key := new(tokenStream)
	use, err := s.sentTokens.prepare(toks, key)
	if err != nil {
		return nil, err
	}
	str, err := s.conn.OpenStreamSync(ctx)
	if err != nil {
		s.sentTokens.abort(use)
		return nil, s.closeErr(err)
	}
	rs := newRequestStream(s, str, s.ids.allocate(), true)
	rs.tokenKey, rs.sentTokens = key, use
	if !s.requests.add(rs) {
		str.CancelWrite(uint64(wire.ResetSessionClosed))
		s.sentTokens.abort(use)
		return nil, context.Cause(s.ctx)
	}
	return rs, nil
}

// sessionNamespace is the reserved first namespace field ".session" (§6.5).
var sessionNamespace = []byte(".session")

func isSessionNamespace(ns wire.Namespace) bool {
	return len(ns) > 0 && bytes.Equal(ns[0], sessionNamespace)
}

// detach returns a copy of m that owns its memory. Messages read from a
// stream alias the reader's buffer until the next read; anything kept longer
// is detached by encoding and decoding it again. The codec's fuzz targets
// check that every decoded message survives this round trip; an error here
// is an internal one.
func detach[M wire.Message](v wire.Version, m M) (M, error) {
	out, _, err := detachSized(v, m)
	return out, err
}

// detachSized is detach that also returns the length of the copy's
// encoded body, which its byte fields alias.
func detachSized[M wire.Message](v wire.Version, m M) (M, int, error) {
	var zero M
	b, err := m.AppendBody(v, nil)
	if err != nil {
		return zero, 0, &SessionError{Code: wire.InternalError, Reason: "re-encoding " + m.Type().String() + ": " + err.Error()}
	}
	out, err := wire.ParseMessage(v, m.Type(), b)
	var rej *wire.RejectError
	if err != nil && !errors.As(err, &rej) {
		return zero, 0, &SessionError{Code: wire.InternalError, Reason: "re-decoding " + m.Type().String() + ": " + err.Error()}
	}
	return out.(M), len(b), nil
}

// openChecked holds the parameters of a SUBSCRIBE or FETCH to what where
// allows and to the peer's MAX_FILTER_RANGES, then opens its request
// stream.
func (s *Session) openChecked(ctx context.Context, params *wire.Params, where wire.ParamContext) (*requestStream, error) {
	if err := s.rules.checkOwnParams(params, where); err != nil {
		return nil, err
	}
	if err := s.checkFilterRanges(params); err != nil {
		return nil, err
	}
	return s.openRequest(ctx, params.AuthorizationTokens)
}

// checkFilterRanges refuses range filters in p beyond the peer's
// MAX_FILTER_RANGES.
func (s *Session) checkFilterRanges(p *wire.Params) error {
	limit := uint64(0)
	if s.peerSetup != nil {
		limit = s.peerSetup.MaxFilterRanges.Value
	}
	if err := checkRanges(p, limit); err != nil {
		return fmt.Errorf("%w: %v", ErrFilterRanges, err)
	}
	return nil
}
