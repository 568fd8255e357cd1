package wire

// LocationFilter is the value of the LOCATION_FILTER parameter (§9.20.10,
// §3.3.1). On the wire it is 0–4 vi64 fields whose count comes from the
// parameter's length; the count selects the form:
//
//	0 fields: no filter (in REQUEST_UPDATE: remove the filter)
//	1 field:  relative start, StartGroup groups before the Next Group
//	2 fields: StartGroup and StartObject; both 0 means the Next Object,
//	          otherwise an absolute open-ended start
//	3 fields: absolute start and EndGroup (whole end group included)
//	4 fields: absolute start, EndGroup and EndObject
//
// EndGroup is absolute here; the wire carries it as a delta from StartGroup.
type LocationFilter struct {
	Fields      int
	StartGroup  uint64
	StartObject uint64
	EndGroup    uint64
	EndObject   uint64
}

// NoLocationFilter is the empty filter: unfiltered, or removal in
// REQUEST_UPDATE.
func NoLocationFilter() LocationFilter { return LocationFilter{} }

// RelativeFilter starts n groups before the Next Group: n = 0 is the next
// group, n = 1 the current group.
func RelativeFilter(n uint64) LocationFilter {
	return LocationFilter{Fields: 1, StartGroup: n}
}

// NextObjectFilter starts at the Next Object (§3.1.3).
func NextObjectFilter() LocationFilter { return LocationFilter{Fields: 2} }

// StartFilter is open-ended from the absolute Location start. Start {0, 0}
// is encoded as the Next Object form by the spec, so it is not representable
// here; omit the filter instead (§9.20.10).
func StartFilter(start Location) LocationFilter {
	return LocationFilter{Fields: 2, StartGroup: start.Group, StartObject: start.Object}
}

// RangeFilterTo covers from start through the whole of endGroup.
func RangeFilterTo(start Location, endGroup uint64) LocationFilter {
	return LocationFilter{Fields: 3, StartGroup: start.Group, StartObject: start.Object, EndGroup: endGroup}
}

// RangeFilterToObject covers from start through end, inclusive.
func RangeFilterToObject(start, end Location) LocationFilter {
	return LocationFilter{Fields: 4, StartGroup: start.Group, StartObject: start.Object,
		EndGroup: end.Group, EndObject: end.Object}
}

// IsRelative reports whether the start depends on Largest Object: the
// relative-group form and the Next Object form.
func (f LocationFilter) IsRelative() bool {
	return f.Fields == 1 || f.Fields == 2 && f.StartGroup == 0 && f.StartObject == 0
}

// appendIn appends the length-prefixed value in the format of prof.
func (f LocationFilter) appendIn(prof *Profile, b []byte) ([]byte, error) {
	if prof.LocationFilter == FilterTyped {
		return f.appendTyped(prof, b)
	}
	return f.append(b)
}

func (f LocationFilter) append(b []byte) ([]byte, error) {
	if f.Fields < 0 || f.Fields > 4 {
		return b, violation("location filter with %d fields", f.Fields)
	}
	if f.Fields >= 3 && f.EndGroup < f.StartGroup {
		return b, violation("location filter ends at group %d before start group %d", f.EndGroup, f.StartGroup)
	}
	vals := [4]uint64{f.StartGroup, f.StartObject, f.EndGroup - f.StartGroup, f.EndObject}
	n := 0
	for _, v := range vals[:f.Fields] {
		n += VarintLen(v)
	}
	b = AppendVarint(b, uint64(n))
	for _, v := range vals[:f.Fields] {
		b = AppendVarint(b, v)
	}
	return b, nil
}

// locationFilterIn parses the length-prefixed value in the format of prof.
func (c *cursor) locationFilterIn(prof *Profile) (LocationFilter, error) {
	if prof.LocationFilter == FilterTyped {
		return c.typedLocationFilter()
	}
	return c.locationFilter()
}

func (c *cursor) locationFilter() (LocationFilter, error) {
	body, err := c.lenBytes("LOCATION_FILTER", MaxMessageBody)
	if err != nil {
		return LocationFilter{}, err
	}
	in := cursor{body}
	var vals [4]uint64
	var f LocationFilter
	for ; !in.empty(); f.Fields++ {
		if f.Fields == 4 {
			return LocationFilter{}, violation("LOCATION_FILTER has more than 4 fields")
		}
		if vals[f.Fields], err = in.varint("LOCATION_FILTER field"); err != nil {
			return LocationFilter{}, err
		}
	}
	f.StartGroup, f.StartObject, f.EndObject = vals[0], vals[1], vals[3]
	if f.Fields >= 3 {
		if vals[2] > MaxVarint-f.StartGroup {
			return LocationFilter{}, violation("LOCATION_FILTER end group overflows") // C029
		}
		f.EndGroup = f.StartGroup + vals[2]
	}
	return f, nil
}

// Range is one inclusive Start–End pair of a range filter (§8.6). Open
// means the range has no end; only the last range of a filter may be open.
type Range struct {
	Start uint64
	End   uint64
	Open  bool
}

// RangeFilter is one range filter parameter (§3.3.2, §8.6, §9.20.11–15).
// Filters with the same SetID are AND'd, distinct SetIDs OR'd; within a
// filter the Ranges are OR'd.
type RangeFilter struct {
	Type ParamType // ParamSubgroupFilter … ParamTrackPropertyFilter
	// Clear is the Length 0 form: no filter, which removes the filter in
	// REQUEST_UPDATE. The other fields are then unused.
	Clear        bool
	SetID        uint8
	PropertyType uint64 // object and track property filters only
	Ranges       []Range
}

func (f *RangeFilter) appendValue(b []byte) ([]byte, error) {
	if f.Clear {
		return b, nil
	}
	b = append(b, f.SetID)
	if f.Type.hasPropertyType() {
		b = AppendVarint(b, f.PropertyType)
	}
	var prevEnd uint64
	for i, r := range f.Ranges {
		if r.Start < prevEnd || r.End < r.Start && !r.Open {
			return b, violation("%s ranges must ascend", f.Type)
		}
		b = AppendVarint(b, r.Start-prevEnd)
		if r.Open {
			if i != len(f.Ranges)-1 {
				return b, violation("%s: only the last range may be open", f.Type)
			}
			break
		}
		b = AppendVarint(b, r.End-r.Start)
		prevEnd = r.End
	}
	return b, nil
}

// rangeFilter parses the value of a range filter of type t. Malformed
// encodings are protocol errors; the request-level failures of §3.3.2 and
// §8.6 (overflow, priority over 255, odd property type) are returned as
// *RejectError with INVALID_FILTER after the whole value has been read.
func (c *cursor) rangeFilter(t ParamType) (RangeFilter, error) {
	f := RangeFilter{Type: t}
	body, err := c.lenBytes(t.String(), MaxMessageBody)
	if err != nil {
		return f, err
	}
	if len(body) == 0 {
		f.Clear = true
		return f, nil
	}
	in := cursor{body}
	f.SetID, _ = in.uint8("SetID")
	if t.hasPropertyType() {
		if f.PropertyType, err = in.varint("range filter property type"); err != nil {
			return f, err
		}
	}
	var rej error
	var prevEnd uint64
	for !in.empty() {
		d, err := in.varint("range filter start")
		if err != nil {
			return f, err
		}
		r := Range{Start: prevEnd + d}
		if d > MaxVarint-prevEnd && rej == nil {
			rej = reject(ReqInvalidFilter, "%s range start overflows", t) // C028
		}
		if in.empty() {
			r.Open = true
		} else {
			d, err := in.varint("range filter end")
			if err != nil {
				return f, err
			}
			if d > MaxVarint-r.Start && rej == nil {
				rej = reject(ReqInvalidFilter, "%s range end overflows", t) // C028
			}
			r.End = r.Start + d
			prevEnd = r.End
		}
		if t == ParamPriorityFilter && (r.Start > 255 || !r.Open && r.End > 255) && rej == nil {
			rej = reject(ReqInvalidFilter, "PRIORITY_FILTER value above 255") // C030
		}
		f.Ranges = append(f.Ranges, r)
	}
	if t.hasPropertyType() && f.PropertyType%2 == 1 && rej == nil {
		rej = reject(ReqInvalidFilter, "%s property type %d is odd", t, f.PropertyType) // C031, C032
	}
	return f, rej
}
