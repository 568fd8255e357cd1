package moqt

import (
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
	// joinID, on 18/19, is the Request ID of the Joining FETCH that
	// serves the SUBSCRIBE's fill (subscription_join.go): its slot's key
	// and its data stream's FETCH_HEADER Request ID.
	joinID wire.Opt[uint64]
}

// initialID is the Request ID the SUBSCRIBE's fill stream carries: the
// SUBSCRIBE's, subID (21 §3.4), or its Joining FETCH's. Subscription.mu is
// held.
func (f *subFill) initialID(subID uint64) uint64 {
	if f.joinID.Set {
		return f.joinID.Value
	}
	return subID
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
	// joinErr is why its Joining FETCH failed before SUBSCRIBE_OK was
	// applied (subscription_join.go).
	joinErr error
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
		desc = trackGroupOrder(sub.properties) == wire.GroupOrderDescending
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

// covers reports whether the ended fill delivered l or reported it as not
// existing: its range, up to where it ended, without the ranges it
// reported unknown or timed out, where the subscription's copy is the
// only one.
func (s *fillSlot) covers(l wire.Location) bool {
	switch {
	case !s.window.Contains(l):
		return false
	case !s.fin && (!s.hasLast || s.before(s.last, l)):
		return false
	}
	for _, g := range s.gaps {
		if (!g.hasAfter || s.before(g.after, l)) && !s.before(g.end, l) {
			return false
		}
	}
	return true
}

// before reports whether a comes before b in the fill's order: groups in
// its Group Order, objects by Object ID within a group (§9.11).
func (s *fillSlot) before(a, b wire.Location) bool {
	switch {
	case a.Group == b.Group:
		return a.Object < b.Object
	case s.desc:
		return a.Group > b.Group
	}
	return a.Group < b.Group
}
