package moqt

import (
	"errors"
	"fmt"
	"slices"

	"github.com/moqt-go/moqt/wire"
)

// This file decides which objects a subscription or fetch delivers (§3.3):
// Largest Object tracking (§3.1.3), Location filters (§3.3.1, §9.20.10),
// Range filters (§3.3.2, §8.6, §9.20.11–§9.20.15) and their combination
// with FORWARD (§3.3.3). Nothing here locks: each value is owned by its
// caller, which serializes access. Evaluating an object allocates nothing.

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

// LocationWindow is a Location filter resolved against the Largest Object
// at the time the request was processed (§3.3.1, §9.20.10): the inclusive
// range of Locations that pass. The zero value passes every Location.
type LocationWindow struct {
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
func (w LocationWindow) Contains(l wire.Location) bool {
	return !w.none && !l.Less(w.Start) && !(w.Bounded && w.End.Less(l))
}

// Empty reports whether no Location can pass: the end lies before the
// start, or no Location follows a Next Object start. A subscription with such a filter is still valid (§3.3.1); it
// delivers nothing.
func (w LocationWindow) Empty() bool { return w.none || w.Bounded && w.End.Less(w.Start) }

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
func SubscriptionWindow(f wire.LocationFilter, largest LargestObject) LocationWindow {
	switch {
	case f.Fields == 0:
		return LocationWindow{}
	case f.Fields < 0 || f.Fields > 4:
		return LocationWindow{none: true}
	}
	var w LocationWindow
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
// It returns a *RequestError with INVALID_RANGE when nothing has been
// published or the start is after Largest Object (C093), and when the
// requested end precedes the start: that range cannot be satisfied
// (§12.3), and answering it would put an End Location before the Start
// Location in FETCH_OK (C096). A fill fetch (§3.4) uses the same rules;
// there the error means the fill range is empty and no fill fetch stream
// is opened.
func FetchWindow(f wire.LocationFilter, largest LargestObject) (LocationWindow, error) {
	l, ok := largest.Get()
	if !ok {
		return LocationWindow{none: true}, invalidRange("no objects have been published") // C093
	}
	if f.Fields < 0 || f.Fields > 4 {
		return LocationWindow{none: true}, invalidRange(fmt.Sprintf("location filter with %d fields", f.Fields))
	}
	w := LocationWindow{End: l, Bounded: true}
	if f.Fields > 0 {
		w.Start, ok = filterStart(f, largest)
		if !ok || l.Less(w.Start) {
			return LocationWindow{none: true}, invalidRange(fmt.Sprintf("start %v is after Largest Object %v", w.Start, l)) // C093
		}
	}
	if end, ok := filterEnd(f); ok {
		if end.Less(w.Start) {
			return LocationWindow{none: true}, invalidRange(fmt.Sprintf("end %v is before start %v", end, w.Start))
		}
		if end.Less(l) {
			w.End = end
		}
	}
	return w, nil
}

func invalidRange(reason string) *RequestError {
	return &RequestError{Code: wire.ReqInvalidRange, Reason: reason}
}

// ObjectMeta is what the filters look at in an object (§11.1.1).
type ObjectMeta struct {
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

// rangeCond is one Range filter parameter, ready to evaluate.
type rangeCond struct {
	typ  wire.ParamType
	prop uint64       // property type, for the property filters
	rs   []wire.Range // ascending and disjoint
}

// rangeSet is the AND of the filter parameters sharing one SetID (§3.3.2).
type rangeSet struct {
	id    uint8
	conds []rangeCond // object filters (0x25–0x28)
	track []rangeCond // TRACK_PROPERTY_FILTER (0x29)
}

// RangeMatcher evaluates Range filters (§3.3.2, §8.6): an object matches a
// filter parameter if its value falls in any of its Ranges; parameters
// with the same SetID are AND'd and distinct SetIDs OR'd. With no filters
// everything matches. The zero value matches everything. It is immutable
// once compiled.
type RangeMatcher struct {
	sets []rangeSet // ascending SetID
	// none marks a matcher whose every SetID was dropped for failing its
	// Track Property filters: nothing matches.
	none bool
}

// CompileRangeFilters builds a RangeMatcher from Range filter parameters.
// A Clear filter (Length 0) is no filter (§8.6) and is skipped. A filter
// with a SetID but no Ranges matches nothing, since no Range holds the
// value. Validation (C025, C028, C030–C032) is the decoder's; a Property
// Type that is odd, which the decoder rejects, matches nothing, because
// odd types carry no integer value (§8.3). fs is copied.
func CompileRangeFilters(fs []wire.RangeFilter) RangeMatcher {
	var m RangeMatcher
	for i := range fs {
		f := &fs[i]
		if f.Clear {
			continue
		}
		j, found := slices.BinarySearchFunc(m.sets, f.SetID, func(s rangeSet, id uint8) int {
			return int(s.id) - int(id)
		})
		if !found {
			m.sets = slices.Insert(m.sets, j, rangeSet{id: f.SetID})
		}
		c := rangeCond{typ: f.Type, prop: f.PropertyType, rs: normalizeRanges(f.Ranges)}
		s := &m.sets[j]
		if f.Type == wire.ParamTrackPropertyFilter {
			s.track = append(s.track, c)
		} else {
			s.conds = append(s.conds, c)
		}
	}
	return m
}

// normalizeRanges returns a sorted copy of rs with overlapping and adjacent
// Ranges merged and empty ones dropped, so a value is found by binary
// search. Ranges are OR'd (§3.3.2), so this does not change the result.
func normalizeRanges(rs []wire.Range) []wire.Range {
	out := make([]wire.Range, 0, len(rs))
	for _, r := range rs {
		if !r.Open && r.End < r.Start {
			continue
		}
		if r.Open {
			r.End = maxID
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b wire.Range) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	n := 0
	for _, r := range out {
		if n > 0 {
			last := &out[n-1]
			if last.End == maxID || r.Start <= last.End+1 {
				last.End = max(last.End, r.End)
				last.Open = last.End == maxID
				continue
			}
		}
		r.Open = r.End == maxID
		out[n] = r
		n++
	}
	return out[:n:n]
}

// inRanges reports whether v falls in one of rs, which normalizeRanges
// prepared: the last Range starting at or before v is the only candidate.
func inRanges(rs []wire.Range, v uint64) bool {
	lo, hi := 0, len(rs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if rs[mid].Start <= v {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo > 0 && v <= rs[lo-1].End
}

// Match reports whether an object passes the Range filters (§3.3.2).
// TRACK_PROPERTY_FILTER parameters are not evaluated here: they select
// tracks, not objects (§3.3.2, §4.3), and count as satisfied; use ForTrack
// to drop the SetIDs whose track part fails for a given track.
func (m *RangeMatcher) Match(o *ObjectMeta) bool {
	if len(m.sets) == 0 {
		return !m.none
	}
	for i := range m.sets {
		if m.sets[i].matchObject(o) {
			return true
		}
	}
	return false
}

func (s *rangeSet) matchObject(o *ObjectMeta) bool {
	for i := range s.conds {
		if !s.conds[i].matchObject(o) {
			return false
		}
	}
	return true
}

// matchObject evaluates one object filter (§9.20.11–§9.20.14). A datagram
// object has no Subgroup ID, so it does not match a SUBGROUP_FILTER, just
// as an object lacking a property does not match an OBJECT_PROPERTY_FILTER.
func (c *rangeCond) matchObject(o *ObjectMeta) bool {
	switch c.typ {
	case wire.ParamSubgroupFilter:
		return !o.Datagram && inRanges(c.rs, o.SubgroupID)
	case wire.ParamObjectIDFilter:
		return inRanges(c.rs, o.Location.Object)
	case wire.ParamPriorityFilter:
		return inRanges(c.rs, uint64(o.PublisherPriority))
	case wire.ParamObjectPropertyFilter:
		return objectPropertyIn(o.Properties, c.prop, c.rs)
	}
	return false
}

// errFound stops a Key-Value-Pair walk once a match is found.
var errFound = errors.New("moqt: property found")

// objectPropertyIn reports whether the raw Object Properties block holds
// property typ with a value in rs, among the mutable properties or inside
// IMMUTABLE_PROPERTIES: processors must search both (§10.7). Any instance
// in range is enough. Types ascend within a block (they are delta-encoded,
// §8.3), so the walk stops past typ. The decoder has checked the block; an
// unparseable IMMUTABLE_PROPERTIES value makes the Track malformed (§10.7),
// which is the data plane's to report, and here only the pairs before the
// fault are searched.
func objectPropertyIn(block []byte, typ uint64, rs []wire.Range) bool {
	if typ%2 == 1 || len(block) == 0 {
		return false
	}
	found := false
	_ = wire.WalkKV(block, func(kv wire.KeyValue) error {
		switch {
		case kv.Type == typ:
			if inRanges(rs, kv.Value) {
				found = true
				return errFound
			}
		case kv.Type == wire.PropImmutableProperties:
			found = immutablePropertyIn(kv.Bytes, typ, rs)
			if found {
				return errFound
			}
		case kv.Type > typ && kv.Type > wire.PropImmutableProperties:
			return errFound
		}
		return nil
	})
	return found
}

// immutablePropertyIn searches the Key-Value-Pairs inside an
// IMMUTABLE_PROPERTIES value for property typ with a value in rs (§10.7).
// Nesting is not followed: an inner IMMUTABLE_PROPERTIES is malformed.
func immutablePropertyIn(inner []byte, typ uint64, rs []wire.Range) bool {
	found := false
	_ = wire.WalkKV(inner, func(kv wire.KeyValue) error {
		if kv.Type == typ && inRanges(rs, kv.Value) {
			found = true
			return errFound
		}
		if kv.Type > typ {
			return errFound
		}
		return nil
	})
	return found
}

// trackPropertyIn reports whether Track Properties hold property typ with a
// value in rs, among the properties or inside IMMUTABLE_PROPERTIES (§10.7).
func trackPropertyIn(props wire.KVList, typ uint64, rs []wire.Range) bool {
	if typ%2 == 1 {
		return false
	}
	for _, kv := range props {
		switch kv.Type {
		case typ:
			if inRanges(rs, kv.Value) {
				return true
			}
		case wire.PropImmutableProperties:
			if immutablePropertyIn(kv.Bytes, typ, rs) {
				return true
			}
		}
	}
	return false
}

// trackHolds reports whether every TRACK_PROPERTY_FILTER of s matches props.
func (s *rangeSet) trackHolds(props wire.KVList) bool {
	for _, c := range s.track {
		if !trackPropertyIn(props, c.prop, c.rs) {
			return false
		}
	}
	return true
}

// MatchTrack reports whether a track with Track Properties props passes the
// TRACK_PROPERTY_FILTER parameters (§3.3.2, §9.20.15), for SUBSCRIBE_TRACKS
// (§4.3): some SetID's Track Property filters all match (a SetID with none
// counts as matching). A track that fails gets no PUBLISH and no objects.
// With no filters every track passes.
func (m *RangeMatcher) MatchTrack(props wire.KVList) bool {
	if len(m.sets) == 0 {
		return true
	}
	for i := range m.sets {
		if m.sets[i].trackHolds(props) {
			return true
		}
	}
	return false
}

// ForTrack specializes m to one track of a SUBSCRIBE_TRACKS (§4.3): the
// SetIDs whose Track Property filters fail for props are dropped, since
// their AND is false for every object of the track, and the object filters
// of the others remain. It returns false, like MatchTrack, when the track
// does not pass at all; the matcher returned then matches nothing.
func (m *RangeMatcher) ForTrack(props wire.KVList) (RangeMatcher, bool) {
	failed := m.trackFailures(props)
	out := m.without(&failed)
	return out, !out.none
}

// setBits is a set of SetIDs.
type setBits [4]uint64

func (b *setBits) add(id uint8)      { b[id>>6] |= 1 << (id & 63) }
func (b *setBits) has(id uint8) bool { return b[id>>6]&(1<<(id&63)) != 0 }

// trackFailures returns the SetIDs whose Track Property filters fail for
// props.
func (m *RangeMatcher) trackFailures(props wire.KVList) setBits {
	var failed setBits
	for i := range m.sets {
		if !m.sets[i].trackHolds(props) {
			failed.add(m.sets[i].id)
		}
	}
	return failed
}

// without returns m minus the SetIDs in drop, with Track Property filters
// removed from the rest. If m had SetIDs and all are dropped, the result
// matches nothing: the OR of no terms is false.
func (m *RangeMatcher) without(drop *setBits) RangeMatcher {
	out := RangeMatcher{none: m.none}
	for _, s := range m.sets {
		if !drop.has(s.id) {
			out.sets = append(out.sets, rangeSet{id: s.id, conds: s.conds})
		}
	}
	if len(m.sets) > 0 && len(out.sets) == 0 {
		out.none = true
	}
	return out
}

// CheckFilterRanges enforces the peer's limit on Ranges (§3.3.2, §9.1.6,
// C026) for the parameters of a SUBSCRIBE, FETCH or SUBSCRIBE_TRACKS. It
// counts the Ranges of every Range filter in p, and separately those in
// effect for the fill fetch stream, whose FILL_PARAMETERS filters replace
// the subscription's filters of the same type (§3.4). With a limit of 0
// the peer must not send Range filters at all, so any filter that is not
// Clear is rejected even with no Ranges. The error is a *RequestError with
// INVALID_FILTER.
func CheckFilterRanges(p *wire.Params, limit uint64) error {
	if p == nil {
		return nil
	}
	if err := checkRanges(p.RangeFilters, nil, limit); err != nil {
		return err
	}
	if p.FillParameters != nil {
		return checkRanges(p.RangeFilters, p.FillParameters.RangeFilters, limit)
	}
	return nil
}

// checkRanges checks the filters that result from overlaying over on base
// (see mergeRangeFilters) against limit.
func checkRanges(base, over []wire.RangeFilter, limit uint64) error {
	n, present := 0, false
	count := func(f *wire.RangeFilter) {
		if !f.Clear {
			n += len(f.Ranges)
			present = true
		}
	}
	for i := range base {
		if !hasType(over, base[i].Type) {
			count(&base[i])
		}
	}
	for i := range over {
		count(&over[i])
	}
	switch {
	case limit == 0 && present:
		return &RequestError{Code: wire.ReqInvalidFilter, Reason: "range filter sent while MAX_FILTER_RANGES is 0"} // C026
	case uint64(n) > limit:
		return &RequestError{Code: wire.ReqInvalidFilter, Reason: fmt.Sprintf("%d ranges, more than MAX_FILTER_RANGES %d", n, limit)} // C026
	}
	return nil
}

func hasType(fs []wire.RangeFilter, t wire.ParamType) bool {
	for i := range fs {
		if fs[i].Type == t {
			return true
		}
	}
	return false
}

// mergeRangeFilters overlays over on base as REQUEST_UPDATE does
// (§3.3.2): a filter type present in over replaces every base filter of
// that type, and a Clear one removes them; types absent from over are
// unchanged. The result is a fresh copy.
func mergeRangeFilters(base, over []wire.RangeFilter) []wire.RangeFilter {
	var out []wire.RangeFilter
	for i := range base {
		if !base[i].Clear && !hasType(over, base[i].Type) {
			out = append(out, cloneRangeFilter(base[i]))
		}
	}
	for i := range over {
		if !over[i].Clear {
			out = append(out, cloneRangeFilter(over[i]))
		}
	}
	return out
}

func cloneRangeFilter(f wire.RangeFilter) wire.RangeFilter {
	f.Ranges = slices.Clone(f.Ranges)
	return f
}

// Filter decides whether an object is delivered on a subscription or a
// fetch (§3.3.3): Pass = Forward AND Location filter AND Range filters,
// evaluated in any order; the publisher must forward only objects that
// pass (C027), so none from outside the requested range (C024). The
// caller owns a Filter and serializes access to it.
type Filter struct {
	forward bool
	loc     wire.LocationFilter // as requested; window is it resolved
	window  LocationWindow
	filters []wire.RangeFilter // in effect, owned; REQUEST_UPDATE merges into it
	all     RangeMatcher       // filters compiled, Track Property filters included
	ranges  RangeMatcher       // all without the dropped SetIDs: what Passes uses
	dropped setBits            // SetIDs whose Track Property filters failed (ForTrack)
}

// NewFilter returns the filter of a subscription from its SUBSCRIBE,
// PUBLISH or SUBSCRIBE_TRACKS parameters (§3.3): FORWARD (default 1,
// §9.20.19), LOCATION_FILTER resolved against largest, the Largest Object
// when the message is processed (§3.3.1), and the Range filters. A nil p
// passes everything. Check MAX_FILTER_RANGES first with CheckFilterRanges.
func NewFilter(p *wire.Params, largest LargestObject) *Filter {
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

// NewFetchFilter returns the filter of a FETCH (§9.11) from its parameters:
// the Location filter resolved with FetchWindow, whose INVALID_RANGE error
// it returns, and the Range filters. FETCH has no FORWARD parameter.
func NewFetchFilter(p *wire.Params, largest LargestObject) (*Filter, error) {
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
	f.all = CompileRangeFilters(fs)
	f.ranges = f.all.without(&f.dropped)
}

// Passes reports whether an object is to be delivered (§3.3.3, C024,
// C027). It allocates nothing.
func (f *Filter) Passes(meta ObjectMeta) bool {
	return f.forward && f.window.Contains(meta.Location) && f.ranges.Match(&meta)
}

// Covers reports whether meta is inside the Location and Range filters,
// whatever the Forward State: what a subscriber accepts, since objects sent
// under a Forward State it has not heard of yet (a PUBLISH_STATE_NOTIFY
// still on its way) are the subscription's all the same.
func (f *Filter) Covers(meta ObjectMeta) bool {
	return f.window.Contains(meta.Location) && f.ranges.Match(&meta)
}

// Forward reports the Forward State (§3.1, §9.20.19).
func (f *Filter) Forward() bool { return f.forward }

// Window returns the resolved Location filter (§3.3.1).
func (f *Filter) Window() LocationWindow { return f.window }

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
// Update returns a *RequestError with INVALID_FILTER and leaves f
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
