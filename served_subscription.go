package moqt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// ServedSubscription is the publisher's end of one subscription (§3.1):
// accepted from a peer's SUBSCRIBE, or initiated with LocalTrack.Publish. It
// follows the subscriber's REQUEST_UPDATEs, reports state changes with
// PUBLISH_STATE_NOTIFY, and ends with PUBLISH_DONE.
type ServedSubscription struct {
	subState
	sess      *Session
	rs        *requestStream
	track     wire.FullTrackName
	alias     uint64
	byPublish bool
	// ctx is cancelled, with Err as its cause, when the subscription's
	// state is released: after its PUBLISH_DONE, on cancellation, or when
	// the session ends (see watchSession).
	ctx       context.Context
	cancelCtx context.CancelCauseFunc
	goaway    atomic.Bool // Goaway was called (served_update.go)
	// stopWatch unregisters the watch on the session's end.
	stopWatch func() bool
	// local is the LocalTrack serving the subscription, if any: the
	// Largest Object comes from it, and the subscription leaves it when
	// it terminates. Set once, by LocalTrack.join.
	local atomic.Pointer[LocalTrack]
	// opened is closed once the message that tells the subscriber about
	// the subscription (SUBSCRIBE_OK, or this end's PUBLISH) is written.
	// Nothing else is written to the request stream before it, though the
	// subscription may already be served and even Terminated.
	opened chan struct{}

	// onUpdate, if set, may refuse an update; it sees the new parameters
	// before they apply.
	onUpdate func(*ServedSubscription, *wire.Params) error
	// grant is the EXPIRES this end grants (§9.20.17); 0 means none.
	grant time.Duration

	finishOnce  sync.Once
	releaseOnce sync.Once

	// cut is the PUBLISH_DONE of a cut-off, once the subscription passed
	// Config.MaxSubscriberBacklog (TOO_FAR_BEHIND) or its session's
	// budget (EXCESSIVE_LOAD), else nil: its streams are reset with its
	// code, and an End that comes before the cut-off's own, such as the
	// track's, sends it instead of its own.
	cut atomic.Pointer[DoneError]
	wp  servedWritePath // its write-path state, its backlogs' bytes (served_backlog.go)
	// view is what the data path reads for each object, replaced under
	// mu whenever the filter or the parameters change (servedView).
	view  atomic.Pointer[servedView]
	early atomic.Int64 // objects sent before PUBLISH_OK
	// filterEnded is set once the track passed the end of the filter on a
	// draft that ends the subscription then (endIfPast).
	filterEnded atomic.Bool

	// openMu orders opening data streams (read-locked) against their
	// final reset (locked), after which closing refuses new ones.
	openMu       sync.RWMutex
	closing      bool
	pendingOpens atomic.Int32 // data streams waiting for stream credit

	mu          sync.Mutex // guards the fields below
	params      wire.Params
	largest     wire.Opt[wire.Location]
	outstanding uint64 // REQUEST_UPDATEs received and not yet answered
	// held counts their bytes (request_update_held.go), released at the latest
	// by release.
	held updateHold
	// updates holds the REQUEST_UPDATEs waiting for the worker; it and
	// the worker exist from the first update on, so that a subscription
	// never updated holds neither.
	updates chan pendingUpdate
	expiry  *time.Timer    // fires the EXPIRED PUBLISH_DONE
	streams uint64         // data streams opened for this subscription
	filter  *filter.Filter // nil until a LocalTrack serves it
	// dataStreams are the data streams still open, each true once its
	// writer is done with it and only its backlog, or the linger of a
	// cut stream, remains: End lets those finish (closeDataStreams).
	dataStreams map[transport.SendStream]bool
	// lingering counts the cut streams waiting out cutLinger, within
	// maxLingering.
	lingering int
	// endingDone, when set, is closed once no ending stream is left.
	endingDone chan struct{}
	// pendingDone is the PUBLISH_DONE of a subscription that terminated
	// before opened: it goes out right after the opening message.
	pendingDone *wire.PublishDone
	// subscriberSet lists the parameters the subscriber controls, which
	// PUBLISH_STATE_NOTIFY must not change (C013).
	subscriberSet controlled

	// join is the Joining Location of drafts 18 and 19 (fetch_join.go).
	join joinPoint
}

// controlled marks the subscription parameters under the subscriber's
// control (§9.10). For a SUBSCRIBE that is all of them from the start: the
// subscriber chose them, defaults included. For a PUBLISH the publisher
// set the initial values and may change them until the subscriber sets one
// with REQUEST_UPDATE.
type controlled struct {
	forward, locationFilter bool
}

func newServedSubscription(rs *requestStream, track wire.FullTrackName, params wire.Params, initial subscriptionState) *ServedSubscription {
	s := rs.sess
	// Not a child of the session's context: the subscription's context
	// ends only once Err is set, the session's end included.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(s.ctx))
	ss := &ServedSubscription{
		subState:  newSubState(initial),
		sess:      s,
		rs:        rs,
		track:     track,
		alias:     s.routes.publisherAlias(track),
		byPublish: initial == statePendingPublisher,
		ctx:       ctx,
		cancelCtx: cancel,
		opened:    make(chan struct{}),
		params:    params,
		subscriberSet: controlled{
			forward:        initial == statePendingSubscriber,
			locationFilter: initial == statePendingSubscriber,
		},
	}
	ss.wp.group.Init(s.cfg.MaxSubscriberBacklog, s.cfg.SubscriberGrace, &s.backlog)
	ss.stopWatch = context.AfterFunc(s.ctx, ss.watchSession)
	end := func() { _ = ss.End(wire.DoneGoingAway, "session closing") }
	rs.onClose.Store(&end)
	return ss
}

// watchSession terminates the subscription when its session ends, with
// the session's error. It sends and resets nothing: the connection's
// close ends the streams (a reset sent first could reach the peer as the
// end of this one subscription). The rest of finish follows when the
// request stream's reader stops.
func (ss *ServedSubscription) watchSession() {
	if ss.terminate(context.Cause(ss.sess.ctx)) {
		ss.release()
	}
}

// Err returns why the subscription terminated, or nil while it is live.
// Once Context is done, Err is set and is the context's cause: the
// context ends when the subscription's state is released, right after its
// PUBLISH_DONE is sent, or at once when the session ends.
func (ss *ServedSubscription) Err() error { return ss.subState.termErr() }

// Track is the track being served.
func (ss *ServedSubscription) Track() wire.FullTrackName { return ss.track }

// requestID is the Request ID of the SUBSCRIBE or PUBLISH.
func (ss *ServedSubscription) requestID() uint64 { return ss.rs.id }

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

// setLargest records the track's Largest Object, which SUBSCRIBE_OK,
// REQUEST_OK and PUBLISH_STATE_NOTIFY then report (§9.20.18). A
// subscription served by a LocalTrack follows the track's by itself.
func (ss *ServedSubscription) setLargest(l wire.Location) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !ss.largest.Set || ss.largest.Value.Less(l) {
		ss.largest = wire.Some(l)
	}
}

// largestNow is the Largest Object to report now: the larger of what
// setLargest recorded and the serving track's. ss.mu is not held (the
// track's lock comes first).
func (ss *ServedSubscription) largestNow() wire.Opt[wire.Location] {
	ss.mu.Lock()
	l := ss.largest
	ss.mu.Unlock()
	if t := ss.local.Load(); t != nil {
		if tl, ok := t.Largest(); ok && (!l.Set || l.Value.Less(tl)) {
			l = wire.Some(tl)
		}
	}
	return l
}

// Notify sends PUBLISH_STATE_NOTIFY (§9.10) with the parameters that
// changed at the publisher: FORWARD or LOCATION_FILTER. LARGEST_OBJECT is
// added when known (§9.10).
//
// A publisher must not change a subscriber-controlled value the subscriber
// did not ask for (§9.10), and what the subscriber asks for arrives as a
// REQUEST_UPDATE, whose REQUEST_OK already confirms it. So Notify refuses
// to change FORWARD or LOCATION_FILTER on a SUBSCRIBE-initiated
// subscription, and on a PUBLISH-initiated one once the subscriber has set
// that parameter with REQUEST_UPDATE. Restating the current value is no
// change and is allowed.
func (ss *ServedSubscription) Notify(params wire.Params) error {
	if !ss.sess.rules.notify {
		return ss.sess.rules.notIn("PUBLISH_STATE_NOTIFY")
	}
	if err := ss.sess.rules.checkOwnParams(&params, wire.InPublishStateNotify); err != nil {
		return err
	}
	if st := ss.current(); st != stateEstablished {
		return fmt.Errorf("moqt: PUBLISH_STATE_NOTIFY on a %s subscription", st)
	}
	largest := ss.largestNow()
	ss.mu.Lock()
	if params.Forward.Set && ss.subscriberSet.forward && params.Forward.Value != forwardOf(&ss.params) {
		ss.mu.Unlock()
		return errors.New("moqt: FORWARD is the subscriber's to change (C013)")
	}
	if params.LocationFilter.Set && ss.subscriberSet.locationFilter && !sameFilter(ss.params.LocationFilter, params.LocationFilter.Value) {
		ss.mu.Unlock()
		return errors.New("moqt: LOCATION_FILTER is the subscriber's to change (C013)")
	}
	if largest.Set {
		params.LargestObject = largest
	}
	if params.Forward.Set {
		ss.params.Forward = params.Forward
	}
	if params.LocationFilter.Set {
		ss.params.LocationFilter = params.LocationFilter
	}
	if ss.filter != nil {
		// The objects sent follow the new state at once; a relative
		// filter resolves against the Largest Object now.
		changed := wire.Params{Forward: params.Forward, LocationFilter: params.LocationFilter}
		_ = ss.filter.Update(&changed, largestOf(largest), ^uint64(0))
		ss.refreshView()
	}
	ss.mu.Unlock()
	return ss.rs.write(&wire.PublishStateNotify{Parameters: params})
}

// End ends the subscription with PUBLISH_DONE and FIN (§9.9). Stream Count
// is the number of data streams opened for it (0 when none). A subscriber
// that does not take the PUBLISH_DONE within Config.PublishDoneTimeout has
// its request stream reset with TOO_FAR_BEHIND instead, so End never waits
// longer on a stalled peer. On a subscription whose SUBSCRIBE_OK or
// PUBLISH is still being written, the PUBLISH_DONE follows it, and End
// does not wait for either. Done, unlike End, only reports the end. A
// subscription cut off meanwhile for falling too far behind (or for its
// session's budget) ends with that status and reason instead of code: its
// streams were reset with it. A code the session's draft lacks (SUBSCRIPTION_ENDED outside 18 and 19)
// fails with an error wrapping wire.ErrNotInDraft, before anything is sent.
func (ss *ServedSubscription) End(code wire.PublishDoneCode, reason string) error {
	if err := ss.sess.rules.checkDoneCode(code); err != nil {
		return err
	}
	if st := ss.current(); st != stateEstablished && st != statePendingPublisher {
		if err := ss.Err(); err != nil {
			return fmt.Errorf("moqt: PUBLISH_DONE on a %s subscription: %w", st, err)
		}
		return fmt.Errorf("moqt: PUBLISH_DONE on a %s subscription", st)
	}
	// PUBLISH_DONE comes after every stream of the subscription is closed
	// (C078, C081); subgroups still open will not be completed, those
	// ended already are delivered first. No stream opens after this, so
	// the count is final. A cut-off, before or while the streams end,
	// decides the status.
	code, reason = ss.cutStatus(code, reason)
	ss.closeDataStreams(resetCodeFor(code), deliversLast(code))
	code, reason = ss.cutStatus(code, reason)
	ss.mu.Lock()
	count := ss.streams
	ss.mu.Unlock()
	d := &DoneError{Code: code, StreamCount: count, Reason: reason}
	if !ss.terminate(d) {
		return ss.Err()
	}
	msg := &wire.PublishDone{StatusCode: code, StreamCount: count, ErrorReason: wire.FitReason(reason)}
	ss.mu.Lock()
	select {
	case <-ss.opened:
	default:
		// The opening message is still being written; its writer sends
		// this after it and then releases the state (see markOpened).
		// The deadline bounds that write too, should the subscriber
		// not take it.
		ss.pendingDone = msg
		ss.mu.Unlock()
		_ = ss.rs.str.SetWriteDeadline(time.Now().Add(ss.sess.cfg.PublishDoneTimeout))
		return nil
	}
	ss.mu.Unlock()
	defer ss.finish() // the state is kept until PUBLISH_DONE is sent (C082)
	return ss.writeDone(msg)
}

// writeDone writes PUBLISH_DONE and FIN, bounded by
// Config.PublishDoneTimeout: a subscriber that leaves its request stream
// unread cannot hold up the caller (LocalTrack.End, a writer ending a
// subscription TOO_FAR_BEHIND, an expiry). Past the bound the stream is
// reset with TOO_FAR_BEHIND (§12.5): the subscriber cannot keep up even
// with the control messages.
func (ss *ServedSubscription) writeDone(msg *wire.PublishDone) error {
	str := ss.rs.str
	// The deadline also bounds a write of this stream already blocked,
	// which holds the stream's write lock.
	_ = str.SetWriteDeadline(time.Now().Add(ss.sess.cfg.PublishDoneTimeout))
	err := ss.rs.writeAndFin(msg)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		ss.rs.cancel(wire.ResetTooFarBehind)
		return fmt.Errorf("moqt: PUBLISH_DONE not taken within %v: request stream reset: %w", ss.sess.cfg.PublishDoneTimeout, err)
	}
	return err
}

// markOpened records that the opening message (SUBSCRIBE_OK or PUBLISH)
// was written, and sends the PUBLISH_DONE of a subscription that ended
// meanwhile.
func (ss *ServedSubscription) markOpened() error {
	ss.mu.Lock()
	close(ss.opened)
	msg := ss.pendingDone
	ss.pendingDone = nil
	ss.mu.Unlock()
	if msg == nil {
		return nil
	}
	defer ss.finish()
	return ss.writeDone(msg)
}

// abort ends a subscription whose opening message (SUBSCRIBE_OK or
// PUBLISH) could not be written because of err: the request stream is
// reset, also when a Done terminated the subscription first and left its
// PUBLISH_DONE to follow that message.
func (ss *ServedSubscription) abort(err error) {
	code := wire.ResetInternalError
	if errors.Is(err, os.ErrDeadlineExceeded) {
		code = wire.ResetTooFarBehind // see writeDone
	}
	ss.cancel(err, code)
	ss.mu.Lock()
	ss.pendingDone = nil
	ss.mu.Unlock()
	ss.rs.cancel(code)
	ss.finish()
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

// finish closes what the subscription left open once it is Terminated:
// its data streams, and what release frees. Only the first call does
// anything. The request stays among the session's open requests until its
// stream is closed both ways.
func (ss *ServedSubscription) finish() {
	ss.finishOnce.Do(func() {
		// Data streams still open will not be completed (C003, C004).
		ss.resetDataStreams(wire.ResetCancelled)
		ss.release()
	})
}

// release frees what a Terminated subscription holds, without I/O: the
// EXPIRES timer, the watch on the session, its place in the LocalTrack
// serving it (and through it, this session), its use of a shared alias.
// Only the first call does anything.
func (ss *ServedSubscription) release() {
	ss.releaseOnce.Do(func() {
		ss.mu.Lock()
		if ss.expiry != nil {
			ss.expiry.Stop()
		}
		ss.held.close(&ss.sess.backlog) // the updates the worker will not answer
		ss.mu.Unlock()
		ss.stopWatch()
		// Off the track before the context ends, so that a caller woken
		// by it (awaitPublishOK) finds the subscription gone (C004).
		if t := ss.local.Load(); t != nil {
			t.leave(ss)
		}
		ss.cancelCtx(ss.Err())
		ss.sess.routes.releaseAlias(ss.track, ss.alias)
		ss.sess.joins.remove(ss)
	})
}

// establish moves to Established and starts the EXPIRES timer.
func (ss *ServedSubscription) establish() error {
	if err := ss.move(stateEstablished, nil); err != nil {
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
		_ = ss.End(wire.DoneExpired, "subscription expired")
	})
}

// grantParams returns the EXPIRES and LARGEST_OBJECT this end reports.
func (ss *ServedSubscription) grantParams() wire.Params {
	var p wire.Params
	if ss.grant > 0 {
		p.Expires = wire.Some(uint64(ss.grant.Milliseconds()))
	}
	p.LargestObject = ss.largestNow()
	return p
}

// stoppedByPeer handles the subscriber's STOP_SENDING (§3.1.1). While a
// PUBLISH awaits its answer, the subscriber is the responder: its
// REQUEST_ERROR or reset may still be on its way and says more, so the
// STOP_SENDING is acted on only once the PUBLISH_OK has arrived.
func (ss *ServedSubscription) stoppedByPeer() {
	if ss.current() == statePendingPublisher {
		return
	}
	ss.cancel(fmt.Errorf("%w: STOP_SENDING from the subscriber", ErrCancelled), wire.ResetCancelled)
}

// The subscriber's side of the request stream, as the shared read loop
// drives it (requestSide); STOP_SENDING goes to stoppedByPeer (C003).

// failed ends the subscription with the session.
func (ss *ServedSubscription) failed(se *SessionError) {
	ss.terminate(se)
	ss.finish()
}

// peerFinished applies the subscriber's FIN.
func (ss *ServedSubscription) peerFinished() {
	if ss.current() == statePendingPublisher {
		// The subscriber finished without answering the PUBLISH: the
		// request failed (§6.4.2.2).
		ss.cancel(fmt.Errorf("moqt: subscriber closed the stream without answering PUBLISH: %w", ErrCancelled), wire.ResetCancelled)
		return
	}
	// The subscriber finished its direction: no more updates, but the
	// subscription goes on until PUBLISH_DONE or a STOP_SENDING (C008,
	// "FIN is not a cancellation").
	select {
	case <-ss.done:
	case <-ss.sess.ctx.Done():
	}
}

// reset applies the subscriber's reset, which cancels (§3.1.1); the
// publisher resets in turn (C003).
func (ss *ServedSubscription) reset(cause error) { ss.cancel(cause, wire.ResetCancelled) }

// handle applies one message from the subscriber; rej refuses a
// REQUEST_UPDATE.
func (ss *ServedSubscription) handle(m wire.Message, rej *wire.RejectError) error {
	state := ss.current()
	switch m := m.(type) {
	case *wire.RequestUpdate:
		return ss.receiveUpdate(m, rej)
	case *wire.RequestOK:
		if !ss.byPublish || state != statePendingPublisher {
			return protocolViolation("unexpected REQUEST_OK in state %s", state) // C002
		}
		if err := ss.sess.rules.checkRequestOK(m, wire.InPublishOK); err != nil {
			return err
		}
		ss.rs.answered()
		if ss.sess.rules.publishOKParams {
			ss.applyPublishOK(&m.Parameters)
		}
		if err := ss.establish(); err != nil {
			return err
		}
		if ss.rs.peerStopped() {
			ss.stoppedByPeer() // a STOP_SENDING that came before PUBLISH_OK
		}
		return nil
	case *wire.RequestError:
		if !ss.byPublish || state != statePendingPublisher {
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

// awaitPublishOK waits for the answer to PUBLISH; if ctx ends first the
// subscription is cancelled.
func (ss *ServedSubscription) awaitPublishOK(ctx context.Context) error {
	select {
	case <-ss.established:
		return nil
	case <-ss.done:
		// Returned once the subscription has released its data streams
		// and left its track: no object goes out for a request that
		// ended with an error (C004), whatever the caller writes next.
		select {
		case <-ss.ctx.Done():
		case <-ctx.Done():
		}
		return ss.Err()
	case <-ctx.Done():
		ss.cancel(ErrCancelled, wire.ResetCancelled)
		return ctx.Err()
	}
}
