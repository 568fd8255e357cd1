package moqt

import (
	"context"
	"fmt"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// SubscribeRequest is a peer's SUBSCRIBE (§9.6), handed to the Handler.
type SubscribeRequest struct {
	incoming
	// Track is the requested track.
	Track wire.FullTrackName
	// Params are the SUBSCRIBE's parameters. Its AUTHORIZATION_TOKENs are
	// resolved, as USE_VALUE (see AuthorizationTokens).
	Params wire.Params
	served *ServedSubscription
}

// AcceptOptions shape a subscription LocalTrack.Accept accepts, beyond
// what the track itself reports in SUBSCRIBE_OK (§9.7): its Largest Object
// and Track Properties.
type AcceptOptions struct {
	// Expires, if positive, is sent as EXPIRES: the subscription ends
	// after it unless a REQUEST_UPDATE extends it (§9.20.17).
	Expires time.Duration
	// OnUpdate, if set, is called with each REQUEST_UPDATE's parameters
	// before they apply; an error refuses the update, which ends the
	// subscription with PUBLISH_DONE UPDATE_FAILED (§9.5.1). A
	// *RequestError chooses the REQUEST_ERROR code. The update's
	// AUTHORIZATION_TOKENs are resolved, as USE_VALUE (§8.9).
	OnUpdate func(ss *ServedSubscription, update *wire.Params) error
}

// accept answers with SUBSCRIBE_OK, with props as its Track Properties.
// join starts serving the subscription before the answer is written: it
// moves it to Established and returns the Largest Object the answer
// reports, which is then exactly what the subscription's filter resolved
// against (LocalTrack.join). Objects sent meanwhile may reach the
// subscriber first (§3.1.2); nothing else is written to the request stream
// before the SUBSCRIBE_OK.
func (r *SubscribeRequest) accept(opts AcceptOptions, props wire.KVList, join func(*ServedSubscription) (wire.Opt[wire.Location], error)) (*ServedSubscription, error) {
	ss := r.served
	err := r.answer(func() error {
		if ss.State() != StatePendingSubscriber {
			return fmt.Errorf("moqt: SUBSCRIBE already ended: %w", ss.Err())
		}
		// Read by the update worker only once Established.
		ss.onUpdate = opts.OnUpdate
		ss.grant = opts.Expires
		largest, err := join(ss)
		if err != nil {
			return err
		}
		params := ss.grantParams()
		params.LargestObject = largest
		ok := &wire.SubscribeOK{TrackAlias: ss.alias, Parameters: params, TrackProperties: props}
		if err := ss.rs.write(ok); err != nil {
			ss.abort(err) // it is served already
			return err
		}
		if err := ss.markOpened(); err != nil {
			return endedAsAccepted(ss.Err(), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ss, nil
}

// serveSubscribe hands a SUBSCRIBE to the Handler and reads the
// subscriber's side of the stream until the subscription ends.
func (s *Session) serveSubscribe(rs *requestStream, m *wire.Subscribe, toks []AuthToken) error {
	if err := CheckFilterRanges(&m.Parameters, s.cfg.MaxFilterRanges); err != nil {
		rs.reject(asRequestError(err)) // C026
		return rs.drain()
	}
	track := wire.FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}
	ss := newServedSubscription(rs, track, m.Parameters, StatePendingSubscriber)
	req := &SubscribeRequest{
		incoming: newIncoming(rs, toks, track.Namespace),
		Track:    track,
		Params:   m.Parameters,
		served:   ss,
	}
	req.rejected = func(e *RequestError) {
		ss.terminate(e)
		ss.finish()
	}
	// The request is the subscription: it ends with it, PUBLISH_DONE
	// included.
	stop := context.AfterFunc(ss.ctx, func() { req.cancel(context.Cause(ss.ctx)) })
	defer stop()
	s.handOff(req)
	return rs.serve(ss)
}

// PublishRequest is a peer's PUBLISH (§9.8), handed to the Handler: the
// peer offers a subscription to one of its tracks.
type PublishRequest struct {
	incoming
	// Track is the offered track; TrackAlias its alias.
	Track      wire.FullTrackName
	TrackAlias uint64
	// Params are the publisher's initial subscription parameters. Its
	// AUTHORIZATION_TOKENs are resolved, as USE_VALUE (see
	// AuthorizationTokens).
	Params wire.Params
	// Properties are the Track Properties.
	Properties wire.KVList
	sub        *Subscription
}

// Accept answers with PUBLISH_OK (REQUEST_OK, §9.3) and returns the
// subscriber's end of the Established subscription. Only EXPIRES may be
// set in params (§9.20.17).
func (r *PublishRequest) Accept(params wire.Params) (*Subscription, error) {
	if err := params.Check(wire.InPublishOK); err != nil {
		return nil, err
	}
	sub := r.sub
	err := r.answer(func() error {
		switch sub.State() {
		case StatePendingPublisher:
		case StateTerminated:
			// The publisher ended the PUBLISH before this answer
			// (§3.1). It still gets its one response (C002) before
			// this end's FIN (C008); the application learns that the
			// subscription is over.
			_ = sub.rs.write(&wire.RequestOK{Parameters: params})
			return fmt.Errorf("moqt: PUBLISH already ended: %w", sub.Err())
		default:
			return fmt.Errorf("moqt: PUBLISH in state %s", sub.State())
		}
		if err := sub.sess.bindAlias(sub); err != nil {
			sub.sess.fail(err)
			return err
		}
		if err := sub.rs.write(&wire.RequestOK{Parameters: params}); err != nil {
			return err
		}
		if params.Expires.Set && params.Expires.Value > 0 {
			// This end granted EXPIRES, so it ends the subscription when
			// the time has passed (§9.20.17).
			sub.expireAfter(msDuration(params.Expires.Value))
		}
		if err := sub.move(StateEstablished, nil); err != nil {
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
	return r.incoming.Reject(code, reason)
}

// servePublish hands a PUBLISH to the Handler and reads the publisher's
// side of the stream.
func (s *Session) servePublish(rs *requestStream, m *wire.Publish, toks []AuthToken) error {
	track := wire.FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}
	// C035 applies on receipt, whatever the application would answer.
	if err := s.checkAlias(m.TrackAlias, track); err != nil {
		return err
	}
	if err := checkTrackProperties(m.TrackProperties); err != nil {
		return err
	}
	if t, ok := unknownMandatory(m.TrackProperties); ok {
		rs.reject(&RequestError{Code: wire.ReqUnsupportedExtension, // C006
			Reason: fmt.Sprintf("mandatory track property 0x%x", t)})
		return rs.drain()
	}
	sub := &Subscription{
		subState:   newSubState(StatePendingPublisher),
		sess:       s,
		rs:         rs,
		track:      track,
		byPublish:  true,
		alias:      m.TrackAlias,
		params:     m.Parameters,
		largest:    m.Parameters.LargestObject,
		properties: m.TrackProperties,
	}
	sub.initData()
	sub.filter = NewFilter(&sub.params, largestOf(sub.largest))
	if m.Parameters.Expires.Set {
		sub.expires = expiry(m.Parameters.Expires.Value)
	}
	req := &PublishRequest{
		incoming:   newIncoming(rs, toks, track.Namespace),
		Track:      track,
		TrackAlias: m.TrackAlias,
		Params:     m.Parameters,
		Properties: m.TrackProperties,
		sub:        sub,
	}
	sub.answered = req.answeredCh
	req.rejected = func(e *RequestError) { sub.terminate(e) }
	s.handOff(req)
	return rs.serve(sub)
}

// endedAsAccepted explains a subscription that could not become
// Established after its OK went out: it ended meanwhile, cancelled by the
// peer or with the session, and cause says why.
func endedAsAccepted(cause, err error) error {
	if cause == nil {
		return err
	}
	return fmt.Errorf("moqt: subscription ended as it was accepted: %w", cause)
}
