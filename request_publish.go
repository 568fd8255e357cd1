package moqt

import (
	"fmt"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// PublishRequest is a peer's PUBLISH (§9.8), handed to the Handler: the
// peer offers a subscription to one of its tracks.
type PublishRequest struct {
	RequestCommon
	// Track is the offered track; TrackAlias its alias.
	Track      wire.FullTrackName
	TrackAlias uint64
	// Params are the publisher's initial subscription parameters. Its
	// AUTHORIZATION_TOKENs are resolved, as USE_VALUE (see
	// AuthorizationTokens). A PUBLISH for a track under the prefix of a
	// SUBSCRIBE_TRACKS this end has open is one of its results: the
	// subscription also has that request's object Range filters, which
	// PUBLISH cannot carry (§9.18.1); Subscription.Params holds them.
	Params wire.Params
	// Properties are the Track Properties.
	Properties wire.KVList
	sub        *Subscription
	// displaced is this end's own subscription to the track, still
	// Pending(Subscriber), that the PUBLISH replaces on a draft allowing
	// one per track: it ends before the PUBLISH_OK (18 §5.1).
	displaced *Subscription
}

// Accept answers with PUBLISH_OK (REQUEST_OK, §9.3) and returns the
// subscriber's end of the Established subscription. On drafts 20 and 21
// only EXPIRES may be set in params (§9.20.17); the subscriber changes the
// rest with Subscription.Update. On 18 and 19 PUBLISH_OK carries the
// subscriber's parameters, as SUBSCRIBE does: FORWARD, SUBSCRIBER_PRIORITY,
// LOCATION_FILTER, GROUP_ORDER (18), the delivery timeouts,
// NEW_GROUP_REQUEST and range filters (19); what params omits takes its
// default (FORWARD 1, no filter), not the PUBLISH's value. A parameter the
// session's draft lacks there fails with an error wrapping
// wire.ErrNotInDraft, before anything is sent.
func (r *PublishRequest) Accept(params wire.Params) (*Subscription, error) {
	sub := r.sub
	s := sub.sess
	if err := s.rules.checkOwnParams(&params, wire.InPublishOK); err != nil {
		return nil, err
	}
	if params.NewGroupRequest.Set && !sub.dynamicGroups() {
		return nil, ErrNoDynamicGroups // 18/19 §10.2.14
	}
	if err := s.checkFilterRanges(&params); err != nil {
		return nil, err
	}
	err := r.answer(func() error {
		switch sub.current() {
		case statePendingPublisher:
		case stateTerminated:
			// The publisher ended the PUBLISH before this answer
			// (§3.1). It still gets its one response (C002) before
			// this end's FIN (C008); the application learns that the
			// subscription is over.
			_ = sub.rs.write(&wire.RequestOK{Parameters: params})
			return fmt.Errorf("moqt: PUBLISH already ended: %w", sub.Err())
		default:
			return fmt.Errorf("moqt: PUBLISH in state %s", sub.current())
		}
		if r.displaced != nil {
			r.displaced.cancel(fmt.Errorf("%w: the peer's PUBLISH of the track replaces it", ErrCancelled))
		}
		if err := sub.sess.routes.bindAlias(sub); err != nil {
			sub.sess.fail(err)
			return err
		}
		if s.rules.publishOKParams {
			// The subscriber's parameters apply from the PUBLISH_OK on;
			// objects the publisher sent under its own still pass for a
			// while (updateFilterLocked).
			sub.mu.Lock()
			sub.params = publishOKParams(&sub.params, &params)
			sub.ownLocation = true
			sub.updateFilterLocked(publishOKChange(&params))
			sub.mu.Unlock()
		}
		if err := sub.rs.write(&wire.RequestOK{Parameters: params}); err != nil {
			return err
		}
		if params.Expires.Set && params.Expires.Value > 0 {
			// This end granted EXPIRES, so it ends the subscription when
			// the time has passed (§9.20.17).
			sub.expireAfter(msDuration(params.Expires.Value))
		}
		if err := sub.move(stateEstablished, nil); err != nil {
			return endedAsAccepted(sub.Err(), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sub, nil
}

// Reject answers with REQUEST_ERROR, UNINTERESTED being the usual code
// (§9.8).
func (r *PublishRequest) Reject(code wire.RequestErrorCode, reason string) error {
	return r.RequestCommon.Reject(code, reason)
}

// servePublish hands a PUBLISH to the Handler and reads the publisher's
// side of the stream.
func servePublish(s *Session, rs *requestStream, m *wire.Publish, toks []AuthToken) error {
	track := wire.FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}
	// C035 applies on receipt, whatever the application would answer.
	if err := s.routes.checkAlias(m.TrackAlias, track); err != nil {
		return err
	}
	if err := checkTrackProperties(m.TrackProperties); err != nil {
		return err
	}
	if t, ok := unknownMandatory(m.TrackProperties); ok {
		rs.reject(&RequestError{Code: wire.ReqUnsupportedExtension, // C006
			Reason: fmt.Sprintf("mandatory track property 0x%x", t)})
		s.routes.refuseAlias(m.TrackAlias) // C090: its objects are not processed
		return rs.drain()
	}
	sub := &Subscription{
		away:       goawayState{in: make(chan struct{})},
		subState:   newSubState(statePendingPublisher),
		sess:       s,
		rs:         rs,
		track:      track,
		byPublish:  true,
		alias:      m.TrackAlias,
		params:     m.Parameters,
		largest:    m.Parameters.LargestObject,
		properties: m.TrackProperties,
	}
	// A PUBLISH resulting from this end's SUBSCRIBE_TRACKS starts a
	// subscription with its Range filters, which PUBLISH cannot carry
	// and the publisher applies (§9.18.1, namespace_tracks.go).
	sub.params.RangeFilters = s.ownTracks.rangesFor(track.Namespace)
	sub.initData()
	sub.filter = filter.New(&sub.params, largestOf(sub.largest))
	if m.Parameters.Expires.Set {
		sub.expires = expiry(m.Parameters.Expires.Value)
	}
	req := &PublishRequest{
		RequestCommon: newIncoming(rs, toks, track.Namespace),
		Track:         track,
		TrackAlias:    m.TrackAlias,
		Params:        m.Parameters,
		Properties:    m.TrackProperties,
		sub:           sub,
	}
	if s.rules.onePerTrack {
		displaced, ok := s.tracks.claimSub(track, sub, true)
		if !ok {
			rs.reject(&RequestError{Code: wire.ReqDuplicateSubscription, Reason: "track already subscribed"}) // 18 §5.1
			sub.terminate(ErrDuplicateSubscription)
			s.routes.refuseAlias(m.TrackAlias)
			return rs.drain()
		}
		req.displaced = displaced
		req.unclaim = func() { s.tracks.releaseSub(track, sub, displaced) }
	}
	sub.answered = req.answeredCh
	req.rejected = func(e *RequestError) {
		sub.terminate(e)
		// What the publisher sent before the refusal is discarded at
		// once (§3.1.2).
		s.routes.refuseAlias(m.TrackAlias)
	}
	s.handOff(req)
	return rs.serve(sub)
}
