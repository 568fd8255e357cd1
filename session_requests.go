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
	if !t.IsRequest() {
		return protocolViolation("request stream starts with %s", t)
	}
	rs.typ = t
	m, perr := wire.ParseMessage(s.version, t, body)
	var rej *wire.RejectError
	if perr != nil && !errors.As(perr, &rej) {
		return perr
	}
	rs.id = requestID(m)
	if err := s.checkPeerRequestID(rs.id); err != nil {
		return err
	}
	// Tokens are resolved whatever becomes of the request: a REGISTER
	// stands even if the request fails (§8.9).
	toks, tokRej, err := s.takeTokens(requestParams(m))
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
	switch m := m.(type) {
	case *wire.Subscribe:
		return s.serveSubscribe(rs, m, toks)
	case *wire.Publish:
		return s.servePublish(rs, m, toks)
	case *wire.TrackStatus:
		return s.serveTrackStatus(rs, m, toks)
	default:
		rs.reject(&RequestError{Code: wire.ReqNotSupported, Reason: m.Type().String() + " is not supported"})
		return rs.drain()
	}
}

// refusal returns the REQUEST_ERROR that answers request m without any
// application processing, or nil when the request goes on (§6.4.2.3): a
// problem found in parsing, then one with its authorization tokens.
func (s *Session) refusal(m wire.Message, rej *wire.RejectError, tokRej *RequestError) *RequestError {
	if rej != nil {
		return &RequestError{Code: rej.Code, Reason: rej.Reason}
	}
	if tokRej != nil {
		return tokRej
	}
	if s.goingAway() {
		return &RequestError{Code: wire.ReqGoingAway, Reason: "session is draining"}
	}
	if track, ok := requestTrack(m); ok && isSessionNamespace(track.Namespace) {
		// Session-level tracks are the implementation's, never the
		// application's; none are defined, so none exist (§6.5).
		return &RequestError{Code: wire.ReqDoesNotExist, Reason: "unknown session-level track"}
	}
	var ns wire.Namespace
	switch m := m.(type) {
	case *wire.PublishNamespace:
		ns = m.TrackNamespace
	case *wire.SubscribeNamespace:
		ns = m.TrackNamespacePrefix
	case *wire.SubscribeTracks:
		ns = m.TrackNamespacePrefix
	}
	if isSessionNamespace(ns) {
		// The same for session-level namespaces: DOES_NOT_EXIST, not
		// the NOT_SUPPORTED of other namespace requests (§6.5).
		return &RequestError{Code: wire.ReqDoesNotExist, Reason: "unknown session-level namespace"}
	}
	return nil
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

// requestID returns the Request ID of a request message.
func requestID(m wire.Message) uint64 {
	switch m := m.(type) {
	case *wire.Subscribe:
		return m.RequestID
	case *wire.Publish:
		return m.RequestID
	case *wire.Fetch:
		return m.RequestID
	case *wire.TrackStatus:
		return m.RequestID
	case *wire.PublishNamespace:
		return m.RequestID
	case *wire.SubscribeNamespace:
		return m.RequestID
	case *wire.SubscribeTracks:
		return m.RequestID
	case *wire.RequestUpdate:
		return m.RequestID
	}
	return 0
}

// requestParams returns the parameters of a request message.
func requestParams(m wire.Message) *wire.Params {
	switch m := m.(type) {
	case *wire.Subscribe:
		return &m.Parameters
	case *wire.Publish:
		return &m.Parameters
	case *wire.Fetch:
		return &m.Parameters
	case *wire.TrackStatus:
		return &m.Parameters
	case *wire.PublishNamespace:
		return &m.Parameters
	case *wire.SubscribeNamespace:
		return &m.Parameters
	case *wire.SubscribeTracks:
		return &m.Parameters
	}
	return nil
}

// requestTrack returns the track a track-scoped request names.
func requestTrack(m wire.Message) (wire.FullTrackName, bool) {
	switch m := m.(type) {
	case *wire.Subscribe:
		return wire.FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}, true
	case *wire.Publish:
		return wire.FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}, true
	case *wire.Fetch:
		return wire.FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}, true
	case *wire.TrackStatus:
		return wire.FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}, true
	}
	return wire.FullTrackName{}, false
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
