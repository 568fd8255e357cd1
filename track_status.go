package moqt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// TrackStatus is the answer to a TRACK_STATUS request (§9.13): what a
// SUBSCRIBE_OK would have said, without a subscription.
type TrackStatus struct {
	// Largest is the track's Largest Object, if anything was published.
	Largest wire.Opt[wire.Location]
	// Properties are the Track Properties.
	Properties wire.KVList
}

// askTrackStatus sends TRACK_STATUS on s and waits for the answer.
func askTrackStatus(ctx context.Context, s *Session, track wire.FullTrackName, params wire.Params) (*TrackStatus, error) {
	if err := s.rules.checkOwnParams(&params, wire.InTrackStatus); err != nil {
		return nil, err
	}
	rs, err := s.openRequest(ctx, params.AuthorizationTokens)
	if err != nil {
		return nil, err
	}
	// TRACK_STATUS is the only message this end sends (§9.13).
	if err := rs.write(&wire.TrackStatus{RequestID: rs.id, TrackNamespace: track.Namespace, TrackName: track.Name, Parameters: params}); err != nil {
		rs.cancel(wire.ResetInternalError)
		s.requests.remove(rs)
		return nil, err
	}
	s.hook(func(h *sessionHooks) func() { return h.trackStatusWritten })
	// The request is out whole: how it ends is for the answer's read to
	// say. A FIN refused because the peer stopped the stream is no end of
	// its own: a WebTransport peer that closes its session stops every
	// stream before its close arrives, and the read then reports the
	// session's end, as it reports a peer's reset.
	_ = rs.fin()
	a := &trackStatusAnswer{rs: rs, done: make(chan struct{})}
	rs.goServe(a)
	select {
	case <-a.done:
		return a.st, a.err
	case <-ctx.Done():
		rs.cancel(wire.ResetCancelled)
		return nil, ctx.Err()
	}
}

// trackStatusAnswer reads the answer to a TRACK_STATUS this end sent, and
// the FIN that must follow it. A GOAWAY may come first (§9.2): the peer
// then means to close the stream without an answer, asking for the
// request elsewhere.
type trackStatusAnswer struct {
	rs       *requestStream
	answered bool
	// st and err are the result, set before done is closed.
	st   *TrackStatus
	err  error
	done chan struct{}
}

func (a *trackStatusAnswer) handle(m wire.Message, _ *wire.RejectError) error {
	if _, ok := m.(*wire.Goaway); ok {
		return nil
	}
	if a.answered {
		return protocolViolation("%s after the TRACK_STATUS answer", m.Type())
	}
	switch m := m.(type) {
	case *wire.RequestOK:
		a.answered = true
		a.rs.answered()
		if err := a.rs.sess.rules.checkRequestOK(m, wire.InTrackStatusOK); err != nil {
			return err
		}
		props, err := ownKVList(m.TrackProperties)
		if err != nil {
			return err
		}
		if err := checkTrackProperties(props); err != nil {
			return err
		}
		a.st = &TrackStatus{Largest: m.Parameters.LargestObject, Properties: props}
		return nil
	case *wire.RequestError:
		a.answered = true
		a.rs.answered()
		own, err := detach(a.rs.sess.version, m)
		if err != nil {
			return err
		}
		a.err = requestErrorFrom(own)
		return nil
	}
	return protocolViolation("unexpected %s answering TRACK_STATUS", m.Type())
}

func (a *trackStatusAnswer) peerFinished() {
	if !a.answered {
		a.st, a.err = nil, a.unanswered(errors.New("moqt: TRACK_STATUS stream closed without an answer"))
	}
	close(a.done)
}

func (a *trackStatusAnswer) reset(cause error) {
	a.st, a.err = nil, cause
	if !a.answered {
		a.err = a.unanswered(cause)
	}
	close(a.done)
}

func (a *trackStatusAnswer) failed(se *SessionError) {
	a.st, a.err = nil, se
	close(a.done)
}

// unanswered is why the request has no answer: err, unless the peer's
// GOAWAY migrated it.
func (a *trackStatusAnswer) unanswered(err error) error {
	if a.rs.goawayIn {
		return fmt.Errorf("moqt: TRACK_STATUS migrated by the peer's GOAWAY: %w", ErrGoingAway)
	}
	return err
}

// TrackStatusRequest is a peer's TRACK_STATUS (§9.13), handed to the
// Handler.
type TrackStatusRequest struct {
	RequestCommon
	// Track is the track asked about.
	Track wire.FullTrackName
	// Params are the request's parameters. Its AUTHORIZATION_TOKENs are
	// resolved, as USE_VALUE (see AuthorizationTokens).
	Params wire.Params
}

// Accept answers with TRACK_STATUS_OK (REQUEST_OK) carrying the Largest
// Object, when anything was published, and the Track Properties, then FIN.
func (r *TrackStatusRequest) Accept(largest wire.Opt[wire.Location], props wire.KVList) error {
	return r.answer(func() error {
		if r.Params.IncludeProperties.Set && !r.Params.IncludeProperties.Value {
			props = nil // INCLUDE_PROPERTIES = 0 (§9.20.22)
		}
		return r.rs.writeAndFin(&wire.RequestOK{Parameters: wire.Params{LargestObject: largest}, TrackProperties: props})
	})
}

// serveTrackStatus hands a TRACK_STATUS to the Handler. Nothing more may
// arrive from the requester (§9.13).
func serveTrackStatus(s *Session, rs *requestStream, m *wire.TrackStatus, toks []AuthToken) error {
	req := &TrackStatusRequest{
		RequestCommon: newIncoming(rs, toks, m.TrackNamespace),
		Track:         wire.FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName},
		Params:        m.Parameters,
	}
	s.handOff(req)
	return rs.serve((*trackStatusServed)(req))
}

// trackStatusServed is the responder's side of a TRACK_STATUS.
type trackStatusServed TrackStatusRequest

func (r *trackStatusServed) handle(m wire.Message, _ *wire.RejectError) error {
	if _, ok := m.(*wire.Goaway); ok {
		return nil
	}
	return protocolViolation("%s after TRACK_STATUS", m.Type())
}

// peerFinished waits for the answer: the requester's FIN, usually right after
// its request, is no cancellation.
func (r *trackStatusServed) peerFinished() { r.waitAnswered() }

// reset waits for the answer too, which goes nowhere: the request's
// Context tells the handler.
func (r *trackStatusServed) reset(error) { r.waitAnswered() }

func (r *trackStatusServed) failed(*SessionError) {}

// msDuration converts milliseconds from the wire to a Duration, saturating.
func msDuration(ms uint64) time.Duration {
	return time.Duration(min(ms, uint64(1<<62)/uint64(time.Millisecond))) * time.Millisecond
}
