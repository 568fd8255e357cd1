package moqt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// ServedSubscription is the publisher's end of one subscription (§3.1):
// accepted from a peer's SUBSCRIBE, or initiated with Session.Publish. It
// follows the subscriber's REQUEST_UPDATEs, reports state changes with
// PUBLISH_STATE_NOTIFY, and ends with PUBLISH_DONE.
type ServedSubscription struct {
	subState
	sess      *Session
	rs        *requestStream
	track     wire.FullTrackName
	alias     uint64
	byPublish bool
	ctx       context.Context
	cancelCtx context.CancelFunc

	// onUpdate, if set, may refuse an update; it sees the new parameters
	// before they apply.
	onUpdate func(*ServedSubscription, *wire.Params) error
	// grant is the EXPIRES this end grants (§9.20.17); 0 means none.
	grant time.Duration

	updates    chan pendingUpdate // REQUEST_UPDATEs waiting for the worker
	finishOnce sync.Once

	// backlog counts the bytes waiting in the backlogs of the
	// subscription's data streams (backlog.go); behind is set once it
	// passed Config.MaxSubscriberBacklog.
	backlog atomic.Int64
	behind  atomic.Bool
	wp      servedWritePath // the rest of its write-path state (backlog.go)

	// openMu orders opening data streams (read-locked) against their
	// final reset (locked), after which closing refuses new ones.
	openMu       sync.RWMutex
	closing      bool
	pendingOpens atomic.Int32 // data streams waiting for stream credit

	mu          sync.Mutex // guards the fields below
	params      wire.Params
	largest     wire.Opt[wire.Location]
	outstanding uint64                            // REQUEST_UPDATEs received and not yet answered
	expiry      *time.Timer                       // fires the EXPIRED PUBLISH_DONE
	streams     uint64                            // data streams opened for this subscription
	filter      *Filter                           // nil until a LocalTrack serves it
	dataStreams map[transport.SendStream]struct{} // data streams still open
	early       int                               // objects sent before PUBLISH_OK
	// subscriberSet lists the parameters the subscriber controls, which
	// PUBLISH_STATE_NOTIFY must not change (C013).
	subscriberSet controlled
}

// controlled marks the subscription parameters under the subscriber's
// control (§9.10). For a SUBSCRIBE that is all of them from the start: the
// subscriber chose them, defaults included. For a PUBLISH the publisher
// set the initial values and may change them until the subscriber sets one
// with REQUEST_UPDATE.
type controlled struct {
	forward, locationFilter bool
}

type pendingUpdate struct {
	msg *wire.RequestUpdate
	rej *wire.RejectError
}

func newServedSubscription(rs *requestStream, track wire.FullTrackName, params wire.Params, initial SubscriptionState) *ServedSubscription {
	s := rs.sess
	ctx, cancel := context.WithCancel(s.ctx)
	capacity := 16
	if s.cfg.MaxRequestUpdates > 0 {
		capacity = int(min(s.cfg.MaxRequestUpdates, 1024))
	}
	return &ServedSubscription{
		subState:  newSubState(initial),
		sess:      s,
		rs:        rs,
		track:     track,
		alias:     s.acquireAlias(track),
		byPublish: initial == StatePendingPublisher,
		ctx:       ctx,
		cancelCtx: cancel,
		params:    params,
		updates:   make(chan pendingUpdate, capacity),
		subscriberSet: controlled{
			forward:        initial == StatePendingSubscriber,
			locationFilter: initial == StatePendingSubscriber,
		},
	}
}

// Track is the track being served.
func (ss *ServedSubscription) Track() wire.FullTrackName { return ss.track }

// RequestID is the Request ID of the SUBSCRIBE or PUBLISH.
func (ss *ServedSubscription) RequestID() uint64 { return ss.rs.id }

// TrackAlias is the alias objects of this subscription carry (§3.1.2).
func (ss *ServedSubscription) TrackAlias() uint64 { return ss.alias }

// Context is cancelled when the subscription terminates.
func (ss *ServedSubscription) Context() context.Context { return ss.ctx }

// Params returns the subscriber's parameters as they stand after every
// accepted REQUEST_UPDATE (§9.5).
func (ss *ServedSubscription) Params() wire.Params {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.params
}

// Forward reports the Forward State (§3.1): objects are sent only when it
// is true.
func (ss *ServedSubscription) Forward() bool {
	p := ss.Params()
	return forwardOf(&p)
}

// SetLargest records the track's Largest Object, which SUBSCRIBE_OK,
// REQUEST_OK and PUBLISH_STATE_NOTIFY then report (§9.20.18).
func (ss *ServedSubscription) SetLargest(l wire.Location) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !ss.largest.Set || ss.largest.Value.Less(l) {
		ss.largest = wire.Some(l)
	}
}

// Notify sends PUBLISH_STATE_NOTIFY (§9.10) with the parameters that
// changed at the publisher: FORWARD or LOCATION_FILTER. LARGEST_OBJECT is
// added when known (C014).
//
// A publisher must not change a subscriber-controlled value the subscriber
// did not ask for (C013), and what the subscriber asks for arrives as a
// REQUEST_UPDATE, whose REQUEST_OK already confirms it. So Notify refuses
// to change FORWARD or LOCATION_FILTER on a SUBSCRIBE-initiated
// subscription, and on a PUBLISH-initiated one once the subscriber has set
// that parameter with REQUEST_UPDATE. Restating the current value is no
// change and is allowed.
func (ss *ServedSubscription) Notify(params wire.Params) error {
	if err := params.Check(wire.InPublishStateNotify); err != nil {
		return err
	}
	if st := ss.State(); st != StateEstablished {
		return fmt.Errorf("moqt: PUBLISH_STATE_NOTIFY on a %s subscription", st)
	}
	ss.mu.Lock()
	if params.Forward.Set && ss.subscriberSet.forward && params.Forward.Value != forwardOf(&ss.params) {
		ss.mu.Unlock()
		return errors.New("moqt: FORWARD is the subscriber's to change (C013)")
	}
	if params.LocationFilter.Set && ss.subscriberSet.locationFilter && !sameFilter(ss.params.LocationFilter, params.LocationFilter.Value) {
		ss.mu.Unlock()
		return errors.New("moqt: LOCATION_FILTER is the subscriber's to change (C013)")
	}
	if ss.largest.Set {
		params.LargestObject = ss.largest
	}
	if params.Forward.Set {
		ss.params.Forward = params.Forward
	}
	if params.LocationFilter.Set {
		ss.params.LocationFilter = params.LocationFilter
	}
	ss.mu.Unlock()
	return ss.rs.write(&wire.PublishStateNotify{Parameters: params})
}

// Done ends the subscription with PUBLISH_DONE and FIN (§9.9). Stream Count
// is the number of data streams opened for it (0 when none, C083).
func (ss *ServedSubscription) Done(code wire.PublishDoneCode, reason string) error {
	if st := ss.State(); st != StateEstablished && st != StatePendingPublisher {
		if err := ss.Err(); err != nil {
			return fmt.Errorf("moqt: PUBLISH_DONE on a %s subscription: %w", st, err)
		}
		return fmt.Errorf("moqt: PUBLISH_DONE on a %s subscription", st)
	}
	// PUBLISH_DONE comes after every stream of the subscription is closed
	// (C078, C081); subgroups still open will not be completed. No stream
	// opens after this, so the count is final.
	ss.resetDataStreams(resetCodeFor(code))
	ss.mu.Lock()
	count := ss.streams
	ss.mu.Unlock()
	d := &DoneError{Code: code, StreamCount: count, Reason: reason}
	if !ss.terminate(d) {
		return ss.Err()
	}
	defer ss.finish()
	return ss.rs.writeAndFin(&wire.PublishDone{StatusCode: code, StreamCount: count, ErrorReason: reason})
}

// cancel terminates from this end without PUBLISH_DONE: a reset of the
// request stream, as for a subscriber's cancellation (§3.1.1).
func (ss *ServedSubscription) cancel(err error, code wire.ResetCode) {
	if ss.terminate(err) {
		ss.resetDataStreams(code) // C003
		ss.rs.cancel(code)
		ss.finish()
	}
}

// finish releases what the subscription held once it is Terminated: the
// EXPIRES timer, its context and its use of the alias. Only the first call
// does anything. The request stays among the session's open requests until
// its stream is closed both ways.
func (ss *ServedSubscription) finish() {
	ss.finishOnce.Do(func() {
		// Data streams still open will not be completed (C003, C004).
		ss.resetDataStreams(wire.ResetCancelled)
		ss.mu.Lock()
		if ss.expiry != nil {
			ss.expiry.Stop()
		}
		ss.mu.Unlock()
		ss.cancelCtx()
		ss.sess.releaseAlias(ss.track)
	})
}

// establish moves to Established and starts the EXPIRES timer.
func (ss *ServedSubscription) establish() error {
	if err := ss.move(StateEstablished, nil); err != nil {
		return err
	}
	ss.restartExpiry()
	return nil
}

// restartExpiry (re)arms the timer that ends the subscription with EXPIRED
// once the granted EXPIRES has passed (§9.20.17).
func (ss *ServedSubscription) restartExpiry() {
	if ss.grant <= 0 {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.expiry != nil {
		ss.expiry.Stop()
	}
	ss.expiry = time.AfterFunc(ss.grant, func() {
		_ = ss.Done(wire.DoneExpired, "subscription expired")
	})
}

// grantParams returns the EXPIRES and LARGEST_OBJECT this end reports.
func (ss *ServedSubscription) grantParams() wire.Params {
	var p wire.Params
	if ss.grant > 0 {
		p.Expires = wire.Some(uint64(ss.grant.Milliseconds()))
	}
	ss.mu.Lock()
	p.LargestObject = ss.largest
	ss.mu.Unlock()
	return p
}

// run reads the subscriber's messages until the subscription ends. It is
// the only reader of the stream.
func (ss *ServedSubscription) run() error {
	ss.sess.wg.Add(1)
	go ss.updateWorker()
	defer close(ss.updates)
	// C003: STOP_SENDING from the subscriber, even with its own direction
	// left open, ends the subscription with a reset.
	stop := ss.rs.watchStopSending(ss.stoppedByPeer)
	defer stop()
	for {
		m, err := ss.rs.readMessage()
		var rej *wire.RejectError
		if errors.As(err, &rej) {
			err = ss.receiveUpdate(m.(*wire.RequestUpdate), rej)
		} else if err == nil {
			err = ss.handle(m)
		}
		if err == nil {
			continue
		}
		return ss.end(err)
	}
}

// stoppedByPeer handles the subscriber's STOP_SENDING (§3.1.1). While a
// PUBLISH awaits its answer, the subscriber is the responder: its
// REQUEST_ERROR or reset may still be on its way and says more, so the
// STOP_SENDING is acted on only once the PUBLISH_OK has arrived.
func (ss *ServedSubscription) stoppedByPeer() {
	if ss.State() == StatePendingPublisher {
		return
	}
	ss.cancel(fmt.Errorf("%w: STOP_SENDING from the subscriber", ErrCancelled), wire.ResetCancelled)
}

// end applies the error that stopped run and returns the one that must
// close the session, if any.
func (ss *ServedSubscription) end(err error) error {
	if se, ok := asSessionError(err); ok {
		ss.terminate(se)
		ss.finish()
		if se.Remote {
			return nil
		}
		return se
	}
	switch {
	case errors.Is(err, io.EOF):
		if ss.State() == StatePendingPublisher {
			// The subscriber finished without answering the PUBLISH:
			// the request failed (§6.4.2.2).
			ss.cancel(fmt.Errorf("moqt: subscriber closed the stream without answering PUBLISH: %w", ErrCancelled), wire.ResetCancelled)
			return nil
		}
		// The subscriber finished its direction: no more updates, but the
		// subscription goes on until PUBLISH_DONE or a STOP_SENDING (C008,
		// "FIN is not a cancellation").
		select {
		case <-ss.done:
		case <-ss.sess.ctx.Done():
		}
		return nil
	default:
		// A reset from the subscriber cancels (§3.1.1); the publisher
		// resets in turn (C003).
		ss.cancel(fmt.Errorf("%w: %v", ErrCancelled, err), wire.ResetCancelled)
		return nil
	}
}

// handle applies one message from the subscriber.
func (ss *ServedSubscription) handle(m wire.Message) error {
	state := ss.State()
	switch m := m.(type) {
	case *wire.RequestUpdate:
		return ss.receiveUpdate(m, nil)
	case *wire.RequestOK:
		if !ss.byPublish || state != StatePendingPublisher {
			return protocolViolation("unexpected REQUEST_OK in state %s", state) // C002
		}
		if err := m.Check(wire.InPublishOK); err != nil {
			return err
		}
		ss.rs.answered()
		if err := ss.establish(); err != nil {
			return err
		}
		if ss.rs.peerStopped() {
			ss.stoppedByPeer() // a STOP_SENDING that came before PUBLISH_OK
		}
		return nil
	case *wire.RequestError:
		if !ss.byPublish || state != StatePendingPublisher {
			return protocolViolation("unexpected REQUEST_ERROR in state %s", state) // C002
		}
		own, err := detach(ss.sess.version, m)
		if err != nil {
			return err
		}
		ss.rs.answered()
		ss.terminate(requestErrorFrom(own))
		ss.finish()
		_ = ss.rs.fin()
		return nil
	case *wire.PublishStateNotify:
		return protocolViolation("PUBLISH_STATE_NOTIFY from the subscriber") // C012
	case *wire.Goaway:
		return nil
	}
	return protocolViolation("unexpected %s from the subscriber", m.Type())
}

// receiveUpdate checks a REQUEST_UPDATE from the subscriber and hands it
// to the worker; rej is set for one that is to be refused. The Request ID,
// the parameters and MAX_REQUEST_UPDATES are checked first (§6.4.2.1,
// §9.1.7). On a PUBLISH the subscriber's first message is its answer
// (§9), so an update before PUBLISH_OK is a protocol violation; on a
// SUBSCRIBE the requester may send updates at once, and they wait for the
// subscription to be Established.
func (ss *ServedSubscription) receiveUpdate(m *wire.RequestUpdate, rej *wire.RejectError) error {
	if ss.State() == StatePendingPublisher {
		return protocolViolation("REQUEST_UPDATE before the answer to PUBLISH")
	}
	if err := ss.sess.checkPeerRequestID(m.RequestID); err != nil {
		return err
	}
	if err := m.Parameters.Check(wire.InUpdateSubscription); err != nil {
		return err
	}
	own, err := detach(ss.sess.version, m)
	if err != nil {
		return err
	}
	ss.sess.hook(func(h *sessionHooks) func() { return h.updateReceived })
	u := pendingUpdate{msg: own, rej: rej}
	ss.mu.Lock()
	limit := ss.sess.cfg.MaxRequestUpdates
	if limit > 0 && ss.outstanding >= limit {
		ss.mu.Unlock()
		return &SessionError{Code: wire.TooManyRequestUpdates,
			Reason: fmt.Sprintf("more than %d outstanding REQUEST_UPDATEs", limit)}
	}
	ss.outstanding++
	ss.mu.Unlock()
	select {
	case ss.updates <- u:
		return nil
	case <-ss.done:
		return nil
	}
}

// updateWorker answers REQUEST_UPDATEs in order, each with exactly one
// REQUEST_OK or REQUEST_ERROR (§9.5). Updates wait until the subscription
// is Established.
func (ss *ServedSubscription) updateWorker() {
	defer ss.sess.wg.Done()
	select {
	case <-ss.established:
	case <-ss.done:
		return
	}
	for u := range ss.updates {
		if ss.State() != StateEstablished {
			return
		}
		ss.applyUpdate(u)
		ss.mu.Lock()
		ss.outstanding--
		ss.mu.Unlock()
	}
}

// applyUpdate answers one REQUEST_UPDATE. A refused update ends the
// subscription with PUBLISH_DONE UPDATE_FAILED (§9.5.1, C080).
//
// MAX_FILTER_RANGES counts the Ranges the subscription would have once the
// update applied, since the limit is on the Ranges "concurrently in all
// Range filter parameters for a given subscription" (§9.1.6).
func (ss *ServedSubscription) applyUpdate(u pendingUpdate) {
	var refused *RequestError
	p := &u.msg.Parameters
	merged := ss.Params()
	mergeParams(&merged, p)
	switch {
	case u.rej != nil:
		refused = &RequestError{Code: u.rej.Code, Reason: u.rej.Reason}
	case uint64(merged.RangeCount()) > ss.sess.cfg.MaxFilterRanges:
		refused = &RequestError{Code: wire.ReqInvalidFilter, Reason: "more ranges than MAX_FILTER_RANGES"} // C026
	case ss.onUpdate != nil:
		if err := ss.onUpdate(ss, p); err != nil {
			refused = asRequestError(err)
		}
	}
	if refused != nil {
		if err := ss.rs.write(refused.message()); err == nil {
			_ = ss.Done(wire.DoneUpdateFailed, refused.Reason)
		}
		return
	}
	ss.mu.Lock()
	mergeParams(&ss.params, p)
	if ss.filter != nil {
		// The range limit was checked above; relative forms resolve
		// against the Largest Object now (§9.5.1).
		_ = ss.filter.Update(p, largestOf(ss.largest), ^uint64(0))
	}
	ss.subscriberSet.forward = ss.subscriberSet.forward || p.Forward.Set
	ss.subscriberSet.locationFilter = ss.subscriberSet.locationFilter || p.LocationFilter.Set
	ss.mu.Unlock()
	if p.SubscriberPriority.Set {
		ss.refreshPriority()
	}
	ss.restartExpiry()
	_ = ss.rs.write(&wire.RequestOK{Parameters: ss.grantParams()})
}

// forwardOf is the Forward State p gives: FORWARD, default 1 (§9.20.19).
func forwardOf(p *wire.Params) bool { return !p.Forward.Set || p.Forward.Value }

// sameFilter reports whether f, as a notification would set it, leaves the
// current filter cur as it is. The empty filter means no filter.
func sameFilter(cur wire.Opt[wire.LocationFilter], f wire.LocationFilter) bool {
	if f.Fields == 0 {
		return !cur.Set || cur.Value.Fields == 0
	}
	return cur.Set && cur.Value == f
}
