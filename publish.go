package moqt

import (
	"context"
	"fmt"

	"github.com/moqt-go/moqt/wire"
)

// openPublish sends PUBLISH on s and starts reading the subscriber's answer.
// The subscription is Pending(Publisher) when it returns. join, if set,
// starts serving the subscription before the PUBLISH is written and
// returns the LARGEST_OBJECT it reports (LocalTrack.join).
func openPublish(ctx context.Context, s *Session, track wire.FullTrackName, params wire.Params, props wire.KVList,
	join func(*ServedSubscription) (wire.Opt[wire.Location], error)) (*ServedSubscription, error) {
	if err := s.rules.checkOwnParams(&params, wire.InPublish); err != nil {
		return nil, err
	}
	if err := track.Namespace.Validate(len(track.Name)); err != nil {
		return nil, err
	}
	if isSessionNamespace(track.Namespace) {
		return nil, fmt.Errorf("moqt: applications must not publish in the .session namespace") // §6.5
	}
	if s.rules.onePerTrack && s.tracks.serving(track) {
		return nil, duplicateErr(track, "publishes")
	}
	rs, err := s.openRequest(ctx, params.AuthorizationTokens)
	if err != nil {
		return nil, err
	}
	ss := newServedSubscription(rs, track, params, statePendingPublisher)
	if s.rules.onePerTrack && !s.tracks.claimServed(track, &ss.subState) {
		// Claimed meanwhile; nothing was written on the stream.
		ss.abort(duplicateErr(track, "publishes"))
		s.requests.remove(rs)
		return nil, duplicateErr(track, "publishes")
	}
	if params.Expires.Set {
		ss.grant = msDuration(params.Expires.Value)
	}
	if join != nil {
		largest, err := join(ss)
		if err != nil {
			ss.abort(err)
			s.requests.remove(rs)
			return nil, err
		}
		params.LargestObject = largest
	}
	if params.LargestObject.Set {
		ss.setLargest(params.LargestObject.Value)
	}
	ss.join.set(params.LargestObject) // the Joining Location (18 §5.1)
	ss.sess.joins.admit(ss)
	msg := &wire.Publish{RequestID: rs.id, TrackNamespace: track.Namespace, TrackName: track.Name,
		TrackAlias: ss.alias, Parameters: params, TrackProperties: props}
	if err := rs.write(msg); err != nil {
		ss.abort(err)
		s.requests.remove(rs)
		return nil, err
	}
	if err := ss.markOpened(); err != nil {
		// The subscription ended before its PUBLISH went out, and its
		// PUBLISH_DONE could not follow; awaitPublishOK reports the end.
		s.log.Debug("moqt: publish", "event", "done_not_sent", "request_id", rs.id, "err", err)
	}
	rs.goServe(ss)
	return ss, nil
}
