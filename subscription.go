package moqt

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// Subscription is the subscriber's end of a subscription (§3.1), initiated
// by Session.Subscribe or accepted from a peer's PUBLISH.
type Subscription struct {
	subState
	sess  *Session
	rs    *requestStream
	track wire.FullTrackName
	// byPublish reports a PUBLISH-initiated subscription.
	byPublish bool
	// answered, for a PUBLISH-initiated subscription, is closed once this
	// end has sent its one answer (PUBLISH_OK or REQUEST_ERROR), which
	// must precede anything else it sends on the stream (§9).
	answered <-chan struct{}
	// peerEnded reports that the publisher's REQUEST_ERROR or
	// PUBLISH_DONE ended the subscription, after which any further
	// message from it is a protocol violation. Owned by run.
	peerEnded bool

	// away is the publisher's GOAWAY on the request stream (GoingAway).
	away goawayState

	mu         sync.Mutex // guards the fields below
	alias      uint64
	params     wire.Params // the subscription's parameters as last agreed
	largest    wire.Opt[wire.Location]
	expires    time.Time
	properties wire.KVList
	updates    updateQueue // this end's REQUEST_UPDATEs, under mu
	// ownLocation is set once this end sets LOCATION_FILTER with
	// REQUEST_UPDATE. Until then the Location filter of a
	// PUBLISH-initiated subscription is the publisher's, which it may
	// widen with PUBLISH_STATE_NOTIFY (§9.10).
	ownLocation bool
	finished    *DoneError // the PUBLISH_DONE, once received
	// finAfterRead is set when the publisher finished after PUBLISH_DONE:
	// this end finishes its side once it has read every stream (finIfRead).
	finAfterRead bool
	finTimer     *time.Timer // bounds that wait
	fill         subFill     // fill fetch streams (subscription_fill.go)
	join         *joinReq    // the Joining FETCH of the fill, on 18/19 (subscription_join.go)
	subData
}

// Subscribe subscribes to track (§9.6) and waits for SUBSCRIBE_OK. params
// carries the subscription's parameters: FORWARD (default 1),
// SUBSCRIBER_PRIORITY (default 128), LOCATION_FILTER, GROUP_ORDER and the
// rest of §9.20. A REQUEST_ERROR is returned as *RequestError. If ctx ends
// first the subscription is cancelled. AUTHORIZATION_TOKENs that would
// break the peer's token cache rules fail with ErrAuthToken before anything
// is sent (§8.9); so do those of LocalTrack.Publish, TrackStatus and
// Update. Range filters with more Ranges than the peer's MAX_FILTER_RANGES
// allows fail with ErrFilterRanges, before anything is sent (§9.1.6).
func (s *Session) Subscribe(ctx context.Context, track wire.FullTrackName, params wire.Params) (*Subscription, error) {
	if s.rules.onePerTrack && s.tracks.subscribed(track) {
		return nil, duplicateErr(track, "subscribes to")
	}
	sent := params
	var plan *joinPlan
	if params.FillParameters != nil && s.profile().JoiningFetch {
		// 18/19: the fill is a Joining FETCH (subscription_join.go).
		if err := params.Check(wire.InSubscribe); err != nil {
			return nil, err
		}
		p, err := planJoin(s.version, &params)
		if err != nil {
			return nil, err
		}
		plan, sent.FillParameters = p, nil
	}
	rs, err := s.openChecked(ctx, &sent, wire.InSubscribe)
	if err != nil {
		return nil, err
	}
	params.AuthorizationTokens = sent.AuthorizationTokens
	sub := &Subscription{
		subState: newSubState(statePendingSubscriber),
		sess:     s,
		rs:       rs,
		track:    track,
		params:   params,
		away:     goawayState{in: make(chan struct{})},
	}
	if s.rules.onePerTrack {
		if _, ok := s.tracks.claimSub(track, sub, false); !ok {
			// Another Subscribe to the track claimed it meanwhile;
			// nothing was written on the stream.
			rs.cancel(wire.ResetCancelled)
			s.requests.remove(rs)
			return nil, duplicateErr(track, "subscribes to")
		}
	}
	sub.initData()
	var joinRS *requestStream
	switch {
	case plan != nil:
		if joinRS, err = plan.open(ctx, sub); err != nil {
			rs.cancel(wire.ResetCancelled)
			s.requests.remove(rs)
			sub.terminate(err) // gives the track's claim back (draft_tracks.go)
			return nil, err
		}
	case sent.FillParameters != nil:
		// Registered before the SUBSCRIBE leaves, so the fill stream,
		// which may precede SUBSCRIBE_OK, finds its subscription (§3.4).
		sub.mu.Lock()
		sub.askFillLocked(rs.id, params.FillParameters)
		sub.mu.Unlock()
	}
	answered := s.routes.expectAlias()
	defer answered()
	if err := rs.write(&wire.Subscribe{RequestID: rs.id, TrackNamespace: track.Namespace, TrackName: track.Name, Parameters: sent}); err != nil {
		rs.cancel(wire.ResetInternalError)
		s.requests.remove(rs)
		sub.forgetFills()
		if joinRS != nil {
			joinRS.cancel(wire.ResetCancelled)
			s.requests.remove(joinRS)
		}
		sub.terminate(err) // gives the track's claim back (draft_tracks.go)
		return nil, err
	}
	if joinRS != nil {
		// At once, before SUBSCRIBE_OK: the publisher buffers it until
		// the subscription is Established (18 §10.12.2).
		plan.send(sub, joinRS)
	}
	rs.goServe(sub)
	select {
	case <-sub.established:
		return sub, nil
	case <-sub.done:
		return nil, sub.Err()
	case <-ctx.Done():
		sub.cancel(ErrCancelled)
		return nil, ctx.Err()
	}
}

// Track is the subscribed track.
func (sub *Subscription) Track() wire.FullTrackName { return sub.track }

// requestID is the Request ID of the SUBSCRIBE or PUBLISH.
func (sub *Subscription) requestID() uint64 { return sub.rs.id }

// TrackAlias is the alias the publisher chose (§3.1.2).
func (sub *Subscription) TrackAlias() uint64 {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.alias
}

// Params returns the subscription's parameters as last agreed: those of the
// request, the publisher's answer and PUBLISH_STATE_NOTIFY, and accepted
// updates, each overriding the last.
func (sub *Subscription) Params() wire.Params {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.params
}

// forwardState reports the Forward State (§3.1): whether the publisher sends
// objects.
func (sub *Subscription) forwardState() bool {
	p := sub.Params()
	return forwardOf(&p)
}

// Largest returns the publisher's Largest Object, if it reported one.
func (sub *Subscription) Largest() (wire.Location, bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.largest.Value, sub.largest.Set
}

// Expires returns when the publisher said it will end the subscription
// (EXPIRES, §9.20.17); zero if it did not. Update extends it.
func (sub *Subscription) Expires() time.Time {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.expires
}

// Properties returns the Track Properties of SUBSCRIBE_OK or PUBLISH. A
// property's value may sit inside IMMUTABLE_PROPERTIES: find it with
// wire.KVList.Lookup, which searches both (§10.7).
func (sub *Subscription) Properties() wire.KVList {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.properties
}

// Update sends REQUEST_UPDATE (§9.5) and waits for its answer. Parameters
// not in params keep their values. A refused update returns *RequestError;
// the publisher then ends the subscription with PUBLISH_DONE UPDATE_FAILED
// (§9.5.1). NEW_GROUP_REQUEST is refused with ErrNoDynamicGroups, before
// anything is sent, unless the track has DYNAMIC_GROUPS = 1 (§9.20.20).
// An update that would leave the subscription with more Ranges in its
// range filters than the peer's MAX_FILTER_RANGES allows fails with
// ErrFilterRanges, before anything is sent (§9.1.6). If ctx ends first,
// Update returns its error, and the update, once sent, still applies to
// Params when the publisher accepts it.
func (sub *Subscription) Update(ctx context.Context, params wire.Params) error {
	if err := sub.sess.rules.checkOwnParams(&params, wire.InUpdateSubscription); err != nil {
		return err
	}
	if params.NewGroupRequest.Set && !sub.dynamicGroups() {
		return ErrNoDynamicGroups // C018
	}
	if params.FillParameters != nil && sub.sess.profile().JoiningFetch {
		// A Joining FETCH ends at the Joining Location of SUBSCRIBE_OK
		// or of a Forward 0-to-1 update, not at the Largest Object when
		// this update is processed (18 §5.1, subscription_join.go).
		return fmt.Errorf("moqt: update: %w", &wire.NotInDraftError{What: "a fill in REQUEST_UPDATE", Version: sub.sess.version})
	}
	// The limit is on the Ranges the subscription has once the update
	// applies (§9.1.6), as the publisher counts them.
	merged := sub.Params()
	mergeParams(&merged, &params)
	if err := sub.sess.checkFilterRanges(&merged); err != nil {
		return err
	}
	if sub.current() != stateEstablished {
		return fmt.Errorf("moqt: update of a %s subscription", sub.current())
	}
	// The turn, not sub.mu, is held across the write, so a peer that
	// does not read its stream stalls no object; it is given back once
	// the update is written, and the next may follow before the answer.
	if err := sub.updates.enter(ctx); err != nil {
		return err
	}
	u, err := sub.updates.send(ctx, &params, func(u *sentUpdate) {
		u.filter = sub.updatedFilterLocked(&params)
		if params.LocationFilter.Set {
			sub.ownLocation = true
		}
		if params.FillParameters != nil {
			sub.askFillLocked(u.id, params.FillParameters) // before it is sent
		}
	})
	sub.updates.leave()
	if err != nil {
		return err
	}
	_, err = sub.updates.await(ctx, u)
	return err
}

// Close cancels the subscription: STOP_SENDING and RESET_STREAM on its
// request stream (§3.1.1, §6.4.2.3).
func (sub *Subscription) Close() error {
	sub.cancel(ErrCancelled)
	// The application is done with the subscription: its data streams,
	// taken or not, are stopped too (§9.9).
	sub.stopReaders()
	return nil
}

// cancel terminates the subscription from this end, if it is still live,
// and abandons whatever is left of the stream: a reset of this end's
// direction unless it was finished, and STOP_SENDING (§6.4.2.3).
func (sub *Subscription) cancel(err error) { sub.cancelWith(err, wire.ResetCancelled) }

// cancelWith is cancel with code on the request stream.
func (sub *Subscription) cancelWith(err error, code wire.ResetCode) {
	// ReadObject stops first: the publisher's resets of the data streams,
	// which this cancel causes, are not the stream errors it reports.
	sub.arrival.abort()
	sub.terminate(err)
	sub.rs.cancel(code)
	sub.mu.Lock()
	j := sub.join
	sub.mu.Unlock()
	if j != nil {
		j.cancel() // the fill goes with the subscription
	}
	sub.release()
}

// The publisher's side of the request stream, as the shared read loop
// drives it (requestSide).

// failed ends the subscription with the session.
func (sub *Subscription) failed(se *SessionError) {
	sub.terminate(se)
	sub.release()
}

// peerFinished applies the publisher's FIN.
func (sub *Subscription) peerFinished() {
	if sub.current() == stateTerminated {
		// The publisher finished after REQUEST_ERROR or PUBLISH_DONE: the
		// request is complete, so this end finishes too (§6.4.2.2), once
		// its own answer to a PUBLISH is out (C008).
		if sub.answered != nil {
			select {
			case <-sub.answered:
			case <-sub.sess.ctx.Done():
			}
		}
		sub.finWhenRead()
	} else {
		// A FIN before the required messages fails the request (§6.4.2.2).
		sub.cancel(fmt.Errorf("moqt: publisher closed the stream without PUBLISH_DONE: %w", ErrCancelled))
	}
	sub.release()
}

// reset applies the publisher's reset, which cancels (§3.1.1).
func (sub *Subscription) reset(cause error) {
	sub.cancel(cause)
	sub.release()
}

// handle applies one message from the publisher. rej, set only on a
// PUBLISH-initiated subscription, refuses the publisher's REQUEST_UPDATE
// (§9.5).
func (sub *Subscription) handle(m wire.Message, rej *wire.RejectError) error {
	if rej != nil {
		return sub.publisherUpdate(m.(*wire.RequestUpdate), rej)
	}
	state := sub.current()
	if state == stateTerminated {
		if sub.peerEnded {
			return protocolViolation("%s after the subscription ended", m.Type())
		}
		// This end refused or cancelled the request; the peer's message
		// crossed that answer and means nothing now.
		return sub.rs.crossed(m)
	}
	switch m := m.(type) {
	case *wire.SubscribeOK:
		if sub.byPublish || state != statePendingSubscriber {
			return protocolViolation("unexpected SUBSCRIBE_OK in state %s", state) // C001
		}
		sub.rs.answered()
		return sub.accept(m)
	case *wire.RequestError:
		m, err := detach(sub.sess.version, m)
		if err != nil {
			return err
		}
		if state == statePendingSubscriber {
			sub.rs.answered()
			sub.peerEnded = true
			sub.terminate(requestErrorFrom(m))
			return nil // the publisher's FIN follows
		}
		return sub.answerUpdate(requestErrorFrom(m))
	case *wire.RequestOK:
		if err := sub.sess.rules.checkRequestOK(m, wire.InUpdateOK); err != nil {
			return err
		}
		sub.mu.Lock()
		if m.Parameters.LargestObject.Set {
			sub.largest = m.Parameters.LargestObject
		}
		if m.Parameters.Expires.Set {
			sub.expires = expiry(m.Parameters.Expires.Value)
		}
		sub.mu.Unlock()
		return sub.answerUpdate(nil)
	case *wire.PublishStateNotify:
		if state != stateEstablished && state != statePendingPublisher {
			return protocolViolation("PUBLISH_STATE_NOTIFY in state %s", state)
		}
		sub.mu.Lock()
		p := m.Parameters
		if p.Forward.Set {
			sub.params.Forward = p.Forward
		}
		if p.LocationFilter.Set {
			sub.params.LocationFilter = p.LocationFilter
		}
		if p.LargestObject.Set {
			sub.largest = p.LargestObject
		}
		sub.updateFilterLocked(&wire.Params{Forward: p.Forward, LocationFilter: p.LocationFilter})
		sub.mu.Unlock()
		return nil
	case *wire.PublishDone:
		if state != stateEstablished && state != statePendingPublisher {
			return protocolViolation("PUBLISH_DONE in state %s", state)
		}
		d := &DoneError{Code: m.StatusCode, StreamCount: m.StreamCount, Reason: m.ErrorReason}
		if m.StreamCount == sub.sess.rules.prof.UnknownStreamCount {
			d.StreamCount = unknownStreamCount // 2^62−1 on 18/19
		}
		// Terminated before finished is set: a counted stream arriving
		// meanwhile ends the data plane once finished is set
		// (noteStream), and a read that sees that end finds the
		// subscription's end already there.
		sub.peerEnded = true
		sub.terminate(d)
		sub.mu.Lock()
		sub.finished = d
		sub.mu.Unlock()
		sub.release()
		return nil // the publisher's FIN follows
	case *wire.Goaway:
		sub.away.receive(m.NewSessionURI) // the stream took one only (§9.2)
		return nil
	case *wire.RequestUpdate:
		if !sub.byPublish {
			return protocolViolation("REQUEST_UPDATE from the publisher of a SUBSCRIBE") // §9.5
		}
		return sub.publisherUpdate(m, nil)
	}
	return protocolViolation("unexpected %s on a subscription stream", m.Type())
}

// accept applies SUBSCRIBE_OK.
func (sub *Subscription) accept(m *wire.SubscribeOK) error {
	if err := sub.sess.rules.checkPeerParams(&m.Parameters, wire.InSubscribeOK); err != nil {
		return err
	}
	props, err := ownKVList(m.TrackProperties)
	if err != nil {
		return err
	}
	if err := checkTrackProperties(props); err != nil {
		return err
	}
	if t, ok := unknownMandatory(props); ok {
		// C007: a subscription with a Mandatory Track Property this
		// endpoint does not understand is cancelled (§3.6).
		sub.cancel(&RequestError{Code: wire.ReqUnsupportedExtension, Reason: fmt.Sprintf("mandatory track property 0x%x", t)})
		// C090: its objects, sent before or after, are not processed.
		sub.sess.routes.refuseAlias(m.TrackAlias)
		return io.EOF
	}
	sub.mu.Lock()
	sub.alias = m.TrackAlias
	sub.largest = m.Parameters.LargestObject
	sub.filter = filter.New(&sub.params, largestOf(sub.largest))
	if m.Parameters.Expires.Set {
		sub.expires = expiry(m.Parameters.Expires.Value)
	}
	sub.properties = props
	sub.mu.Unlock()
	sub.startFill()
	if err := sub.sess.routes.bindAlias(sub); err != nil {
		return err
	}
	return sub.move(stateEstablished, nil)
}

// answerUpdate resolves the oldest outstanding REQUEST_UPDATE.
func (sub *Subscription) answerUpdate(err error) error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	u := sub.updates.popLocked()
	if u == nil {
		return protocolViolation("REQUEST_OK or REQUEST_ERROR with no REQUEST_UPDATE outstanding")
	}
	if err == nil {
		// Applied with the answer, under the same lock that drops the
		// update's provisional filter, so no object falls between them,
		// and whether or not Update still waits for it: the publisher
		// applies it either way.
		sub.updateFilterLocked(u.params)
		mergeParams(&sub.params, u.params)
	}
	u.settle(wire.Params{}, err)
	return nil
}

// publisherUpdate answers a REQUEST_UPDATE the publisher sent on its own
// PUBLISH (§9.5): the new values are recorded and acknowledged, or, when
// rej is set, refused. The answer to the PUBLISH itself goes first on this
// direction (§9), so the update waits for it; a refused PUBLISH leaves
// nothing to update and the update goes unanswered, counted against
// MAX_REQUEST_UPDATES.
func (sub *Subscription) publisherUpdate(m *wire.RequestUpdate, rej *wire.RejectError) error {
	if err := sub.sess.ids.checkPeer(m.RequestID); err != nil {
		return err
	}
	if err := sub.sess.rules.checkPeerParams(&m.Parameters, wire.InUpdateSubscription); err != nil {
		return err
	}
	own, err := detach(sub.sess.version, m)
	if err != nil {
		return err
	}
	sub.sess.hook(func(h *sessionHooks) func() { return h.updateReceived })
	select {
	case <-sub.answered:
	case <-sub.sess.ctx.Done():
		return nil
	}
	if sub.current() != stateEstablished {
		// The PUBLISH was refused (or the subscription ended) as the
		// update came: it goes unanswered, like one read after the
		// refusal (crossed).
		return sub.rs.unansweredUpdate()
	}
	if rej != nil {
		return sub.rs.write((&RequestError{Code: rej.Code, Reason: rej.Reason}).message())
	}
	sub.mu.Lock()
	mergeParams(&sub.params, &own.Parameters)
	sub.updateFilterLocked(&own.Parameters)
	sub.mu.Unlock()
	return sub.rs.write(&wire.RequestOK{})
}

// expiry converts an EXPIRES value (ms from now; 0 means none) to a time.
func expiry(ms uint64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.Now().Add(msDuration(ms))
}

// GoingAway is closed when the publisher sends GOAWAY on the
// subscription's request stream (§9.2): it asks that the subscription be
// made again at GoawayURI, or on this session when that is empty, and this
// one then cancelled (Close). Objects keep coming meanwhile; the publisher
// may reset the stream with GOING_AWAY once the GOAWAY's Timeout is over.
func (sub *Subscription) GoingAway() <-chan struct{} { return sub.away.in }

// GoawayURI is the New Session URI of the publisher's GOAWAY on the
// subscription's request stream; "" for none, or for this session.
func (sub *Subscription) GoawayURI() string {
	if sub.away.received() {
		return sub.away.uri
	}
	return ""
}

// Done is closed when the subscription has ended: PUBLISH_DONE, a
// REQUEST_ERROR, a cancellation, or the session's end.
func (sub *Subscription) Done() <-chan struct{} { return sub.ended() }

// Err returns why the subscription ended, or nil while it is live. After
// PUBLISH_DONE that is its *DoneError, replaced by a copy with Missing
// set if streams it counted were still missing when the subscription
// stopped waiting for them.
func (sub *Subscription) Err() error {
	sub.mu.Lock()
	short := sub.doneShort
	sub.mu.Unlock()
	if short != nil {
		return short
	}
	return sub.termErr()
}

// dynamicGroups reports whether the track's DYNAMIC_GROUPS is 1 (§10.6),
// looked for inside IMMUTABLE_PROPERTIES too (§10.7).
func (sub *Subscription) dynamicGroups() bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	kv, ok := sub.properties.Lookup(wire.PropDynamicGroups)
	return ok && kv.Value == 1
}

// publisherPriority is the track's DEFAULT_PUBLISHER_PRIORITY (§10.4),
// looked for inside IMMUTABLE_PROPERTIES too (§10.7), which subgroups and
// datagrams without a priority inherit.
func (sub *Subscription) publisherPriority() uint8 {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if kv, ok := sub.properties.Lookup(wire.PropDefaultPublisherPriority); ok && kv.Value <= 255 {
		return uint8(kv.Value)
	}
	return defaultPublisherPriority
}
