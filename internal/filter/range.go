package filter

import (
	"fmt"
	"slices"

	"github.com/moqt-go/moqt/wire"
)

// Range filters (§3.3.2, §8.6, §9.20.11–§9.20.15): compiling them, matching
// objects and tracks against them, merging REQUEST_UPDATE's into those in
// effect, and counting their Ranges against MAX_FILTER_RANGES.

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

// CompileRanges builds a RangeMatcher from Range filter parameters.
// A Clear filter (Length 0) is no filter (§8.6) and is skipped. A filter
// with a SetID but no Ranges matches nothing, since no Range holds the
// value. Validation (C025, C028, C030–C032) is the decoder's; a Property
// Type that is odd, which the decoder rejects, matches nothing, because
// odd types carry no integer value (§8.3). fs is copied.
func CompileRanges(fs []wire.RangeFilter) RangeMatcher {
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
func (m *RangeMatcher) Match(o *Object) bool {
	return m.anySet(func(s *rangeSet) bool { return s.matchObject(o) })
}

// anySet reports whether some SetID's conditions hold by holds (SetIDs are
// alternatives, §3.3.2); with none, whether the matcher lets everything
// through.
func (m *RangeMatcher) anySet(holds func(*rangeSet) bool) bool {
	if len(m.sets) == 0 {
		return !m.none
	}
	for i := range m.sets {
		if holds(&m.sets[i]) {
			return true
		}
	}
	return false
}

func (s *rangeSet) matchObject(o *Object) bool {
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
func (c *rangeCond) matchObject(o *Object) bool {
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

// mayMatchSubgroup reports whether an object of sg could match the Range
// filters: some SetID's conditions on what sg tells (Subgroup ID, Publisher
// Priority, an Object ID from sg.FirstObject on) hold; Object Property
// conditions, unknown without the object, count as holding where an
// object could meet them (an even Property Type).
func (m *RangeMatcher) mayMatchSubgroup(sg *Subgroup) bool {
	return m.anySet(func(s *rangeSet) bool { return s.mayMatchSubgroup(sg) })
}

func (s *rangeSet) mayMatchSubgroup(sg *Subgroup) bool {
	for i := range s.conds {
		c := &s.conds[i]
		var ok bool
		switch c.typ {
		case wire.ParamSubgroupFilter:
			ok = inRanges(c.rs, sg.ID)
		case wire.ParamObjectIDFilter:
			// Normalized: the last Range holds the largest IDs.
			ok = len(c.rs) > 0 && c.rs[len(c.rs)-1].End >= sg.FirstObject
		case wire.ParamPriorityFilter:
			ok = inRanges(c.rs, uint64(sg.PublisherPriority))
		case wire.ParamObjectPropertyFilter:
			ok = c.prop%2 == 0 && len(c.rs) > 0
		}
		if !ok {
			return false
		}
	}
	return true
}

// objectPropertyIn reports whether the raw Object Properties block holds
// property typ with a value in rs, among the mutable properties or inside
// IMMUTABLE_PROPERTIES: processors must search both (§10.7). Any instance
// in range is enough. The decoder has checked the block; an unparseable
// IMMUTABLE_PROPERTIES value makes the Track malformed (§10.7), which is
// the data plane's to report, and here only the pairs before the fault are
// searched (wire.EachProperty).
func objectPropertyIn(block []byte, typ uint64, rs []wire.Range) bool {
	if typ%2 == 1 {
		return false
	}
	found := false
	wire.EachProperty(block, typ, func(kv wire.KeyValue, _ bool) bool {
		found = inRanges(rs, kv.Value)
		return !found
	})
	return found
}

// TrackPropertyIn reports whether Track Properties hold property typ with a
// value in rs, among the properties or inside IMMUTABLE_PROPERTIES (§10.7).
// Any instance in range is enough.
func TrackPropertyIn(props wire.KVList, typ uint64, rs []wire.Range) bool {
	if typ%2 == 1 {
		return false
	}
	found := false
	props.EachProperty(typ, func(kv wire.KeyValue, _ bool) bool {
		found = inRanges(rs, kv.Value)
		return !found
	})
	return found
}

// trackHolds reports whether every TRACK_PROPERTY_FILTER of s matches props.
func (s *rangeSet) trackHolds(props wire.KVList) bool {
	for _, c := range s.track {
		if !TrackPropertyIn(props, c.prop, c.rs) {
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

// CheckRanges enforces the peer's limit on Ranges (§3.3.2, §9.1.6,
// C026) for the parameters of a SUBSCRIBE, FETCH or SUBSCRIBE_TRACKS. It
// counts the Ranges of every Range filter in p, and separately those in
// effect for the fill fetch stream, whose FILL_PARAMETERS filters replace
// the subscription's filters of the same type (§3.4). With a limit of 0
// the peer must not send Range filters at all, so any filter that is not
// Clear is rejected even with no Ranges. The error is a *Error with
// INVALID_FILTER.
func CheckRanges(p *wire.Params, limit uint64) error {
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
		return &Error{Code: wire.ReqInvalidFilter, Reason: "range filter sent while MAX_FILTER_RANGES is 0"} // C026
	case uint64(n) > limit:
		return &Error{Code: wire.ReqInvalidFilter, Reason: fmt.Sprintf("%d ranges, more than MAX_FILTER_RANGES %d", n, limit)} // C026
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
