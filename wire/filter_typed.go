package wire

// The Subscription Filter of draft 18 (§5.1.2, parameter SUBSCRIPTION_FILTER)
// and Location Filter of draft 19 (§5.1.2, LOCATION_FILTER): a typed value,
// not 21's field count. The codec keeps one LocationFilter value in 21's
// terms and maps it:
//
//	0x1 Next Group Start          = RelativeFilter(0)
//	0x2 Largest Object            = NextObjectFilter()
//	0x3 AbsoluteStart {0,0}       = NoLocationFilter() ("equivalent to an
//	                                unfiltered subscription")
//	0x3 AbsoluteStart {G,O}       = StartFilter({G,O})
//	0x4 AbsoluteRange {G,O}, Δ    = RangeFilterTo({G,O}, G+Δ)
//
// A relative start more than zero groups back, and an end Object, have no
// 18/19 form.

// Filter Types of 18/19 §5.1.2.
const (
	filterNextGroupStart = 0x1
	filterLargestObject  = 0x2
	filterAbsoluteStart  = 0x3
	filterAbsoluteRange  = 0x4
)

func (f LocationFilter) appendTyped(prof *Profile, b []byte) ([]byte, error) {
	var vals []uint64
	switch {
	case f.Fields == 0:
		vals = []uint64{filterAbsoluteStart, 0, 0}
	case f.Fields == 1 && f.StartGroup == 0:
		vals = []uint64{filterNextGroupStart}
	case f.Fields == 2 && f.StartGroup == 0 && f.StartObject == 0:
		vals = []uint64{filterLargestObject}
	case f.Fields == 2:
		vals = []uint64{filterAbsoluteStart, f.StartGroup, f.StartObject}
	case f.Fields == 3:
		if f.EndGroup < f.StartGroup {
			return b, violation("location filter ends at group %d before start group %d", f.EndGroup, f.StartGroup)
		}
		vals = []uint64{filterAbsoluteRange, f.StartGroup, f.StartObject, f.EndGroup - f.StartGroup}
	case f.Fields == 1:
		return b, prof.notIn("a location filter starting groups before the current one")
	case f.Fields == 4:
		return b, prof.notIn("a location filter ending at an object")
	default:
		return b, violation("location filter with %d fields", f.Fields)
	}
	n := 0
	for _, v := range vals {
		n += VarintLen(v)
	}
	b = AppendVarint(b, uint64(n))
	for _, v := range vals {
		b = AppendVarint(b, v)
	}
	return b, nil
}

func (c *cursor) typedLocationFilter() (LocationFilter, error) {
	body, err := c.lenBytes("LOCATION_FILTER", MaxMessageBody)
	if err != nil {
		return LocationFilter{}, err
	}
	in := cursor{body}
	typ, err := in.varint("filter type")
	if err != nil {
		return LocationFilter{}, err
	}
	var f LocationFilter
	switch typ {
	case filterNextGroupStart:
		f = RelativeFilter(0)
	case filterLargestObject:
		f = NextObjectFilter()
	case filterAbsoluteStart, filterAbsoluteRange:
		start, err := in.location("filter start location")
		if err != nil {
			return LocationFilter{}, err
		}
		f = StartFilter(start)
		if typ == filterAbsoluteStart && start == (Location{}) {
			f = NoLocationFilter()
		}
		if typ == filterAbsoluteRange {
			d, err := in.varint("filter end group delta")
			if err != nil {
				return LocationFilter{}, err
			}
			if d > MaxVarint-start.Group {
				return LocationFilter{}, violation("LOCATION_FILTER end group overflows")
			}
			f = RangeFilterTo(start, start.Group+d)
		}
	default:
		return LocationFilter{}, violation("LOCATION_FILTER filter type 0x%x", typ)
	}
	if err := in.done("LOCATION_FILTER"); err != nil {
		return LocationFilter{}, err
	}
	return f, nil
}
