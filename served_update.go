package moqt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// A ServedSubscription's REQUEST_UPDATEs (§9.5), answered in order by one
// worker, the fill fetch streams its SUBSCRIBE or an update asks for, and
// the GOAWAY that moves it elsewhere.

// pendingUpdate is a REQUEST_UPDATE waiting for the worker.
type pendingUpdate struct {
	msg *wire.RequestUpdate
	rej *wire.RejectError
	// cost is what holding msg is charged to the request's updateHold,
	// released once it is answered (request_update_held.go).
	cost int
}

// receiveUpdate checks a REQUEST_UPDATE from the subscriber and hands it
// to the worker; rej is set for one that is to be refused. The Request ID,
// the parameters and MAX_REQUEST_UPDATES are checked first (§6.4.2.1,
// §9.1.7). On a PUBLISH the subscriber's first message is its answer
// (§9), so an update before PUBLISH_OK is a protocol violation; on a
// SUBSCRIBE the requester may send updates at once, and they wait for the
// subscription to be Established. Their bytes are bounded (request_update_held.go):
// one past the bounds is refused with EXCESSIVE_LOAD in its turn, which
// ends the subscription.
func (ss *ServedSubscription) receiveUpdate(m *wire.RequestUpdate, rej *wire.RejectError) error {
	if ss.current() == statePendingPublisher {
		return protocolViolation("REQUEST_UPDATE before the answer to PUBLISH")
	}
	if err := ss.sess.ids.checkPeer(m.RequestID); err != nil {
		return err
	}
	if err := ss.sess.rules.checkPeerParams(&m.Parameters, wire.InUpdateSubscription); err != nil {
		return err
	}
	var u pendingUpdate
	if rej != nil {
		// Refused already: its Request ID is all the answer needs.
		u = pendingUpdate{msg: &wire.RequestUpdate{RequestID: m.RequestID}, rej: rej}
	} else {
		own, size, err := detachSized(ss.sess.version, m)
		if err != nil {
			return err
		}
		u = pendingUpdate{msg: own, cost: heldUpdateCost(size, &own.Parameters)}
	}
	ss.sess.hook(func(h *sessionHooks) func() { return h.updateReceived })
	ss.mu.Lock()
	limit := ss.sess.maxRequestUpdates()
	if limit > 0 && ss.outstanding >= limit {
		ss.mu.Unlock()
		return &SessionError{Code: wire.TooManyRequestUpdates,
			Reason: fmt.Sprintf("more than %d outstanding REQUEST_UPDATEs", limit)}
	}
	ss.outstanding++
	if ss.held.closed {
		// The subscription is over: the update crossed its end, and
		// stays outstanding, never answered.
		ss.mu.Unlock()
		return nil
	}
	if u.cost > 0 {
		if err := ss.held.take(&ss.sess.backlog, u.cost); err != nil {
			u = refusedUpdate(m.RequestID, err)
		}
	}
	updates := ss.updates
	if updates == nil {
		capacity := 16
		if limit > 0 {
			capacity = int(min(limit, 1024))
		}
		updates = make(chan pendingUpdate, capacity)
		ss.updates = updates
		ss.sess.goroutines.Go(func() { ss.updateWorker(updates) })
	}
	ss.mu.Unlock()
	ss.join.updateReceived()
	select {
	case updates <- u:
		return nil
	case <-ss.done:
		return nil
	}
}

// updateWorker answers REQUEST_UPDATEs in order, each with exactly one
// REQUEST_OK or REQUEST_ERROR (§9.5). Updates wait until the subscription
// is Established and its SUBSCRIBE_OK written. It starts at the first
// update and ends with the subscription.
func (ss *ServedSubscription) updateWorker(updates <-chan pendingUpdate) {
	for _, ch := range []<-chan struct{}{ss.established, ss.opened} {
		select {
		case <-ch:
		case <-ss.done:
			return
		}
	}
	for {
		var u pendingUpdate
		select {
		case u = <-updates:
		case <-ss.done:
			return
		}
		if ss.current() != stateEstablished {
			return
		}
		ss.applyUpdate(u)
		ss.join.updateApplied()
		ss.mu.Lock()
		ss.outstanding--
		ss.held.give(&ss.sess.backlog, u.cost)
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
	// The fill this update asks for is checked over the merged filters;
	// the SUBSCRIBE's own FILL_PARAMETERS are spent.
	merged.FillParameters = p.FillParameters
	largest := ss.largestNow()
	rangeErr := checkRanges(&merged, ss.sess.cfg.MaxFilterRanges) // C026
	switch {
	case u.rej != nil:
		refused = refusalOf(u.rej)
	case rangeErr != nil:
		refused = asRequestError(rangeErr)
	case ss.onUpdate != nil:
		if err := ss.onUpdate(ss, p); err != nil {
			refused = asRequestError(err)
		}
	}
	if refused != nil {
		// The subscription ends whether or not the REQUEST_ERROR could
		// be written (§9.5.1).
		_ = ss.rs.write(refused.message())
		_ = ss.End(wire.DoneUpdateFailed, refused.Reason)
		return
	}
	ss.mu.Lock()
	wasForward := forwardOf(&ss.params)
	mergeParams(&ss.params, p)
	joins := !wasForward && forwardOf(&ss.params)
	if ss.filter != nil {
		// The range limit was checked above; relative forms resolve
		// against the Largest Object now (§9.5.1).
		_ = ss.filter.Update(p, largestOf(largest), ^uint64(0))
	}
	ss.subscriberSet.forward = ss.subscriberSet.forward || p.Forward.Set
	ss.subscriberSet.locationFilter = ss.subscriberSet.locationFilter || p.LocationFilter.Set
	ss.refreshView()
	ss.mu.Unlock()
	if p.SubscriberPriority.Set {
		ss.refreshPriority()
	}
	ss.restartExpiry()
	granted := ss.grantParams()
	if joins {
		// Forward 0 to 1: this REQUEST_OK's Largest is the new Joining
		// Location (18 §5.1).
		ss.join.set(granted.LargestObject)
	}
	if err := ss.rs.write(&wire.RequestOK{Parameters: granted}); err == nil {
		// A fill asked for here ends at the Largest Object the
		// REQUEST_OK reports (§3.4).
		ss.startFill(u.msg.RequestID, p.FillParameters, granted.LargestObject)
	}
}

// refreshPriority re-reads the subscriber priority of ss and applies it to
// its open data streams. The data path does this on the next object
// anyway; calling it when a REQUEST_UPDATE changes SUBSCRIBER_PRIORITY
// applies the change to streams that are waiting for no new object.
func (ss *ServedSubscription) refreshPriority() {
	ss.mu.Lock()
	prio := subscriberPriority(&ss.params)
	ss.mu.Unlock()
	ss.sess.priorities().SetSubscriber(ss.rs.id, prio)
}

// Fill fetch streams (§3.4, §3.4.1, §9.20.16): a SUBSCRIBE or
// REQUEST_UPDATE carrying FILL_PARAMETERS while the Forward State is 1
// gets the objects of its fill range, up to the Largest Object its answer
// reports, on a fetch stream tagged with its Request ID, served from the
// LocalTrack's cursor as a FETCH is. They are data streams of the
// subscription: PUBLISH_DONE counts them (§9.9), and the subscription's
// end resets those still open (C088). The subscriber's STOP_SENDING on one
// ends that fill only.

// startFill opens the fill fetch stream that the message with Request ID
// id asks for with fill, its FILL_PARAMETERS, if the subscription is in
// Forward State 1 (§3.4.1). largest is the Largest Object that message's
// answer reported: the fill ends there, so that fill and subscription
// together deliver each object once. An empty fill range, or one starting
// past largest, opens nothing (§3.4).
func (ss *ServedSubscription) startFill(id uint64, fill *wire.Params, largest wire.Opt[wire.Location]) {
	t := ss.local.Load()
	if fill == nil || t == nil {
		return
	}
	p := ss.Params()
	if !forwardOf(&p) {
		return // FILL_PARAMETERS under Forward 0 opens none (§3.4.1)
	}
	fp := fillParams(&p, fill, trackGroupOrder(t.props))
	f, err := filter.NewFetch(&fp, largestOf(largest))
	if err != nil || f.Window().Empty() {
		return
	}
	desc := fp.GroupOrder.Value == wire.GroupOrderDescending
	w := newFetchWriter(ss.sess, id, desc, subscriberPriority(&fp), t.priority)
	// Ranked among the subscription's streams (§5.1.2 rules 3 and 4). A
	// fill without a SUBSCRIBER_PRIORITY of its own moves with the
	// subscription's by later updates; one with its own keeps it, under an
	// owner no request has (the Request IDs granted stay far below 2^63).
	w.owner = ss.rs.id
	if fill.SubscriberPriority.Set {
		w.owner = ^id
	} else {
		w.inherited = func() uint8 { p := ss.Params(); return subscriberPriority(&p) }
	}
	w.open = func(context.Context) (transport.SendStream, error) { return ss.openDataStream() }
	w.forget = ss.forgetDataStream
	w.cut = ss.cutDataStream
	release, ok := takeFetchSlot(ss.sess)
	if !ok {
		why := fmt.Errorf("moqt: more than %d fetches served at once", ss.sess.cfg.MaxServedFetches)
		w.over = func(error) {}
		// The fill is opened and reset (C089), keeping its FETCH_HEADER
		// like any cut stream, unless as many refused fills are being
		// reset already: then at once, so that a peer's REQUEST_UPDATEs
		// cannot make lingering streams pile up.
		done, keep := refuseFill(ss.sess)
		lingers := false
		cut := func(str transport.SendStream, code wire.ResetCode) {
			if !keep {
				ss.closeDataStream(str, code)
				return
			}
			lingers = true
			ss.cutDataStreamThen(str, code, done)
		}
		ss.sess.goroutines.Go(func() {
			w.failAfterHeader(wire.ResetExcessiveLoad, why, cut)
			if keep && !lingers {
				done()
			}
		})
		return
	}
	w.over = func(error) { release() }
	budget := fillBudgetOf(&fp, ss.sess.cfg.FillTimeout)
	cur := ss.sess.serving.cursor(t, f.Window(), desc)
	ss.sess.goroutines.Go(func() {
		defer release()
		if err := pumpFetch(ss.ctx, cur, f, w, budget); err != nil {
			ss.sess.log.Debug("moqt: fill", "event", "failed", "request_id", id, "err", err)
		}
	})
}

// fillParams is what a fill fetch stream serves by: the subscription's
// parameters p (subscriber priority, Location and range filters, group
// order, its default from the track) with those inside FILL_PARAMETERS
// in their place (§3.4, §9.20.16).
func fillParams(p, fill *wire.Params, trackOrder wire.GroupOrder) wire.Params {
	fp := wire.Params{SubscriberPriority: p.SubscriberPriority, LocationFilter: p.LocationFilter,
		GroupOrder: p.GroupOrder, RangeFilters: p.RangeFilters}
	mergeParams(&fp, fill) // a zero-length LOCATION_FILTER: the whole track
	fp.FillTimeout = fill.FillTimeout
	if fill.GroupOrder.Set {
		fp.GroupOrder = fill.GroupOrder
	}
	if !fp.GroupOrder.Set {
		fp.GroupOrder = wire.Some(trackOrder)
	}
	return fp
}

// applyPublishOK applies the subscriber's parameters a PUBLISH_OK carries
// on a draft where it does (draftRules.publishOKParams): they replace the
// PUBLISH's, those omitted taking their defaults (publishOKParams), and
// FORWARD and the filters are the subscriber's from now on (C013).
func (ss *ServedSubscription) applyPublishOK(ok *wire.Params) {
	largest := ss.largestNow()
	ss.mu.Lock()
	ss.params = publishOKParams(&ss.params, ok)
	if ss.filter != nil {
		_ = ss.filter.Update(publishOKChange(ok), largestOf(largest), ^uint64(0))
	}
	ss.subscriberSet = controlled{forward: true, locationFilter: true}
	ss.refreshView()
	ss.mu.Unlock()
	ss.refreshPriority()
}

// Goaway asks the subscriber to move this subscription alone (§9.2: a
// GOAWAY on its request stream): to subscribe again on a session at uri,
// or on this one when uri is empty, and to cancel this one. Only a server
// names a uri. Objects go on meanwhile; once timeout (not negative) has
// passed, none when 0, the subscription ends with PUBLISH_DONE GOING_AWAY
// if the subscriber has not cancelled it. It may be called once.
func (ss *ServedSubscription) Goaway(uri string, timeout time.Duration) error {
	switch {
	case uri != "" && ss.sess.isClient:
		return errors.New("moqt: a client's GOAWAY names no New Session URI (§9.2)")
	case len(uri) > wire.MaxURILen:
		return fmt.Errorf("moqt: a GOAWAY's New Session URI is %d bytes, more than %d (§9.2)", len(uri), wire.MaxURILen)
	case timeout < 0:
		return errors.New("moqt: a GOAWAY's Timeout is not negative")
	case ss.goaway.Swap(true):
		return errors.New("moqt: GOAWAY sent on this subscription already")
	}
	if err := ss.rs.write(&wire.Goaway{NewSessionURI: uri, Timeout: uint64(timeout.Milliseconds())}); err != nil {
		return err
	}
	if timeout > 0 {
		t := time.AfterFunc(timeout, func() { _ = ss.End(wire.DoneGoingAway, "moved by GOAWAY") })
		context.AfterFunc(ss.ctx, func() { t.Stop() })
	}
	return nil
}
