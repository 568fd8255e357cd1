package moqt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

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

	updates chan pendingUpdate // REQUEST_UPDATEs waiting for the worker

	mu          sync.Mutex // guards the fields below
	params      wire.Params
	largest     wire.Opt[wire.Location]
	outstanding uint64      // REQUEST_UPDATEs received and not yet answered
	expiry      *time.Timer // fires the EXPIRED PUBLISH_DONE
	streams     uint64      // data streams opened for this subscription
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
	return !p.Forward.Set || p.Forward.Value
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
// added when known (C014). A publisher must not change a subscriber-
// controlled value the subscriber did not ask for (C013).
func (ss *ServedSubscription) Notify(params wire.Params) error {
	if err := params.Check(wire.InPublishStateNotify); err != nil {
		return err
	}
	if st := ss.State(); st != StateEstablished {
		return fmt.Errorf("moqt: PUBLISH_STATE_NOTIFY on a %s subscription", st)
	}
	ss.mu.Lock()
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
		return fmt.Errorf("moqt: PUBLISH_DONE on a %s subscription", st)
	}
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
		ss.rs.cancel(code)
		ss.finish()
	}
}

// finish releases what the subscription held once it is Terminated.
func (ss *ServedSubscription) finish() {
	ss.mu.Lock()
	if ss.expiry != nil {
		ss.expiry.Stop()
	}
	ss.mu.Unlock()
	ss.cancelCtx()
	ss.sess.releaseAlias(ss.track)
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
	for {
		m, err := ss.rs.readMessage()
		var rej *wire.RejectError
		if errors.As(err, &rej) {
			err = ss.enqueueUpdate(pendingUpdate{msg: m.(*wire.RequestUpdate), rej: rej})
		} else if err == nil {
			err = ss.handle(m)
		}
		if err == nil {
			continue
		}
		return ss.end(err)
	}
}

// end applies the error that stopped run and returns the one that must
// close the session, if any.
func (ss *ServedSubscription) end(err error) error {
	var se *SessionError
	switch {
	case errors.As(err, &se):
		ss.terminate(se)
		ss.finish()
		if se.Remote {
			return nil
		}
		return se
	case errors.Is(err, io.EOF):
		// The subscriber finished its direction: no more updates, but the
		// subscription goes on until PUBLISH_DONE or a STOP_SENDING,
		// which cancels the stream's context.
		select {
		case <-ss.done:
		case <-ss.rs.str.Context().Done():
			ss.cancel(ErrCancelled, wire.ResetCancelled)
		}
		return nil
	default:
		// A reset or STOP_SENDING from the subscriber cancels (§3.1.1).
		ss.cancel(fmt.Errorf("%w: %v", ErrCancelled, err), wire.ResetCancelled)
		return nil
	}
}

// handle applies one message from the subscriber.
func (ss *ServedSubscription) handle(m wire.Message) error {
	state := ss.State()
	switch m := m.(type) {
	case *wire.RequestUpdate:
		own, err := detach(ss.sess.version, m)
		if err != nil {
			return err
		}
		return ss.enqueueUpdate(pendingUpdate{msg: own})
	case *wire.RequestOK:
		if !ss.byPublish || state != StatePendingPublisher {
			return protocolViolation("unexpected REQUEST_OK in state %s", state) // C002
		}
		if err := m.Check(wire.InPublishOK); err != nil {
			return err
		}
		return ss.establish()
	case *wire.RequestError:
		if !ss.byPublish || state != StatePendingPublisher {
			return protocolViolation("unexpected REQUEST_ERROR in state %s", state) // C002
		}
		own, err := detach(ss.sess.version, m)
		if err != nil {
			return err
		}
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

// enqueueUpdate hands a REQUEST_UPDATE to the worker. It checks the Request
// ID and MAX_REQUEST_UPDATES first (§6.4.2.1, §9.1.7).
func (ss *ServedSubscription) enqueueUpdate(u pendingUpdate) error {
	if err := ss.sess.checkPeerRequestID(u.msg.RequestID); err != nil {
		return err
	}
	if err := u.msg.Parameters.Check(wire.InUpdateSubscription); err != nil {
		return err
	}
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
func (ss *ServedSubscription) applyUpdate(u pendingUpdate) {
	var refused *RequestError
	p := &u.msg.Parameters
	switch {
	case u.rej != nil:
		refused = &RequestError{Code: u.rej.Code, Reason: u.rej.Reason}
	case uint64(p.RangeCount()) > ss.sess.cfg.MaxFilterRanges:
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
	ss.mu.Unlock()
	ss.restartExpiry()
	_ = ss.rs.write(&wire.RequestOK{Parameters: ss.grantParams()})
}
