package moqt

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// TrackStatus asks the peer for the status of track (§9.13). A
// REQUEST_ERROR is returned as *RequestError. A peer that sends GOAWAY on
// the request's stream and ends it unanswered migrates the request (§9.2):
// the error wraps ErrGoingAway.
func (s *Session) TrackStatus(ctx context.Context, track wire.FullTrackName, params wire.Params) (*TrackStatus, error) {
	if err := params.Check(wire.InTrackStatus); err != nil {
		return nil, err
	}
	rs, err := s.openRequest(ctx, params.AuthorizationTokens)
	if err != nil {
		return nil, err
	}
	defer s.untrack(rs)
	// TRACK_STATUS is the only message this end sends (§9.13).
	if err := rs.writeAndFin(&wire.TrackStatus{RequestID: rs.id, TrackNamespace: track.Namespace, TrackName: track.Name, Parameters: params}); err != nil {
		rs.cancel(wire.ResetInternalError)
		return nil, err
	}
	type result struct {
		st  *TrackStatus
		err error
	}
	done := make(chan result, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		st, err := readTrackStatus(rs)
		done <- result{st, err}
	}()
	select {
	case r := <-done:
		var se *SessionError
		if errors.As(r.err, &se) && !se.Remote {
			s.fail(se)
		}
		return r.st, r.err
	case <-ctx.Done():
		rs.cancel(wire.ResetCancelled)
		return nil, ctx.Err()
	}
}

// readTrackStatus reads the one answer and the FIN that must follow it.
// A GOAWAY may come first (§9.2): the peer then means to close the stream
// without an answer, asking for the request elsewhere.
func readTrackStatus(rs *requestStream) (*TrackStatus, error) {
	m, err := readPastGoaway(rs)
	if err != nil {
		if rs.goawayIn && !isSessionErr(err) {
			return nil, fmt.Errorf("moqt: TRACK_STATUS migrated by the peer's GOAWAY: %w", ErrGoingAway)
		}
		if errors.Is(err, io.EOF) {
			return nil, errors.New("moqt: TRACK_STATUS stream closed without an answer")
		}
		return nil, err
	}
	var st *TrackStatus
	var answer error
	switch m.(type) {
	case *wire.RequestOK, *wire.RequestError:
		rs.answered()
	}
	switch m := m.(type) {
	case *wire.RequestOK:
		if err := m.Check(wire.InTrackStatusOK); err != nil {
			return nil, err
		}
		props, err := ownKVList(m.TrackProperties)
		if err != nil {
			return nil, err
		}
		if err := checkTrackProperties(props); err != nil {
			return nil, err
		}
		st = &TrackStatus{Largest: m.Parameters.LargestObject, Properties: props}
	case *wire.RequestError:
		own, err := detach(rs.sess.version, m)
		if err != nil {
			return nil, err
		}
		answer = requestErrorFrom(own)
	default:
		return nil, protocolViolation("unexpected %s answering TRACK_STATUS", m.Type())
	}
	if _, err := readPastGoaway(rs); !errors.Is(err, io.EOF) {
		if err == nil {
			err = protocolViolation("message after the TRACK_STATUS answer")
		}
		return nil, err
	}
	return st, answer
}

// readPastGoaway reads the next message other than GOAWAY, which may come
// on any request stream (§9.2); readMessage refuses a second one.
func readPastGoaway(rs *requestStream) (wire.Message, error) {
	for {
		m, err := rs.readMessage()
		if _, ok := m.(*wire.Goaway); !ok || err != nil {
			return m, err
		}
	}
}

// isSessionErr reports whether err ends the session.
func isSessionErr(err error) bool {
	_, ok := asSessionError(err)
	return ok
}

// TrackStatusRequest is a peer's TRACK_STATUS (§9.13), handed to the
// Handler.
type TrackStatusRequest struct {
	incoming
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
func (s *Session) serveTrackStatus(rs *requestStream, m *wire.TrackStatus, toks []AuthToken) error {
	m, err := detach(s.version, m)
	if err != nil {
		return err
	}
	req := &TrackStatusRequest{
		incoming: newIncoming(rs, toks),
		Track:    wire.FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName},
		Params:   m.Parameters,
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.serve(req)
	}()
	extra, err := readPastGoaway(rs)
	switch {
	case err == nil:
		return protocolViolation("%s after TRACK_STATUS", extra.Type())
	case errors.Is(err, io.EOF):
		req.waitAnswered()
		return nil
	default:
		var se *SessionError
		if errors.As(err, &se) {
			if se.Remote {
				return nil
			}
			return se
		}
		// The requester cancelled; the answer, if any, goes nowhere.
		req.waitAnswered()
		return nil
	}
}

// msDuration converts milliseconds from the wire to a Duration, saturating.
func msDuration(ms uint64) time.Duration {
	return time.Duration(min(ms, uint64(1<<62)/uint64(time.Millisecond))) * time.Millisecond
}
