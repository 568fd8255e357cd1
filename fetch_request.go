package moqt

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// FetchRequest is a peer's FETCH (§9.11), handed to the Handler. It is
// answered with exactly one FETCH_OK (Accept) or REQUEST_ERROR (Reject),
// and its objects go on the data stream Objects returns, which
// may carry objects before the answer (§9.12). LocalTrack.Fetch serves
// one from a track; an application with storage of its own uses Window,
// Objects and Accept.
//
// The fetch is over once its data stream has ended and its answer was
// sent, or when the subscriber cancels it: STOP_SENDING on the request
// stream resets both streams (§3.2.1), as does STOP_SENDING on the
// data stream. Context ends at a cancellation, or once the fetch is over
// and the requester has finished its direction. A Handler that accepts
// ends the data stream, with Close or Reset, itself or through another
// goroutine: until then the fetch keeps its place among those the
// session serves at once (Config.MaxServedFetches).
type FetchRequest struct {
	RequestCommon
	// Track is the requested track.
	Track wire.FullTrackName
	// Params are the FETCH's parameters. Its AUTHORIZATION_TOKENs are
	// resolved, as USE_VALUE (see AuthorizationTokens).
	Params wire.Params

	w *FetchWriter
	// done is closed when the fetch is over; release frees its place
	// among the session's served fetches.
	done     chan struct{}
	overOnce sync.Once
	release  func()

	mu       sync.Mutex // guards the fields below
	accepted bool       // FETCH_OK was sent
	finished bool       // the data stream ended with a FIN
	quiet    bool       // a REQUEST_ERROR ends the request stream
}

// Window resolves the FETCH's range against largest, the track's Largest
// Object now (§3.3.1, §9.11): LOCATION_FILTER's Start and End, End cut at
// largest, and without a filter {0, 0} to largest. Nothing published, or a
// start past largest, is an INVALID_RANGE *RequestError to answer
// with Reject.
func (r *FetchRequest) Window(largest wire.Opt[wire.Location]) (start, end wire.Location, err error) {
	w, err := filter.FetchWindow(r.Params.LocationFilter.Value, largestOf(largest))
	if err != nil {
		return wire.Location{}, wire.Location{}, filterError(err)
	}
	return w.Start, w.End, nil
}

// Accept answers with FETCH_OK: end is the End Location, the end of the
// range the response covers, and endOfTrack says that it is the track's
// last object (§9.12). The caller passes it once the end is known, which
// is the point at which FETCH_OK may go (§9.12); objects may be written to
// Objects before. props are the Track Properties, left out when the FETCH
// sets INCLUDE_PROPERTIES to 0 (§9.20.22).
func (r *FetchRequest) Accept(endOfTrack bool, end wire.Location, props wire.KVList) error {
	if r.Params.IncludeProperties.Set && !r.Params.IncludeProperties.Value {
		props = nil
	}
	err := r.answer(func() error {
		select {
		case <-r.done:
			return fmt.Errorf("moqt: FETCH already ended: %w", context.Cause(r.ctx))
		default:
		}
		return r.rs.write(&wire.FetchOK{EndOfTrack: endOfTrack, EndLocation: r.sess.wireFetchEnd(end), TrackProperties: props})
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.accepted = true
	r.mu.Unlock()
	r.complete()
	return nil
}

// Objects returns the FETCH's data stream, opened on its first write. A
// Reject after it was used resets it (§3.2.1).
func (r *FetchRequest) Objects() *FetchWriter { return r.w }

// complete ends the fetch, FIN on its request stream, once it is answered
// and its data stream finished: nothing more is to be sent for it.
func (r *FetchRequest) complete() {
	r.mu.Lock()
	ready := r.accepted && r.finished
	r.mu.Unlock()
	if ready {
		_ = r.rs.fin()
		r.over()
	}
}

// over releases the fetch's state, once.
func (r *FetchRequest) over() {
	r.overOnce.Do(func() {
		close(r.done)
		r.release()
	})
}

// streamEnded applies the end of the data stream: err is nil for a FIN,
// else the reason for its reset, which ends the request too (its stream
// is reset, §3.2.1) unless the request stream ends on its own, after a
// REQUEST_ERROR.
func (r *FetchRequest) streamEnded(err error) {
	r.mu.Lock()
	if err == nil {
		r.finished = true
	}
	quiet := r.quiet
	r.mu.Unlock()
	switch {
	case err == nil:
		r.complete()
	case quiet:
		r.over()
	default:
		r.abandon(err, resetCodeOf(err))
	}
}

// abandon ends a fetch that will not complete: the request stream is
// reset with code, the data stream too, and no answer goes out after.
// The request stream goes first, which wakes an answer blocked writing.
func (r *FetchRequest) abandon(cause error, code wire.ResetCode) {
	r.cancel(cause)
	r.rs.cancel(code)
	r.w.fail(code, cause)
	_ = r.answer(func() error { return nil })
	r.over()
}

// endQuietly ends the data stream with code while the request stream ends
// by itself: a REQUEST_ERROR was sent on it.
func (r *FetchRequest) endQuietly(code wire.ResetCode, err error) {
	r.mu.Lock()
	r.quiet = true
	r.mu.Unlock()
	r.w.fail(code, err)
	r.over()
}

// resetCodeOf is the code to reset the request stream of a fetch whose
// data stream failed with err.
func resetCodeOf(err error) wire.ResetCode {
	var fe *fetchStreamError
	if errors.As(err, &fe) {
		return fe.code
	}
	return wire.ResetCancelled
}

// fetchStreamError is why a fetch stream was reset, with the code.
type fetchStreamError struct {
	code wire.ResetCode
	err  error
}

func (e *fetchStreamError) Error() string { return e.err.Error() }
func (e *fetchStreamError) Unwrap() error { return e.err }

// serveFetch hands a FETCH to the Handler and reads the subscriber's side
// of its stream until the fetch is over. On 18/19 a Standalone FETCH's
// Start and End Location become the LOCATION_FILTER the Handler sees
// (fetch_draft.go); a Joining FETCH is the session's (fetch_join.go).
func serveFetch(s *Session, rs *requestStream, m *wire.Fetch, toks []AuthToken) error {
	if m.FetchType.Joining() {
		return serveJoiningFetch(s, rs, m, toks)
	}
	if s.profile().JoiningFetch {
		m.Parameters.LocationFilter = wire.Some(standaloneFilter(m.StartLocation, m.EndLocation))
	}
	release, rej := admitFetch(s, m)
	if rej != nil {
		rs.reject(rej)
		return rs.drain()
	}
	track := wire.FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}
	r := newFetchRequest(s, rs, track, m.Parameters, toks, release)
	s.handOff(r)
	return rs.serve((*fetchServed)(r))
}

// admitFetch applies the checks every FETCH passes before it is served:
// its range filters (C026), and a served-fetch place, whose release it
// returns.
func admitFetch(s *Session, m *wire.Fetch) (release func(), rej *RequestError) {
	if err := checkRanges(&m.Parameters, s.cfg.MaxFilterRanges); err != nil {
		return nil, asRequestError(err)
	}
	release, ok := takeFetchSlot(s)
	if !ok {
		return nil, errFetchSlots(s)
	}
	return release, nil
}

// errFetchSlots refuses a FETCH past Config.MaxServedFetches.
func errFetchSlots(s *Session) *RequestError {
	return &RequestError{Code: wire.ReqExcessiveLoad, RetryInterval: LoadRetryInterval(),
		Reason: fmt.Sprintf("more than %d fetches served at once", s.cfg.MaxServedFetches)}
}

// newFetchRequest is the FetchRequest of a FETCH for track with params,
// holding one of the session's served-fetch places (release).
func newFetchRequest(s *Session, rs *requestStream, track wire.FullTrackName, params wire.Params, toks []AuthToken, release func()) *FetchRequest {
	r := &FetchRequest{
		RequestCommon: newIncoming(rs, toks, track.Namespace),
		Track:         track,
		Params:        params,
		done:          make(chan struct{}),
		release:       release,
	}
	desc := params.GroupOrder.Set && params.GroupOrder.Value == wire.GroupOrderDescending
	r.w = newFetchWriter(s, rs.id, desc, subscriberPriority(&params), defaultPublisherPriority)
	r.w.open = func(ctx context.Context) (transport.SendStream, error) { return openFetchStream(ctx, s) }
	r.w.forget = func(str transport.SendStream) { s.priorities().Remove(str) }
	r.w.over = r.streamEnded
	r.rejected = func(e *RequestError) {
		// A REQUEST_ERROR may follow objects (§3.2.1): the data stream
		// will not be completed.
		r.endQuietly(wire.ResetCancelled, e)
	}
	return r
}

// openFetchStream opens a unidirectional stream for a fetch, waiting for
// stream credit until ctx ends.
func openFetchStream(ctx context.Context, s *Session) (transport.SendStream, error) {
	str, err := s.conn.OpenUniStream()
	if err == nil {
		return str, nil
	}
	if s.conn.Context().Err() != nil {
		return nil, s.closeErr(err)
	}
	str, err = s.conn.OpenUniStreamSync(ctx)
	if err != nil && ctx.Err() != nil && s.ctx.Err() == nil {
		return nil, ctx.Err()
	}
	return str, err
}

// fetchServed is the publisher's side of a FETCH's request stream.
type fetchServed FetchRequest

// handle applies a REQUEST_UPDATE (§9.5), which for a FETCH changes only
// its subscriber priority: REQUEST_OK once the FETCH is answered with
// FETCH_OK; a failed one is answered with REQUEST_ERROR and resets the
// data stream (C092).
func (f *fetchServed) handle(m wire.Message, rej *wire.RejectError) error {
	r := (*FetchRequest)(f)
	u, ok := m.(*wire.RequestUpdate)
	if !ok {
		if _, away := m.(*wire.Goaway); away {
			return nil
		}
		return protocolViolation("unexpected %s from the requester of FETCH", m.Type())
	}
	select {
	case <-r.done:
		return r.rs.crossed(m) // the fetch is over: discarded
	default:
	}
	if err := r.sess.ids.checkPeer(u.RequestID); err != nil {
		return err
	}
	if err := u.Parameters.Check(wire.InUpdateFetch); err != nil {
		return sessionErrorFrom(err)
	}
	if rej == nil && u.Parameters.SubscriberPriority.Set {
		r.w.setSubscriber(u.Parameters.SubscriberPriority.Value)
	}
	// The answer to the FETCH comes first on the stream; a FETCH refused
	// or cancelled meanwhile leaves the update unanswered.
	select {
	case <-r.answeredCh:
	case <-r.done:
	case <-r.ctx.Done():
	}
	r.mu.Lock()
	accepted := r.accepted
	r.mu.Unlock()
	select {
	case <-r.done:
		return nil
	default:
		if !accepted {
			return nil
		}
	}
	if rej != nil {
		// The fetch cannot go on as asked: its data stream is reset
		// (C092) and, with nothing more to send, the request stream
		// finished.
		_ = r.rs.write((&RequestError{Code: rej.Code, Reason: rej.Reason}).message())
		r.endQuietly(wire.ResetCancelled, fmt.Errorf("moqt: REQUEST_UPDATE failed: %s", rej.Reason))
		_ = r.rs.fin()
		return nil
	}
	_ = r.rs.write(&wire.RequestOK{})
	return nil
}

// peerFinished waits for the fetch to end: the requester's FIN, usually
// right after its request, is no cancellation.
func (f *fetchServed) peerFinished() {
	select {
	case <-f.done:
	case <-f.sess.ctx.Done():
	}
}

// reset applies the requester's reset of its direction: it cancels the
// fetch (§6.4.2.3).
func (f *fetchServed) reset(cause error) { (*FetchRequest)(f).abandon(cause, wire.ResetCancelled) }

// stoppedByPeer applies the requester's STOP_SENDING: both streams are
// reset (§3.2.1, C087).
func (f *fetchServed) stoppedByPeer() {
	(*FetchRequest)(f).abandon(fmt.Errorf("%w: STOP_SENDING from the subscriber", ErrCancelled), wire.ResetCancelled)
}

// failed applies the session's end, which closes both streams.
func (f *fetchServed) failed(se *SessionError) {
	r := (*FetchRequest)(f)
	_ = r.answer(func() error { return nil })
	r.w.end(se)
	r.over()
}
