// Package filter decides which objects a subscription or fetch delivers
// (§3.3): Largest Object tracking (§3.1.3), Location filters (§3.3.1,
// §9.20.10), Range filters (§3.3.2, §8.6, §9.20.11–§9.20.15) and their
// combination with FORWARD (§3.3.3). The session applies them; no
// application calls them. Nothing here locks: each value is owned by its
// caller, which serializes access. Evaluating an object allocates nothing.
//
// It imports only the wire codec and the standard library.
package filter

import (
	"fmt"

	"github.com/moqt-go/moqt/wire"
)

// Error is a request the filters refuse, with the REQUEST_ERROR code to
// answer it with: INVALID_RANGE for a FETCH range that cannot be satisfied,
// INVALID_FILTER for Range filters beyond MAX_FILTER_RANGES.
type Error struct {
	Code   wire.RequestErrorCode
	Reason string
}

func (e *Error) Error() string { return "filter: " + e.Code.String() + ": " + e.Reason }

// maxID is 2^64−1, the largest Group or Object ID (§8.1).
const maxID = wire.MaxVarint

// LargestObject is a Track's Largest Object (§3.1.3): the largest Location
// whose first byte has been published or received through a subscription.
// The zero value means nothing has been published yet.
type LargestObject struct {
	loc   wire.Location
	known bool
}

// LargestAt returns a LargestObject already at l, for example from a
// LARGEST_OBJECT parameter (§9.20.18).
func LargestAt(l wire.Location) LargestObject { return LargestObject{loc: l, known: true} }

// Update records the first byte of an object at l being published or
// received (§3.1.3); Largest Object moves only if l is larger. It reports
// whether it moved. A relay also feeds it every upstream LARGEST_OBJECT
// value, so it holds the maximum of both (§9.20.18, C072).
func (lo *LargestObject) Update(l wire.Location) bool {
	if lo.known && !lo.loc.Less(l) {
		return false
	}
	lo.loc, lo.known = l, true
	return true
}

// Get returns Largest Object and whether anything has been published or
// received (§3.1.3).
func (lo LargestObject) Get() (wire.Location, bool) { return lo.loc, lo.known }

// Known reports whether anything has been published or received; when it
// has, LARGEST_OBJECT must be sent (§9.20.18, C016).
func (lo LargestObject) Known() bool { return lo.known }

// Param returns the value of the LARGEST_OBJECT parameter (§9.20.18):
// absent when nothing has been published.
func (lo LargestObject) Param() wire.Opt[wire.Location] {
	return wire.Opt[wire.Location]{Value: lo.loc, Set: lo.known}
}

// Next returns the Next Object (§3.1.3): {Largest.Group, Largest.Object+1},
// or {0, 0} when nothing has been published. When Largest.Object is 2^64−1
// the next Location is {Largest.Group+1, 0}, the same set of later
// Locations; at {2^64−1, 2^64−1} no later Location exists and Next returns
// Largest itself (a Next Object filter then passes nothing).
func (lo LargestObject) Next() wire.Location {
	l, _ := lo.next()
	return l
}

// next is Next, with ok false when no Location follows Largest Object.
func (lo LargestObject) next() (l wire.Location, ok bool) {
	switch {
	case !lo.known:
		return wire.Location{}, true
	case lo.loc.Object < maxID:
		return wire.Location{Group: lo.loc.Group, Object: lo.loc.Object + 1}, true
	case lo.loc.Group < maxID:
		return wire.Location{Group: lo.loc.Group + 1}, true
	}
	return lo.loc, false
}

// Window is a Location filter resolved against the Largest Object
// at the time the request was processed (§3.3.1, §9.20.10): the inclusive
// range of Locations that pass. The zero value passes every Location.
type Window struct {
	// Start is the first Location that passes.
	Start wire.Location
	// End is the last Location that passes, when Bounded. A filter that
	// names an EndGroup without an EndObject includes that whole group, so
	// End is then {EndGroup, 2^64−1}.
	End wire.Location
	// Bounded reports whether the window has an End; an open-ended
	// subscription has none.
	Bounded bool
	// none marks a window that nothing can pass because no Location follows
	// its start (a Next Object start at {2^64−1, 2^64−1}).
	none bool
}

// Contains reports whether an object at l passes the Location filter
// (§3.3.1).
func (w Window) Contains(l wire.Location) bool {
	return !w.none && !l.Less(w.Start) && !(w.Bounded && w.End.Less(l))
}

// Empty reports whether no Location can pass: the end lies before the
// start, or no Location follows a Next Object start. A subscription with such a filter is still valid (§3.3.1); it
// delivers nothing.
func (w Window) Empty() bool { return w.none || w.Bounded && w.End.Less(w.Start) }

// filterStart returns the start Location of a Location filter with at least
// one field (§9.20.10), and false when no Location can follow it.
//
// The relative form starts N groups before the Next Group, at
// {Largest.Group + 1 − N, 0}. With nothing published there is no
// Largest.Group; the Next Group is then read as group 0, where the Next
// Object {0, 0} lies (§3.1.3). N = 0 starts there, and any larger N falls
// below 0 and is clamped to 0, so every relative filter starts at {0, 0}.
// (Taking Largest.Group as 0 instead would start N = 0 at group 1 and miss
// group 0.) A computed group of 2^64 (N = 0 after group 2^64−1) is clamped
// to 2^64−1 (§9.20.10).
func filterStart(f wire.LocationFilter, largest LargestObject) (wire.Location, bool) {
	switch {
	case f.Fields == 1:
		l, ok := largest.Get()
		switch {
		case !ok:
			return wire.Location{}, true
		case f.StartGroup == 0:
			if l.Group == maxID {
				return wire.Location{Group: maxID}, true
			}
			return wire.Location{Group: l.Group + 1}, true
		case f.StartGroup-1 > l.Group:
			return wire.Location{}, true
		}
		return wire.Location{Group: l.Group - (f.StartGroup - 1)}, true
	case f.Fields == 2 && f.StartGroup == 0 && f.StartObject == 0:
		return largest.next()
	}
	return wire.Location{Group: f.StartGroup, Object: f.StartObject}, true
}

// filterEnd returns the requested end of a Location filter (§9.20.10), and
// false when it names none. EndGroup is already absolute in
// wire.LocationFilter.
func filterEnd(f wire.LocationFilter) (wire.Location, bool) {
	switch f.Fields {
	case 3:
		return wire.Location{Group: f.EndGroup, Object: maxID}, true
	case 4:
		return wire.Location{Group: f.EndGroup, Object: f.EndObject}, true
	}
	return wire.Location{}, false
}

// SubscriptionWindow resolves a subscription's Location filter (§3.3.1,
// §9.20.10) against the Largest Object when the SUBSCRIBE, PUBLISH or
// REQUEST_UPDATE is processed. Zero fields means unfiltered; without an
// end the window is open-ended. The result is always valid, even when it
// lies entirely before Largest Object (§3.3.1). Fields outside 0–4, which
// the decoder never produces, give a window that passes nothing.
func SubscriptionWindow(f wire.LocationFilter, largest LargestObject) Window {
	switch {
	case f.Fields == 0:
		return Window{}
	case f.Fields < 0 || f.Fields > 4:
		return Window{none: true}
	}
	var w Window
	var ok bool
	w.Start, ok = filterStart(f, largest)
	w.none = !ok
	w.End, w.Bounded = filterEnd(f)
	return w
}

// FetchWindow resolves a FETCH's Location filter (§3.3.1, §9.11,
// §9.20.10) against the Largest Object when the FETCH is processed. With
// zero fields the range is {0, 0} to Largest Object; without an end it
// ends at Largest Object, and a requested end beyond Largest Object is cut
// to it, since later objects are not retrieved (§9.11). End is the End
// Location for FETCH_OK (§9.12).
//
// It returns a *Error with INVALID_RANGE when nothing has been
// published or the start is after Largest Object (C093), and when the
// requested end precedes the start: that range cannot be satisfied
// (§12.3), and answering it would put an End Location before the Start
// Location in FETCH_OK (C096). A fill fetch (§3.4) uses the same rules;
// there the error means the fill range is empty and no fill fetch stream
// is opened.
func FetchWindow(f wire.LocationFilter, largest LargestObject) (Window, error) {
	l, ok := largest.Get()
	if !ok {
		return Window{none: true}, invalidRange("no objects have been published") // C093
	}
	if f.Fields < 0 || f.Fields > 4 {
		return Window{none: true}, invalidRange(fmt.Sprintf("location filter with %d fields", f.Fields))
	}
	w := Window{End: l, Bounded: true}
	if f.Fields > 0 {
		w.Start, ok = filterStart(f, largest)
		if !ok || l.Less(w.Start) {
			return Window{none: true}, invalidRange(fmt.Sprintf("start %v is after Largest Object %v", w.Start, l)) // C093
		}
	}
	if end, ok := filterEnd(f); ok {
		if end.Less(w.Start) {
			return Window{none: true}, invalidRange(fmt.Sprintf("end %v is before start %v", end, w.Start))
		}
		if end.Less(l) {
			w.End = end
		}
	}
	return w, nil
}

func invalidRange(reason string) *Error {
	return &Error{Code: wire.ReqInvalidRange, Reason: reason}
}

// Object is what the filters look at in an object (§11.1.1).
type Object struct {
	Location wire.Location
	// SubgroupID is the object's Subgroup ID, unless Datagram is set.
	SubgroupID uint64
	// Datagram reports the Datagram Forwarding Preference: the object has no
	// Subgroup ID (§2.2, §11.1.1).
	Datagram bool
	// PublisherPriority is the object's effective Publisher Priority (§5.1),
	// after any DEFAULT_PRIORITY inheritance.
	PublisherPriority uint8
	// Properties is the raw Object Properties block (§11.1.3): the
	// Key-Value-Pairs without their length, as the decoder returns it.
	Properties []byte
}

// Filter decides whether an object is delivered on a subscription or a
// fetch (§3.3.3): Pass = Forward AND Location filter AND Range filters,
// evaluated in any order; the publisher must forward only objects that
// pass (C027), so none from outside the requested range (C024). The
// caller owns a Filter and serializes access to it.
type Filter struct {
	forward bool
	loc     wire.LocationFilter // as requested; window is it resolved
	window  Window
	filters []wire.RangeFilter // in effect, owned; REQUEST_UPDATE merges into it
	all     RangeMatcher       // filters compiled, Track Property filters included
	ranges  RangeMatcher       // all without the dropped SetIDs: what Passes uses
	dropped setBits            // SetIDs whose Track Property filters failed (ForTrack)
}

// New returns the filter of a subscription from its SUBSCRIBE,
// PUBLISH or SUBSCRIBE_TRACKS parameters (§3.3): FORWARD (default 1,
// §9.20.19), LOCATION_FILTER resolved against largest, the Largest Object
// when the message is processed (§3.3.1), and the Range filters. A nil p
// passes everything. Check MAX_FILTER_RANGES first with CheckRanges.
func New(p *wire.Params, largest LargestObject) *Filter {
	f := &Filter{forward: true}
	if p == nil {
		return f
	}
	if p.Forward.Set {
		f.forward = p.Forward.Value
	}
	f.loc = p.LocationFilter.Value
	f.window = SubscriptionWindow(f.loc, largest)
	f.setRanges(mergeRangeFilters(nil, p.RangeFilters))
	return f
}

// NewFetch returns the filter of a FETCH (§9.11) from its parameters:
// the Location filter resolved with FetchWindow, whose INVALID_RANGE error
// it returns, and the Range filters. FETCH has no FORWARD parameter.
func NewFetch(p *wire.Params, largest LargestObject) (*Filter, error) {
	var lf wire.LocationFilter
	var rf []wire.RangeFilter
	if p != nil {
		lf, rf = p.LocationFilter.Value, p.RangeFilters
	}
	w, err := FetchWindow(lf, largest)
	if err != nil {
		return nil, err
	}
	f := &Filter{forward: true, loc: lf, window: w}
	f.setRanges(mergeRangeFilters(nil, rf))
	return f, nil
}

func (f *Filter) setRanges(fs []wire.RangeFilter) {
	f.filters = fs
	f.all = CompileRanges(fs)
	f.ranges = f.all.without(&f.dropped)
}

// Passes reports whether an object is to be delivered (§3.3.3, C024,
// C027). It allocates nothing.
func (f *Filter) Passes(meta Object) bool {
	return f.forward && f.window.Contains(meta.Location) && f.ranges.Match(&meta)
}

// Covers reports whether meta is inside the Location and Range filters,
// whatever the Forward State: what a subscriber accepts, since objects sent
// under a Forward State it has not heard of yet (a PUBLISH_STATE_NOTIFY
// still on its way) are the subscription's all the same.
func (f *Filter) Covers(meta Object) bool {
	return f.window.Contains(meta.Location) && f.ranges.Match(&meta)
}

// Subgroup is what is known of a subgroup none of whose objects has been
// seen: a publisher that will deliver none of them tells its subscribers
// with a header-only stream (§11.3.2).
type Subgroup struct {
	Group uint64
	ID    uint64 // its Subgroup ID
	// PublisherPriority is its effective Publisher Priority (§5.1).
	PublisherPriority uint8
	// FirstObject is the lowest Object ID it may hold: its Subgroup ID
	// when that is the ID of its first object (SUBGROUP_ID_MODE 1), else 0.
	FirstObject uint64
}

// MayPass reports whether an object of s could pass the filter (§3.3.3):
// Forward is 1; some Location of s.Group from s.FirstObject on is inside
// the Location filter; and the Range filters of some SetID hold for what
// is known of s, its Subgroup ID and Publisher Priority, with an Object ID
// from s.FirstObject on. Object Property filters, which need the object,
// are taken to hold. It errs on the side of true: each filter is asked
// alone, so Ranges of Object IDs that lie before the window's start in
// s.Group still count.
func (f *Filter) MayPass(s Subgroup) bool {
	if !f.forward || f.window.none || s.Group < f.window.Start.Group {
		return false
	}
	first := wire.Location{Group: s.Group, Object: s.FirstObject}
	if s.Group == f.window.Start.Group {
		first.Object = max(first.Object, f.window.Start.Object)
	}
	return f.window.Contains(first) && f.ranges.mayMatchSubgroup(&s)
}

// MatchesRanges reports whether meta passes the Range filters alone,
// whatever its Location.
func (f *Filter) MatchesRanges(meta Object) bool { return f.ranges.Match(&meta) }

// Forward reports the Forward State (§3.1, §9.20.19).
func (f *Filter) Forward() bool { return f.forward }

// Window returns the resolved Location filter (§3.3.1).
func (f *Filter) Window() Window { return f.window }

// CutsSubgroups reports whether f, if not nil, lets a subgroup's stream end
// with a FIN before the subgroup's last object: Range filters leave objects
// out, or the Location filter ends inside a group (§3.3, §11.3.2).
func (f *Filter) CutsSubgroups() bool {
	return f != nil && (f.RangeCount() > 0 || f.window.Bounded && f.window.End.Object != wire.MaxVarint)
}

// RangeCount returns the number of Ranges in the Range filters in effect,
// the figure MAX_FILTER_RANGES limits (§9.1.6).
func (f *Filter) RangeCount() int {
	n := 0
	for i := range f.filters {
		n += len(f.filters[i].Ranges)
	}
	return n
}

// MatchTrack reports whether a track with Track Properties props passes the
// TRACK_PROPERTY_FILTER parameters of a SUBSCRIBE_TRACKS (§4.3). See
// RangeMatcher.MatchTrack.
func (f *Filter) MatchTrack(props wire.KVList) bool { return f.all.MatchTrack(props) }

// ForTrack returns the filter for the subscription a SUBSCRIBE_TRACKS
// creates for one track (§4.3, §9.18.1), or false when the track does not
// pass its Track Property filters. The Location filter is resolved against
// largest, that track's Largest Object when its PUBLISH is sent. SetIDs
// whose Track Property filters fail for props stay dropped across later
// updates.
func (f *Filter) ForTrack(props wire.KVList, largest LargestObject) (*Filter, bool) {
	g := &Filter{forward: f.forward, loc: f.loc, window: SubscriptionWindow(f.loc, largest), dropped: f.dropped}
	failed := f.all.trackFailures(props)
	for i := range failed {
		g.dropped[i] |= failed[i]
	}
	g.setRanges(mergeRangeFilters(nil, f.filters))
	if g.ranges.none {
		return nil, false
	}
	return g, true
}

// Update applies the parameters of a REQUEST_UPDATE for the subscription
// (§9.5), or of a PUBLISH_STATE_NOTIFY (§9.10). Absent parameters leave
// their filter unchanged. FORWARD sets the Forward State. LOCATION_FILTER
// replaces the Location filter, resolved against largest, the Largest
// Object when the update is processed; with 0 fields it removes it
// (§9.20.10). A Range filter of some type replaces every filter of that
// type, and a Clear one removes them (§3.3.2). The Ranges then in effect,
// and those in effect for a fill fetch stream requested with
// FILL_PARAMETERS, must not exceed maxRanges (C026, §9.1.6); otherwise
// Update returns a *Error with INVALID_FILTER and leaves f
// unchanged. FILL_PARAMETERS is not retained (§9.20.16).
func (f *Filter) Update(u *wire.Params, largest LargestObject, maxRanges uint64) error {
	if u == nil {
		return nil
	}
	var merged []wire.RangeFilter
	if len(u.RangeFilters) > 0 {
		merged = mergeRangeFilters(f.filters, u.RangeFilters)
		if err := checkRanges(merged, nil, maxRanges); err != nil {
			return err
		}
	}
	if u.FillParameters != nil {
		base := f.filters
		if merged != nil {
			base = merged
		}
		if err := checkRanges(base, u.FillParameters.RangeFilters, maxRanges); err != nil {
			return err
		}
	}
	if u.Forward.Set {
		f.forward = u.Forward.Value
	}
	if u.LocationFilter.Set {
		f.loc = u.LocationFilter.Value
		f.window = SubscriptionWindow(f.loc, largest)
	}
	if len(u.RangeFilters) > 0 {
		f.setRanges(merged)
	}
	return nil
}
