package moqt

import (
	"context"
	"errors"
	"time"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// A subscription's fill fetch streams (§3.4, §3.4.1). A SUBSCRIBE or
// REQUEST_UPDATE carrying FILL_PARAMETERS asks for one, tagged with that
// message's Request ID; the ID is registered with the session's fetch
// routes (fetch_route.go) before the message leaves. Arrived streams queue
// here for AcceptFill or ReadObject (subscription_arrival.go, subscription_arrival_fill.go), whichever the
// application uses first: the other then gets none.

// subFill is the fill state of a Subscription, guarded by Subscription.mu.
type subFill struct {
	slots  map[uint64]*fillSlot  // by Request ID, the fills asked for
	queue  []*Fetch              // arrived fill streams not yet taken
	open   map[*fetchStream]bool // delivered streams not yet ended, for the stall watchdog
	signal chan struct{}         // closed and replaced when queue grows
	mode   fillMode
	// initial is the SUBSCRIBE's fill, when SUBSCRIBE_OK promised one:
	// ReadObject yields it before the subscription's own objects.
	initial *fillSlot
	// started is set once SUBSCRIBE_OK has been applied to the fills: a
	// fill stream arriving later is no longer held.
	started bool
}

type fillMode uint8

const (
	fillUndecided fillMode = iota
	fillByAccept           // AcceptFill takes the streams
	fillByRead             // ReadObject takes them
)

// fillSlot is one fill asked for.
type fillSlot struct {
	id     uint64
	params *wire.Params // the FILL_PARAMETERS
	// base is the subscription's parameters as the publisher applies them
	// when it processes the message: those of the SUBSCRIBE, or, for a
	// REQUEST_UPDATE, with every update sent so far overlaid. The fill
	// inherits what FILL_PARAMETERS leaves out, its Location filter among
	// them (§3.4).
	base    wire.Params
	arrived bool
	// window bounds the fill's Locations (the zero Window passes all) and
	// desc is its Group Order; set for the initial fill at SUBSCRIBE_OK.
	window filter.Window
	desc   bool
	// For the initial fill, owned by ReadObject's caller (arrival.next):
	// deadline for the stream to open, the last Location yielded, and
	// whether it ended with its FIN (then it covered its whole window).
	deadline time.Time
	ended    bool
	hasLast  bool
	last     wire.Location
	fin      bool
	// gaps are the ranges it reported as unknown or timed out
	// (§11.4.1.2), the first maxFillGaps of them: it delivered nothing
	// there, so the subscription's objects there are not dropped.
	gaps []fillGap
}

// fillGap is a range a fill did not deliver: the Locations after after
// (from the fill's start, without hasAfter) up to end, in the fill's order.
type fillGap struct {
	after    wire.Location
	hasAfter bool
	end      wire.Location
}

// maxFillGaps bounds the gaps remembered of a fill. A subscription's
// object in a gap past them is taken as covered, and dropped.
const maxFillGaps = 64

// errFillsTaken is AcceptFill's error once ReadObject reads the fills.
var errFillsTaken = errors.New("moqt: the subscription's fills are read by ReadObject")

// askFillLocked registers a fill asked for by the message with Request ID
// id, before it is sent, and after a REQUEST_UPDATE is queued in
// sub.updates. sub.mu is held.
func (sub *Subscription) askFillLocked(id uint64, p *wire.Params) *fillSlot {
	if sub.fill.slots == nil {
		sub.fill.slots = map[uint64]*fillSlot{}
	}
	slot := &fillSlot{id: id, params: p, base: sub.params}
	for _, u := range sub.updates.pending {
		mergeParams(&slot.base, u.params)
	}
	sub.fill.slots[id] = slot
	sub.sess.fetches.add(id, sub)
	return slot
}

// takeFetchStream is the route of the subscription's fill streams.
func (sub *Subscription) takeFetchStream(r *fetchStream) bool {
	sub.mu.Lock()
	slot := sub.fill.slots[r.id]
	// Checked under sub.mu: endData closes dataDone before stopFills
	// takes the lock, so a stream queued here is always stopped with the
	// rest.
	if slot == nil || slot.arrived || sub.dataEnded() {
		sub.mu.Unlock()
		return false
	}
	slot.arrived = true
	// A fill stream is one of the subscription's data streams, which
	// PUBLISH_DONE's Stream Count includes (§9.9).
	sub.streamsSeen++
	defer sub.noteStream()
	if !sub.fill.started && !sub.byPublish {
		// Before SUBSCRIBE_OK: held, within Config.MaxPendingStreams.
		// Beyond it the stream is stopped, and still queued, ended, so
		// that the fill's reader learns of its end at once rather than
		// waiting for it.
		if r.hold = sub.sess.reserveHold(); r.hold == nil {
			r.err = errHeldStreams
			defer r.stop(wire.ResetExcessiveLoad) // after sub.mu is released
		}
	}
	defer sub.mu.Unlock()
	f := &Fetch{sess: sub.sess}
	f.data.init()
	f.data.r, f.data.answered = r, true
	close(f.data.ready)
	f.data.window, f.data.desc = slot.window, slot.desc
	if slot.id != sub.rs.id {
		f.data.window, f.data.desc = fillWindowLocked(sub, slot, false)
	}
	f.data.malformed = sub.malformedTrack
	r.watch.clock = &sub.stall
	r.watch.touched.Store(sub.stall.now())
	r.onEnd = func() { sub.fillEnded(r) }
	if sub.fill.open == nil {
		sub.fill.open = map[*fetchStream]bool{}
	}
	sub.fill.open[r] = true
	sub.watchStallsLocked()
	sub.fill.queue = append(sub.fill.queue, f)
	if sub.fill.signal != nil {
		close(sub.fill.signal)
		sub.fill.signal = nil
	}
	return true
}

// fillWindowLocked resolves a fill's range and Group Order (§3.4): its
// LOCATION_FILTER, or the subscription's, evaluated as a FETCH's against
// the Largest Object, which only SUBSCRIBE_OK gives exactly (initial). A
// later fill's range depends on the Largest Object when the publisher
// processed the REQUEST_UPDATE, which its answer may not have told yet: it
// is bounded below only, by an absolute start. sub.mu is held.
func fillWindowLocked(sub *Subscription, slot *fillSlot, initial bool) (filter.Window, bool) {
	p := slot.params
	lf := slot.base.LocationFilter
	if p.LocationFilter.Set {
		lf = p.LocationFilter
	}
	order := slot.base.GroupOrder
	if p.GroupOrder.Set {
		order = p.GroupOrder
	}
	desc := order.Set && order.Value == wire.GroupOrderDescending
	if !order.Set {
		if kv, ok := sub.properties.Get(wire.PropDefaultPublisherGroupOrder); ok {
			desc = kv.Value == uint64(wire.GroupOrderDescending)
		}
	}
	if initial {
		// A range the publisher would refuse as a FETCH's comes back
		// Empty: no stream is expected for it.
		w, _ := filter.FetchWindow(lf.Value, largestOf(sub.largest))
		return w, desc
	}
	start, known := fetchStart(lf)
	if !known {
		start = wire.Location{}
	}
	return filter.Window{Start: start}, desc
}

// startFill applies SUBSCRIBE_OK to the initial fill: whether one comes
// (Forward 1 and a fill range that is not empty, §3.4, §3.4.1), its range,
// and how long ReadObject waits for it; held streams are released.
func (sub *Subscription) startFill() {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.fill.started = true
	slot := sub.fill.slots[sub.rs.id]
	if slot == nil || sub.byPublish {
		return
	}
	w, desc := fillWindowLocked(sub, slot, true)
	slot.desc = desc
	if forwardOf(&sub.params) && !w.Empty() && sub.largest.Set {
		slot.window = w
		slot.deadline = time.Now().Add(sub.sess.cfg.FillWait)
		sub.fill.initial = slot
	}
	for _, f := range sub.fill.queue {
		f.data.mu.Lock()
		if f.data.r.id == slot.id {
			f.data.window, f.data.desc = slot.window, slot.desc
		}
		f.data.r.hold.release()
		f.data.mu.Unlock()
	}
}

// forgetFills drops the fills' routes: streams for them that come later
// are stopped (fetch_route.go).
func (sub *Subscription) forgetFills() {
	sub.mu.Lock()
	ids := make([]uint64, 0, len(sub.fill.slots))
	for id := range sub.fill.slots {
		ids = append(ids, id)
	}
	sub.mu.Unlock()
	for _, id := range ids {
		sub.sess.fetches.remove(id)
	}
}

// fillEnded forgets a fill stream that ended.
func (sub *Subscription) fillEnded(r *fetchStream) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	delete(sub.fill.open, r)
}

// fillsStalledLocked counts the fill streams left waiting with data since
// before cutoff, as checkStalls counts subgroup streams. sub.mu is held.
func (sub *Subscription) fillsStalledLocked(cutoff int64) int {
	n := 0
	for r := range sub.fill.open {
		if r.watch.stalled(cutoff) {
			n++
		}
	}
	return n
}

// stopFills stops the subscription's fill streams, taken or not, with
// code, and forgets its fills: the subscription no longer receives.
func (sub *Subscription) stopFills(code wire.ResetCode) {
	sub.mu.Lock()
	open := sub.fill.open
	sub.fill.open = nil
	queued := sub.fill.queue
	sub.fill.queue = nil
	sub.mu.Unlock()
	sub.forgetFills()
	for r := range open {
		r.stop(code)
	}
	for _, f := range queued {
		f.data.r.stop(code)
	}
}

// stopUntakenFills stops the fill streams still queued once the data
// plane has ended for good, unless ReadObject reads the fills: its reader
// takes every queued one at the end, and reports each.
func (sub *Subscription) stopUntakenFills() {
	sub.mu.Lock()
	var queued []*Fetch
	if sub.fill.mode != fillByRead {
		queued, sub.fill.queue = sub.fill.queue, nil
	}
	sub.mu.Unlock()
	for _, f := range queued {
		f.data.r.stop(wire.ResetCancelled)
	}
}

// AcceptFill returns the subscription's next fill fetch stream (§3.4), as a
// Fetch whose ReadObject and Close work as a FETCH's; its FETCH_OK fields
// are unset, and it has no Update. A fill the publisher could not serve
// arrives reset (§3.4.1): its ReadObject returns the *StreamError; one
// that came before SUBSCRIBE_OK with Config.MaxPendingStreams streams
// already held was stopped, and its ReadObject says so. Closing
// one stops only that stream; the subscription goes on. After the
// subscription's data plane ends, AcceptFill returns the subscription's
// error. Use AcceptFill or ReadObject, not both: once ReadObject has
// started it takes the fills, and AcceptFill fails; once AcceptFill has
// been called, ReadObject yields no fill objects.
func (sub *Subscription) AcceptFill(ctx context.Context) (*Fetch, error) {
	for {
		sub.mu.Lock()
		if sub.fill.mode == fillByRead {
			sub.mu.Unlock()
			return nil, errFillsTaken
		}
		sub.fill.mode = fillByAccept
		f, sig := sub.nextFillLocked()
		sub.mu.Unlock()
		if f != nil {
			return f, nil
		}
		select {
		case <-sig:
		case <-sub.dataDone:
			sub.mu.Lock()
			f, _ = sub.nextFillLocked()
			sub.mu.Unlock()
			if f != nil {
				return f, nil
			}
			return nil, sub.Err()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// nextFillLocked takes the oldest queued fill, or returns the channel that
// signals the next. sub.mu is held.
func (sub *Subscription) nextFillLocked() (*Fetch, <-chan struct{}) {
	if len(sub.fill.queue) > 0 {
		f := sub.fill.queue[0]
		sub.fill.queue = sub.fill.queue[1:]
		f.data.r.watch.take()
		return f, nil
	}
	if sub.fill.signal == nil {
		sub.fill.signal = make(chan struct{})
	}
	return nil, sub.fill.signal
}
