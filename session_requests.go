package moqt

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// acceptRequestStreams serves the request streams the peer opens.
func (s *Session) acceptRequestStreams() {
	defer s.wg.Done()
	for {
		str, err := s.conn.AcceptStream(s.ctx)
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.serveRequestStream(str); err != nil {
				s.fail(err)
			}
		}()
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
	t, body, err := rs.mr.ReadFrame()
	rs.stopTimer()
	if err != nil {
		if errors.Is(err, wire.ErrTruncated) {
			return err
		}
		str.CancelRead(uint64(wire.ResetCancelled))
		str.CancelWrite(uint64(wire.ResetCancelled))
		return nil // closed or reset before its first message
	}
	kind, ok := requestKinds[t]
	if !ok {
		return protocolViolation("request stream starts with %s", t)
	}
	rs.typ = t
	parsed, perr := wire.ParseMessage(s.version, t, body)
	var rej *wire.RejectError
	if perr != nil && !errors.As(perr, &rej) {
		return perr
	}
	m := parsed.(wire.Request) // every request type is one (wire tests)
	rs.id = m.ID()
	if err := s.checkPeerRequestID(rs.id); err != nil {
		return err
	}
	// Tokens are resolved whatever becomes of the request: a REGISTER
	// stands even if the request fails (§8.9).
	toks, tokRej, err := s.takeTokens(m.Params())
	if err != nil {
		return err
	}
	if !s.track(rs) {
		return nil
	}
	defer s.untrack(rs)
	if e := s.refusal(m, rej, tokRej); e != nil {
		rs.reject(e)
		return rs.drain()
	}
	return kind.serve(s, rs, m, toks)
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
// To serve a new kind (FETCH, PUBLISH_NAMESPACE, SUBSCRIBE_NAMESPACE,
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
	wire.MsgSubscribe:          serveKind((*Session).serveSubscribe),
	wire.MsgPublish:            serveKind((*Session).servePublish),
	wire.MsgTrackStatus:        serveKind((*Session).serveTrackStatus),
	wire.MsgFetch:              notSupported,
	wire.MsgPublishNamespace:   notSupported,
	wire.MsgSubscribeNamespace: notSupported,
	wire.MsgSubscribeTracks:    notSupported,
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
	if s.goingAway() {
		return &RequestError{Code: wire.ReqGoingAway, Reason: "session is draining"}
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

// reject answers a request with REQUEST_ERROR and FIN (§6.4.2.3). The
// requester finishes its direction in turn, and whoever reads the stream
// keeps reading until it does (§6.4.2.2); the request counts as open, for
// Shutdown, until then. A STOP_SENDING here would read as a cancellation,
// so none is sent.
func (rs *requestStream) reject(e *RequestError) {
	// A failed write means the stream or session is gone already, which
	// ends the request just the same.
	_ = rs.writeAndFin(e.message())
}

// goingAway reports whether this endpoint sent GOAWAY.
func (s *Session) goingAway() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sentGoaway
}

// track registers an open request, for Shutdown's drain. It reports false
// once the session is closed.
func (s *Session) track(rs *requestStream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return false
	}
	if len(s.active) == 0 {
		s.idle = make(chan struct{})
	}
	s.active[rs] = struct{}{}
	return true
}

func (s *Session) untrack(rs *requestStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.active[rs]; !ok {
		return
	}
	delete(s.active, rs)
	if len(s.active) == 0 {
		close(s.idle)
	}
}

// newRequestID allocates this endpoint's next Request ID (§6.4.2.1).
func (s *Session) newRequestID() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextID
	s.nextID += 2
	return id
}

// checkPeerRequestID enforces the peer's parity and uniqueness (§6.4.2.1).
func (s *Session) checkPeerRequestID(id uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.peerIDs.add(id); err != nil {
		return &SessionError{Code: wire.InvalidRequestID, Reason: err.Error()}
	}
	return nil
}

// openRequest opens a request stream for a new request of this endpoint,
// whose message will carry toks. The tokens are checked against the peer's
// token cache first (§8.9): if they break its rules, nothing is opened.
func (s *Session) openRequest(ctx context.Context, toks []wire.Token) (*requestStream, error) {
	select {
	case <-s.goawayIn:
		return nil, ErrGoingAway
	default:
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
	rs := newRequestStream(s, str, s.newRequestID(), true)
	rs.tokenKey, rs.sentTokens = key, use
	if !s.track(rs) {
		str.CancelWrite(uint64(wire.ResetSessionClosed))
		s.sentTokens.abort(use)
		return nil, context.Cause(s.ctx)
	}
	return rs, nil
}

// requestIDs records the Request IDs a peer has used. IDs below floor are
// all used; used IDs above it wait in above until the gap closes. A peer
// that leaves a gap open cannot grow above past maxRequestIDGap: the floor
// then moves up, treating the skipped IDs as used.
type requestIDs struct {
	floor uint64
	above map[uint64]struct{}
}

const maxRequestIDGap = 1 << 12

func newRequestIDs(first uint64) requestIDs {
	return requestIDs{floor: first, above: map[uint64]struct{}{}}
}

func (r *requestIDs) add(id uint64) error {
	if id%2 != r.floor%2 {
		return fmt.Errorf("request ID %d has the wrong parity", id)
	}
	if _, dup := r.above[id]; id < r.floor || dup {
		return fmt.Errorf("request ID %d reused", id)
	}
	r.above[id] = struct{}{}
	if len(r.above) > maxRequestIDGap {
		lowest := id
		for k := range r.above {
			lowest = min(lowest, k)
		}
		r.floor = lowest
	}
	for {
		if _, ok := r.above[r.floor]; !ok {
			return nil
		}
		delete(r.above, r.floor)
		r.floor += 2
	}
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
	var zero M
	b, err := m.AppendBody(v, nil)
	if err != nil {
		return zero, &SessionError{Code: wire.InternalError, Reason: "re-encoding " + m.Type().String() + ": " + err.Error()}
	}
	out, err := wire.ParseMessage(v, m.Type(), b)
	var rej *wire.RejectError
	if err != nil && !errors.As(err, &rej) {
		return zero, &SessionError{Code: wire.InternalError, Reason: "re-decoding " + m.Type().String() + ": " + err.Error()}
	}
	return out.(M), nil
}
