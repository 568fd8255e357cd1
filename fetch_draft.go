package moqt

import (
	"github.com/moqt-go/moqt/wire"
)

// The FETCH range in drafts 18 and 19 (docs/drafts.md §1, §6). The public
// API and the serving machinery speak draft 21: a FETCH's range is its
// LOCATION_FILTER, FETCH_OK's End Location is inclusive. A session of a
// draft with wire.Profile.JoiningFetch converts at the wire: a Standalone
// FETCH (Fetch Type 0x1) carries Start and End Location fields, End being
// "the last Object plus one, Object 0 = the whole End Group", and FETCH_OK's
// End Location uses the same encoding (18 §10.12.1, §10.13).

// profile is the wire profile of the session's negotiated draft.
func (s *Session) profile() *wire.Profile { return s.version.Profile() }

// wholeGroup is the Object ID of an inclusive end that covers the whole of
// its group: filter.Window's End for a filter with an EndGroup and no
// EndObject.
const wholeGroup = wire.MaxVarint

// endPlusOne converts an inclusive end to 18's encoding: {G, O+1}, or
// {G, 0} for the whole group (18 §10.12.1).
func endPlusOne(end wire.Location) wire.Location {
	if end.Object == wholeGroup {
		return wire.Location{Group: end.Group}
	}
	return wire.Location{Group: end.Group, Object: end.Object + 1}
}

// endInclusive converts an End Location of 18's encoding to the inclusive
// end: {G, 0} is the whole group G, {G, O} ends at O − 1.
func endInclusive(end wire.Location) wire.Location {
	if end.Object == 0 {
		return wire.Location{Group: end.Group, Object: wholeGroup}
	}
	return wire.Location{Group: end.Group, Object: end.Object - 1}
}

// standaloneFilter is the LOCATION_FILTER equivalent of a draft 18/19
// Standalone FETCH's Start and End Location: an absolute range to the
// whole End Group (End.Object 0) or to End.Object − 1. An End before Start
// comes out as a filter whose end precedes its start, which FetchWindow
// refuses with INVALID_RANGE like the same draft 21 filter.
func standaloneFilter(start, end wire.Location) wire.LocationFilter {
	if end.Object == 0 {
		return wire.RangeFilterTo(start, end.Group)
	}
	return wire.RangeFilterToObject(start, endInclusive(end))
}

// standaloneRange is the Start and End Location (18's encoding) of a
// Standalone FETCH with the LOCATION_FILTER lf. Without a filter, or
// without an end, the range runs to the last possible group, which the
// publisher cuts at its Largest Object (18 §10.12.3). A relative start
// (StartGroup alone, or the Next Object) depends on the publisher's
// Largest Object and has no Standalone form: a *wire.NotInDraftError.
func standaloneRange(v wire.Version, lf wire.Opt[wire.LocationFilter]) (start, end wire.Location, err error) {
	f := lf.Value
	open := wire.Location{Group: wire.MaxVarint}
	switch {
	case !lf.Set || f.Fields == 0:
		return wire.Location{}, open, nil
	case f.IsRelative():
		return start, end, &wire.NotInDraftError{What: "a FETCH whose range starts relative to the Largest Object", Version: v}
	}
	start = wire.Location{Group: f.StartGroup, Object: f.StartObject}
	switch f.Fields {
	case 2:
		return start, open, nil
	case 3:
		return start, wire.Location{Group: f.EndGroup}, nil
	}
	return start, endPlusOne(wire.Location{Group: f.EndGroup, Object: f.EndObject}), nil
}

// wireFetchEnd is the End Location FETCH_OK carries for the inclusive end.
func (s *Session) wireFetchEnd(end wire.Location) wire.Location {
	if s.profile().FetchEndPlusOne {
		return endPlusOne(end)
	}
	return end
}

// fetchEndOf is the inclusive end of the End Location FETCH_OK carried.
func (s *Session) fetchEndOf(end wire.Location) wire.Location {
	if s.profile().FetchEndPlusOne {
		return endInclusive(end)
	}
	return end
}

// wireEndOfRange is the End of Range marker the draft has for e: 18 and 19
// have no End of Timed-Out Range, and report such a range as unknown
// (docs/drafts.md §5, §6).
func wireEndOfRange(p *wire.Profile, e wire.EndOfRange) wire.EndOfRange {
	if e == wire.EndOfTimedOutRange && !p.TimedOutRange {
		return wire.EndOfUnknownRange
	}
	return e
}
