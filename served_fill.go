package moqt

import (
	"context"
	"fmt"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

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
	release, ok := ss.sess.takeFetchSlot()
	if !ok {
		why := fmt.Errorf("moqt: more than %d fetches served at once", ss.sess.cfg.MaxServedFetches)
		w.over = func(error) {}
		// The fill is opened and reset (C089), keeping its FETCH_HEADER
		// like any cut stream, unless as many refused fills are being
		// reset already: then at once, so that a peer's REQUEST_UPDATEs
		// cannot make lingering streams pile up.
		done, keep := ss.sess.refuseFill()
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
