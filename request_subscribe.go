package moqt

import (
	"context"
	"fmt"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// SubscribeRequest is a peer's SUBSCRIBE (§9.6), handed to the Handler.
type SubscribeRequest struct {
	RequestCommon
	// Track is the requested track.
	Track wire.FullTrackName
	// Params are the SUBSCRIBE's parameters. Its AUTHORIZATION_TOKENs are
	// resolved, as USE_VALUE (see AuthorizationTokens).
	Params wire.Params
	served *ServedSubscription
}

// AcceptOptions shape a subscription LocalTrack.Accept accepts, or
// LocalTrack.Publish offers, beyond what the track itself reports in
// SUBSCRIBE_OK (§9.7) or PUBLISH: its Largest Object and Track Properties.
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
		if ss.current() != statePendingSubscriber {
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
		ss.join.set(largest) // the Joining Location (18 §5.1)
		ok := &wire.SubscribeOK{TrackAlias: ss.alias, Parameters: params, TrackProperties: props}
		if err := ss.rs.write(ok); err != nil {
			ss.abort(err) // it is served already
			return err
		}
		if err := ss.markOpened(); err != nil {
			return endedAsAccepted(ss.Err(), err)
		}
		// The fill ends at the Largest Object just reported (§3.4).
		ss.startFill(ss.rs.id, r.Params.FillParameters, largest)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ss, nil
}

// serveSubscribe hands a SUBSCRIBE to the Handler and reads the
// subscriber's side of the stream until the subscription ends.
func serveSubscribe(s *Session, rs *requestStream, m *wire.Subscribe, toks []AuthToken) error {
	if err := checkRanges(&m.Parameters, s.cfg.MaxFilterRanges); err != nil {
		s.joins.forget(rs.id)
		rs.reject(asRequestError(err)) // C026
		return rs.drain()
	}
	track := wire.FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}
	ss := newServedSubscription(rs, track, m.Parameters, statePendingSubscriber)
	if s.rules.onePerTrack && !s.tracks.claimServed(track, &ss.subState) {
		// A second subscription to the track with this end publishing,
		// or one while this end's PUBLISH of it is pending (18 §5.1).
		s.joins.forget(rs.id)
		rs.reject(&RequestError{Code: wire.ReqDuplicateSubscription, Reason: "track already subscribed"})
		ss.terminate(ErrDuplicateSubscription)
		ss.finish()
		return rs.drain()
	}
	ss.sess.joins.admit(ss)
	req := &SubscribeRequest{
		RequestCommon: newIncoming(rs, toks, track.Namespace),
		Track:         track,
		Params:        m.Parameters,
		served:        ss,
	}
	req.rejected = func(e *RequestError) {
		ss.terminate(e)
		ss.finish()
	}
	if s.rules.onePerTrack {
		req.unclaim = func() { s.tracks.releaseServed(track, &ss.subState) }
	}
	// The request is the subscription: it ends with it, PUBLISH_DONE
	// included.
	stop := context.AfterFunc(ss.ctx, func() { req.cancel(context.Cause(ss.ctx)) })
	defer stop()
	s.handOff(req)
	return rs.serve(ss)
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
