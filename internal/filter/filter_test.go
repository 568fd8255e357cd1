package filter

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

const maxU = uint64(1<<64 - 1)

func at(g, o uint64) wire.Location { return wire.Location{Group: g, Object: o} }

// props encodes Object Properties (§11.1.3) for Object.Properties.
func props(t testing.TB, l wire.KVList) []byte {
	t.Helper()
	b, err := l.Append(nil)
	require.NoError(t, err)
	return b
}

func requireCode(t *testing.T, err error, code wire.RequestErrorCode) {
	t.Helper()
	var re *Error
	require.True(t, errors.As(err, &re), "want *Error, got %v", err)
	assert.Equal(t, code, re.Code)
}

func TestLargestObjectUpdate(t *testing.T) {
	tests := []struct {
		name    string
		updates []wire.Location
		moved   []bool
		want    wire.Location
		known   bool
		next    wire.Location
	}{
		{name: "nothing published", known: false, next: at(0, 0)},
		{name: "first object", updates: []wire.Location{at(0, 0)}, moved: []bool{true}, want: at(0, 0), known: true, next: at(0, 1)},
		{name: "larger object moves", updates: []wire.Location{at(3, 7), at(3, 8), at(4, 0)}, moved: []bool{true, true, true}, want: at(4, 0), known: true, next: at(4, 1)},
		{name: "smaller or equal does not", updates: []wire.Location{at(5, 3), at(5, 2), at(4, 9), at(5, 3)}, moved: []bool{true, false, false, false}, want: at(5, 3), known: true, next: at(5, 4)},
		{name: "object ID at 2^64-1", updates: []wire.Location{at(7, maxU)}, moved: []bool{true}, want: at(7, maxU), known: true, next: at(8, 0)},
		{name: "last Location", updates: []wire.Location{at(maxU, maxU)}, moved: []bool{true}, want: at(maxU, maxU), known: true, next: at(maxU, maxU)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var lo LargestObject
			for i, l := range tt.updates {
				assert.Equal(t, tt.moved[i], lo.Update(l), "update %d to %v", i, l)
			}
			got, known := lo.Get()
			assert.Equal(t, tt.known, known)
			assert.Equal(t, tt.known, lo.Known())
			assert.Equal(t, wire.Opt[wire.Location]{Value: tt.want, Set: tt.known}, lo.Param())
			if tt.known {
				assert.Equal(t, tt.want, got)
			}
			assert.Equal(t, tt.next, lo.Next())
		})
	}
	assert.Equal(t, at(2, 5), LargestAt(at(2, 4)).Next())
}

func TestLocationFilterSubscriptionWindow(t *testing.T) {
	none := LargestObject{}
	l53 := LargestAt(at(5, 3))
	tests := []struct {
		name    string
		f       wire.LocationFilter
		largest LargestObject
		start   wire.Location
		end     wire.Location
		bounded bool
		empty   bool
		in, out []wire.Location
	}{
		{name: "no filter", f: wire.NoLocationFilter(), largest: l53,
			in: []wire.Location{at(0, 0), at(5, 3), at(maxU, maxU)}},
		{name: "relative N=0 is the next group", f: wire.RelativeFilter(0), largest: l53, start: at(6, 0),
			in: []wire.Location{at(6, 0), at(100, 9)}, out: []wire.Location{at(5, 3), at(5, 4), at(5, maxU)}},
		{name: "relative N=1 is the current group", f: wire.RelativeFilter(1), largest: l53, start: at(5, 0),
			in: []wire.Location{at(5, 0), at(5, 2), at(6, 0)}, out: []wire.Location{at(4, maxU)}},
		{name: "relative N=2", f: wire.RelativeFilter(2), largest: l53, start: at(4, 0),
			in: []wire.Location{at(4, 0)}, out: []wire.Location{at(3, 9)}},
		{name: "relative N=6 reaches group 0", f: wire.RelativeFilter(6), largest: l53, start: at(0, 0),
			in: []wire.Location{at(0, 0)}},
		{name: "relative N=7 clamps at 0", f: wire.RelativeFilter(7), largest: l53, start: at(0, 0),
			in: []wire.Location{at(0, 0)}},
		{name: "relative N=2^64-1 clamps at 0", f: wire.RelativeFilter(maxU), largest: l53, start: at(0, 0),
			in: []wire.Location{at(0, 0)}},
		{name: "relative N=0 clamps at 2^64-1", f: wire.RelativeFilter(0), largest: LargestAt(at(maxU, 3)), start: at(maxU, 0),
			in: []wire.Location{at(maxU, 0)}, out: []wire.Location{at(maxU-1, maxU)}},
		{name: "relative N=0 nothing published", f: wire.RelativeFilter(0), largest: none, start: at(0, 0),
			in: []wire.Location{at(0, 0), at(1, 0)}},
		{name: "relative N=1 nothing published", f: wire.RelativeFilter(1), largest: none, start: at(0, 0),
			in: []wire.Location{at(0, 0)}},
		{name: "relative N=big nothing published", f: wire.RelativeFilter(1 << 40), largest: none, start: at(0, 0),
			in: []wire.Location{at(0, 0)}},
		{name: "next object", f: wire.NextObjectFilter(), largest: l53, start: at(5, 4),
			in: []wire.Location{at(5, 4), at(6, 0)}, out: []wire.Location{at(5, 3), at(5, 0), at(4, 9)}},
		{name: "next object nothing published", f: wire.NextObjectFilter(), largest: none, start: at(0, 0),
			in: []wire.Location{at(0, 0), at(9, 9)}},
		{name: "next object after object 2^64-1", f: wire.NextObjectFilter(), largest: LargestAt(at(5, maxU)), start: at(6, 0),
			in: []wire.Location{at(6, 0)}, out: []wire.Location{at(5, maxU)}},
		{name: "next object after the last Location", f: wire.NextObjectFilter(), largest: LargestAt(at(maxU, maxU)),
			start: at(maxU, maxU), empty: true, out: []wire.Location{at(maxU, maxU), at(0, 0)}},
		{name: "absolute start", f: wire.StartFilter(at(7, 2)), largest: l53, start: at(7, 2),
			in: []wire.Location{at(7, 2), at(maxU, 0)}, out: []wire.Location{at(7, 1), at(6, 9)}},
		{name: "absolute start with 2 fields, group 0", f: wire.StartFilter(at(0, 1)), largest: l53, start: at(0, 1),
			in: []wire.Location{at(0, 1)}, out: []wire.Location{at(0, 0)}},
		{name: "absolute start and end group", f: wire.RangeFilterTo(at(3, 1), 5), largest: l53,
			start: at(3, 1), end: at(5, maxU), bounded: true,
			in: []wire.Location{at(3, 1), at(5, 0), at(5, maxU)}, out: []wire.Location{at(3, 0), at(6, 0)}},
		{name: "absolute start {0,0} with end group is not next object", f: wire.RangeFilterTo(at(0, 0), 0), largest: l53,
			start: at(0, 0), end: at(0, maxU), bounded: true,
			in: []wire.Location{at(0, 0)}, out: []wire.Location{at(1, 0)}},
		{name: "absolute start and end object", f: wire.RangeFilterToObject(at(3, 1), at(5, 2)), largest: l53,
			start: at(3, 1), end: at(5, 2), bounded: true,
			in: []wire.Location{at(3, 1), at(4, 7), at(5, 2)}, out: []wire.Location{at(3, 0), at(5, 3)}},
		{name: "entirely before Largest Object is valid", f: wire.RangeFilterToObject(at(3, 1), at(5, 2)), largest: LargestAt(at(100, 0)),
			start: at(3, 1), end: at(5, 2), bounded: true,
			in: []wire.Location{at(4, 0)}, out: []wire.Location{at(100, 1)}},
		{name: "end object before start object", f: wire.LocationFilter{Fields: 4, StartGroup: 5, StartObject: 10, EndGroup: 5, EndObject: 3},
			largest: l53, start: at(5, 10), end: at(5, 3), bounded: true, empty: true,
			out: []wire.Location{at(5, 3), at(5, 5), at(5, 10)}},
		{name: "fields out of range", f: wire.LocationFilter{Fields: 5}, largest: l53, empty: true,
			out: []wire.Location{at(0, 0), at(6, 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := SubscriptionWindow(tt.f, tt.largest)
			assert.Equal(t, tt.start, w.Start, "start")
			assert.Equal(t, tt.bounded, w.Bounded, "bounded")
			if tt.bounded {
				assert.Equal(t, tt.end, w.End, "end")
			}
			assert.Equal(t, tt.empty, w.Empty(), "empty")
			for _, l := range tt.in {
				assert.True(t, w.Contains(l), "%v should pass", l)
			}
			for _, l := range tt.out {
				assert.False(t, w.Contains(l), "%v should not pass", l)
			}
		})
	}
}

func TestLocationFilterFetchWindow(t *testing.T) {
	l53 := LargestAt(at(5, 3))
	tests := []struct {
		name       string
		f          wire.LocationFilter
		largest    LargestObject
		start, end wire.Location
		err        bool
	}{
		{name: "no filter, nothing published", f: wire.NoLocationFilter(), err: true},
		{name: "absolute, nothing published", f: wire.StartFilter(at(0, 1)), err: true},
		{name: "no filter covers {0,0} to Largest", f: wire.NoLocationFilter(), largest: l53, start: at(0, 0), end: at(5, 3)},
		{name: "no end ends at Largest", f: wire.StartFilter(at(2, 0)), largest: l53, start: at(2, 0), end: at(5, 3)},
		{name: "start at Largest", f: wire.StartFilter(at(5, 3)), largest: l53, start: at(5, 3), end: at(5, 3)},
		{name: "start after Largest", f: wire.StartFilter(at(5, 4)), largest: l53, err: true},
		{name: "start in a later group", f: wire.StartFilter(at(6, 0)), largest: l53, err: true},
		{name: "whole end group", f: wire.RangeFilterTo(at(2, 0), 3), largest: l53, start: at(2, 0), end: at(3, maxU)},
		{name: "whole end group of Largest is cut", f: wire.RangeFilterTo(at(2, 0), 5), largest: l53, start: at(2, 0), end: at(5, 3)},
		{name: "end object", f: wire.RangeFilterToObject(at(2, 0), at(4, 6)), largest: l53, start: at(2, 0), end: at(4, 6)},
		{name: "end beyond Largest is cut", f: wire.RangeFilterToObject(at(2, 0), at(9, 9)), largest: l53, start: at(2, 0), end: at(5, 3)},
		{name: "end before start", f: wire.LocationFilter{Fields: 4, StartGroup: 3, StartObject: 4, EndGroup: 3, EndObject: 2}, largest: l53, err: true},
		{name: "relative N=1", f: wire.RelativeFilter(1), largest: l53, start: at(5, 0), end: at(5, 3)},
		{name: "relative N=3", f: wire.RelativeFilter(3), largest: l53, start: at(3, 0), end: at(5, 3)},
		{name: "relative N=big clamps at 0", f: wire.RelativeFilter(maxU), largest: l53, start: at(0, 0), end: at(5, 3)},
		{name: "relative N=0 starts after Largest", f: wire.RelativeFilter(0), largest: l53, err: true},
		{name: "next object starts after Largest", f: wire.NextObjectFilter(), largest: l53, err: true},
		{name: "fields out of range", f: wire.LocationFilter{Fields: -1}, largest: l53, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := FetchWindow(tt.f, tt.largest)
			if tt.err {
				requireCode(t, err, wire.ReqInvalidRange) // C093
				assert.False(t, w.Contains(at(0, 0)))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.start, w.Start, "start")
			assert.Equal(t, tt.end, w.End, "end")
			require.True(t, w.Bounded)
			assert.False(t, w.Empty())
			assert.True(t, w.Contains(tt.start))
			assert.True(t, w.Contains(tt.end))
			assert.False(t, w.Contains(at(5, 4)), "never beyond Largest Object")
		})
	}
}

// rf is shorthand for a Range filter parameter.
func rf(typ wire.ParamType, set uint8, ranges ...wire.Range) wire.RangeFilter {
	return wire.RangeFilter{Type: typ, SetID: set, Ranges: ranges}
}

func rng(start, end uint64) wire.Range { return wire.Range{Start: start, End: end} }
func from(start uint64) wire.Range     { return wire.Range{Start: start, Open: true} }

func TestRangeFilterTypes(t *testing.T) {
	const app = 0x78 // application-private, even (§8.4)
	immutable := func(l wire.KVList) wire.KeyValue {
		return wire.KeyValue{Type: wire.PropImmutableProperties, Bytes: props(t, l)}
	}
	propFilter := wire.RangeFilter{Type: wire.ParamObjectPropertyFilter, PropertyType: app, Ranges: []wire.Range{rng(10, 20)}}
	tests := []struct {
		name string
		f    wire.RangeFilter
		meta Object
		want bool
	}{
		{"subgroup in range", rf(wire.ParamSubgroupFilter, 0, rng(2, 4)), Object{SubgroupID: 4}, true},
		{"subgroup below", rf(wire.ParamSubgroupFilter, 0, rng(2, 4)), Object{SubgroupID: 1}, false},
		{"subgroup above", rf(wire.ParamSubgroupFilter, 0, rng(2, 4)), Object{SubgroupID: 5}, false},
		{"datagram has no subgroup", rf(wire.ParamSubgroupFilter, 0, rng(0, maxU)), Object{Datagram: true}, false},
		{"object ID in range", rf(wire.ParamObjectIDFilter, 0, rng(0, 0)), Object{Location: at(9, 0)}, true},
		{"object ID out of range", rf(wire.ParamObjectIDFilter, 0, rng(0, 0)), Object{Location: at(0, 1)}, false},
		{"object ID of a datagram", rf(wire.ParamObjectIDFilter, 0, rng(3, 3)), Object{Location: at(0, 3), Datagram: true}, true},
		{"priority in range", rf(wire.ParamPriorityFilter, 0, rng(0, 127)), Object{PublisherPriority: 127}, true},
		{"priority out of range", rf(wire.ParamPriorityFilter, 0, rng(0, 127)), Object{PublisherPriority: 128}, false},
		{"priority 255 open range", rf(wire.ParamPriorityFilter, 0, from(200)), Object{PublisherPriority: 255}, true},
		{"property present in range", propFilter,
			Object{Properties: props(t, wire.KVList{{Type: app, Value: 15}})}, true},
		{"property present out of range", propFilter,
			Object{Properties: props(t, wire.KVList{{Type: app, Value: 21}})}, false},
		{"property absent", propFilter,
			Object{Properties: props(t, wire.KVList{{Type: 0x3C, Value: 15}, {Type: 0x7A, Value: 15}})}, false},
		{"no properties at all", propFilter, Object{}, false},
		{"odd type of the same number is not the property", wire.RangeFilter{Type: wire.ParamObjectPropertyFilter, PropertyType: app,
			Ranges: []wire.Range{rng(0, maxU)}}, Object{Properties: props(t, wire.KVList{{Type: app + 1, Bytes: []byte{15}}})}, false},
		{"property inside immutable properties", propFilter,
			Object{Properties: props(t, wire.KVList{{Type: 0x02, Value: 1}, immutable(wire.KVList{{Type: app, Value: 10}})})}, true},
		{"property inside immutable out of range", propFilter,
			Object{Properties: props(t, wire.KVList{immutable(wire.KVList{{Type: app, Value: 9}})})}, false},
		{"property after immutable properties", propFilter,
			Object{Properties: props(t, wire.KVList{immutable(wire.KVList{{Type: 0x3C, Value: 1}}), {Type: app, Value: 20}})}, true},
		{"property type below immutable, only inside", wire.RangeFilter{Type: wire.ParamObjectPropertyFilter, PropertyType: 0x04,
			Ranges: []wire.Range{rng(7, 7)}}, Object{Properties: props(t, wire.KVList{immutable(wire.KVList{{Type: 0x04, Value: 7}})})}, true},
		{"property type below a smaller mutable one, inside immutable", wire.RangeFilter{Type: wire.ParamObjectPropertyFilter, PropertyType: 0x04,
			Ranges: []wire.Range{rng(7, 7)}}, Object{Properties: props(t, wire.KVList{{Type: 0x06, Value: 1}, immutable(wire.KVList{{Type: 0x04, Value: 7}})})}, true},
		{"any instance in range", propFilter,
			Object{Properties: props(t, wire.KVList{{Type: app, Value: 1}, {Type: app, Value: 12}})}, true},
		{"mutable out of range, immutable in range", propFilter,
			Object{Properties: props(t, wire.KVList{immutable(wire.KVList{{Type: app, Value: 11}}), {Type: app, Value: 99}})}, true},
		{"malformed immutable contents do not match", propFilter,
			Object{Properties: props(t, wire.KVList{{Type: wire.PropImmutableProperties, Bytes: []byte{0x78}}})}, false},
		{"odd property type in filter never matches", wire.RangeFilter{Type: wire.ParamObjectPropertyFilter, PropertyType: 0x0B,
			Ranges: []wire.Range{rng(0, maxU)}}, Object{Properties: props(t, wire.KVList{immutable(nil)})}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := CompileRanges([]wire.RangeFilter{tt.f})
			assert.Equal(t, tt.want, m.Match(&tt.meta))
		})
	}
}

func TestRangeFilterSetIDSemantics(t *testing.T) {
	meta := func(sub, obj uint64, prio uint8) Object {
		return Object{Location: at(1, obj), SubgroupID: sub, PublisherPriority: prio}
	}
	tests := []struct {
		name    string
		filters []wire.RangeFilter
		pass    []Object
		fail    []Object
	}{
		{name: "no filters match everything", pass: []Object{meta(0, 0, 0), meta(maxU, maxU, 255), {Datagram: true}}},
		{name: "clear filter is no filter", filters: []wire.RangeFilter{{Type: wire.ParamSubgroupFilter, Clear: true}},
			pass: []Object{meta(9, 9, 9)}},
		{name: "ranges are OR'd within a filter",
			filters: []wire.RangeFilter{rf(wire.ParamObjectIDFilter, 0, rng(0, 1), rng(5, 6))},
			pass:    []Object{meta(0, 0, 0), meta(0, 1, 0), meta(0, 5, 0), meta(0, 6, 0)},
			fail:    []Object{meta(0, 2, 0), meta(0, 4, 0), meta(0, 7, 0)}},
		{name: "same SetID is AND",
			filters: []wire.RangeFilter{rf(wire.ParamSubgroupFilter, 3, rng(0, 0)), rf(wire.ParamPriorityFilter, 3, rng(0, 10))},
			pass:    []Object{meta(0, 0, 10)},
			fail:    []Object{meta(1, 0, 10), meta(0, 0, 11)}},
		{name: "distinct SetIDs are OR",
			filters: []wire.RangeFilter{rf(wire.ParamSubgroupFilter, 0, rng(0, 0)), rf(wire.ParamPriorityFilter, 1, rng(0, 10))},
			pass:    []Object{meta(0, 0, 200), meta(7, 0, 10), meta(0, 0, 0)},
			fail:    []Object{meta(1, 0, 11)}},
		{name: "(A and B) or (C and D)",
			filters: []wire.RangeFilter{
				rf(wire.ParamSubgroupFilter, 0, rng(0, 0)), rf(wire.ParamObjectIDFilter, 0, rng(0, 9)),
				rf(wire.ParamSubgroupFilter, 255, rng(1, 1)), rf(wire.ParamPriorityFilter, 255, rng(64, 64)),
			},
			pass: []Object{meta(0, 9, 0), meta(1, 100, 64)},
			fail: []Object{meta(0, 10, 64), meta(1, 0, 63), meta(2, 0, 64)}},
		{name: "two filters of one type in one SetID are AND (different property types)",
			filters: []wire.RangeFilter{
				{Type: wire.ParamObjectPropertyFilter, SetID: 2, PropertyType: 0x78, Ranges: []wire.Range{rng(1, 1)}},
				{Type: wire.ParamObjectPropertyFilter, SetID: 2, PropertyType: 0x7A, Ranges: []wire.Range{rng(2, 2)}},
			},
			pass: []Object{{Properties: props(t, wire.KVList{{Type: 0x78, Value: 1}, {Type: 0x7A, Value: 2}})}},
			fail: []Object{{Properties: props(t, wire.KVList{{Type: 0x78, Value: 1}})}, {Properties: props(t, wire.KVList{{Type: 0x7A, Value: 2}})}}},
		{name: "a filter with no Ranges matches nothing",
			filters: []wire.RangeFilter{rf(wire.ParamSubgroupFilter, 0)},
			fail:    []Object{meta(0, 0, 0), meta(maxU, 0, 0)}},
		{name: "a filter with no Ranges only fails its own SetID",
			filters: []wire.RangeFilter{rf(wire.ParamSubgroupFilter, 0), rf(wire.ParamObjectIDFilter, 1, rng(3, 3))},
			pass:    []Object{meta(0, 3, 0)},
			fail:    []Object{meta(0, 4, 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := CompileRanges(tt.filters)
			for _, o := range tt.pass {
				assert.True(t, m.Match(&o), "%+v should match", o)
			}
			for _, o := range tt.fail {
				assert.False(t, m.Match(&o), "%+v should not match", o)
			}
		})
	}
}

// TestRangeFilterFromWire decodes Range filters with the wire decoder,
// including the §8.6 example and an open-ended last Range.
func TestRangeFilterFromWire(t *testing.T) {
	tests := []struct {
		name     string
		value    []byte // OBJECTID_FILTER value after its Length
		in, out  []uint64
		openLast bool
	}{
		// §8.6: ranges 3-5 and 10-15 encode as Start=3, End=2, Start=5, End=5.
		{name: "spec example", value: []byte{0x00, 3, 2, 5, 5},
			in: []uint64{3, 4, 5, 10, 15}, out: []uint64{0, 2, 6, 9, 16, maxU}},
		{name: "open-ended last range", value: []byte{0x00, 3, 2, 5},
			in: []uint64{3, 5, 10, 11, 1 << 40, maxU}, out: []uint64{2, 6, 9}, openLast: true},
		{name: "single open range from 0", value: []byte{0x00, 0},
			in: []uint64{0, maxU}, openLast: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := []byte{1, byte(wire.ParamObjectIDFilter), byte(len(tt.value))}
			p, err := wire.ParseParams(append(b, tt.value...), wire.InSubscribe)
			require.NoError(t, err)
			require.Len(t, p.RangeFilters, 1)
			rs := p.RangeFilters[0].Ranges
			assert.Equal(t, tt.openLast, rs[len(rs)-1].Open)
			f := New(&p, LargestObject{})
			for _, o := range tt.in {
				assert.True(t, f.Passes(Object{Location: at(0, o)}), "object %d should pass", o)
			}
			for _, o := range tt.out {
				assert.False(t, f.Passes(Object{Location: at(0, o)}), "object %d should not pass", o)
			}
		})
	}
}

// TestRangeFilterNormalize checks the sorted, merged form used for binary
// search against a direct reading of the Ranges, on unsorted, overlapping
// and adjacent Ranges that a local caller may build.
func TestRangeFilterNormalize(t *testing.T) {
	naive := func(rs []wire.Range, v uint64) bool {
		for _, r := range rs {
			if v >= r.Start && (r.Open || v <= r.End) {
				return true
			}
		}
		return false
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		n := r.IntN(6)
		rs := make([]wire.Range, n)
		for j := range rs {
			s := r.Uint64N(40)
			rs[j] = wire.Range{Start: s, End: s + r.Uint64N(8) - 2, Open: r.IntN(10) == 0}
			if r.IntN(20) == 0 {
				rs[j].Start, rs[j].End = maxU-r.Uint64N(3), maxU
			}
		}
		norm := normalizeRanges(rs)
		for k := 1; k < len(norm); k++ {
			require.Less(t, norm[k-1].End+1, norm[k].Start, "case %d: %v not disjoint and sorted", i, norm)
		}
		for _, v := range []uint64{0, 1, 2, 5, 17, 39, 40, 45, 47, 48, 60, maxU - 3, maxU - 2, maxU - 1, maxU} {
			require.Equal(t, naive(rs, v), inRanges(norm, v), "case %d: ranges %v value %d", i, rs, v)
		}
		for v := range uint64(50) {
			require.Equal(t, naive(rs, v), inRanges(norm, v), "case %d: ranges %v value %d", i, rs, v)
		}
	}
}

func TestTrackPropertyFilter(t *testing.T) {
	const kind = 0x7C
	track := func(v uint64) wire.KVList { return wire.KVList{{Type: 0x0E, Value: 128}, {Type: kind, Value: v}} }
	trackImm := func(v uint64) wire.KVList {
		return wire.KVList{{Type: wire.PropImmutableProperties, Bytes: props(t, wire.KVList{{Type: kind, Value: v}})}}
	}
	tpf := func(set uint8, ranges ...wire.Range) wire.RangeFilter {
		return wire.RangeFilter{Type: wire.ParamTrackPropertyFilter, SetID: set, PropertyType: kind, Ranges: ranges}
	}
	t.Run("match", func(t *testing.T) {
		tests := []struct {
			name    string
			filters []wire.RangeFilter
			props   wire.KVList
			want    bool
		}{
			{"no filters", nil, nil, true},
			{"in range", []wire.RangeFilter{tpf(0, rng(1, 2))}, track(2), true},
			{"out of range", []wire.RangeFilter{tpf(0, rng(1, 2))}, track(3), false},
			{"absent", []wire.RangeFilter{tpf(0, rng(0, maxU))}, wire.KVList{{Type: 0x0E, Value: 1}}, false},
			{"no properties", []wire.RangeFilter{tpf(0, from(0))}, nil, false},
			{"inside immutable properties", []wire.RangeFilter{tpf(0, rng(1, 2))}, trackImm(1), true},
			{"inside immutable out of range", []wire.RangeFilter{tpf(0, rng(1, 2))}, trackImm(5), false},
			{"OR across SetIDs", []wire.RangeFilter{tpf(0, rng(1, 1)), tpf(1, rng(5, 5))}, track(5), true},
			{"a SetID of object filters only admits every track",
				[]wire.RangeFilter{tpf(0, rng(1, 1)), rf(wire.ParamObjectIDFilter, 1, rng(0, 0))}, track(9), true},
			{"object filters do not admit in the track's own SetID",
				[]wire.RangeFilter{tpf(0, rng(1, 1)), rf(wire.ParamObjectIDFilter, 0, rng(0, 0))}, track(9), false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				m := CompileRanges(tt.filters)
				assert.Equal(t, tt.want, m.MatchTrack(tt.props))
				_, ok := m.ForTrack(tt.props)
				assert.Equal(t, tt.want, ok)
				p := wire.Params{RangeFilters: tt.filters}
				assert.Equal(t, tt.want, New(&p, LargestObject{}).MatchTrack(tt.props))
			})
		}
	})
	t.Run("objects of an admitted track", func(t *testing.T) {
		// SetID 0: kind in 1..2 (every object). SetID 1: kind 5 and object 0.
		filters := []wire.RangeFilter{tpf(0, rng(1, 2)), tpf(1, rng(5, 5)), rf(wire.ParamObjectIDFilter, 1, rng(0, 0))}
		m := CompileRanges(filters)
		obj0, obj1 := Object{Location: at(0, 0)}, Object{Location: at(0, 1)}

		all, ok := m.ForTrack(track(1))
		require.True(t, ok)
		assert.True(t, all.Match(&obj0))
		assert.True(t, all.Match(&obj1))

		first, ok := m.ForTrack(track(5))
		require.True(t, ok)
		assert.True(t, first.Match(&obj0))
		assert.False(t, first.Match(&obj1), "SetID 0 fails for this track, so object 1 does not pass")

		none, ok := m.ForTrack(track(9))
		require.False(t, ok)
		assert.False(t, none.Match(&obj0))
		again, ok := none.ForTrack(track(1))
		assert.False(t, ok, "a matcher that matches nothing stays so")
		assert.False(t, again.Match(&obj0))

		p := wire.Params{RangeFilters: filters}
		f := New(&p, LargestObject{})
		g, ok := f.ForTrack(track(5), LargestObject{})
		require.True(t, ok)
		assert.True(t, g.Passes(obj0))
		assert.False(t, g.Passes(obj1))
		// A later update keeps SetID 0 dropped for this track.
		require.NoError(t, g.Update(&wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamObjectIDFilter, 1, rng(0, 1))}}, LargestObject{}, 10))
		assert.True(t, g.Passes(obj1))
		assert.False(t, g.Passes(Object{Location: at(0, 2)}))
		_, ok = f.ForTrack(track(9), LargestObject{})
		assert.False(t, ok)
	})
	t.Run("location filter resolves per track", func(t *testing.T) {
		p := wire.Params{Forward: wire.Some(false), LocationFilter: wire.Some(wire.RelativeFilter(1)),
			RangeFilters: []wire.RangeFilter{tpf(0, rng(1, 1))}}
		f := New(&p, LargestObject{})
		a, ok := f.ForTrack(track(1), LargestAt(at(3, 9)))
		require.True(t, ok)
		b, ok := f.ForTrack(track(1), LargestAt(at(8, 0)))
		require.True(t, ok)
		assert.Equal(t, at(3, 0), a.Window().Start)
		assert.Equal(t, at(8, 0), b.Window().Start)
		assert.False(t, a.Forward(), "FORWARD is inherited")
		require.NoError(t, a.Update(&wire.Params{Forward: wire.Some(true)}, LargestAt(at(3, 9)), 1))
		assert.True(t, a.Passes(Object{Location: at(3, 0)}))
		assert.False(t, a.Passes(Object{Location: at(2, 9)}))
	})
}

// TestC024_NoObjectsOutsideRange feeds a publisher's objects through a
// subscription's filter and checks only those in the requested range are
// delivered (§3.3.1).
func TestC024_NoObjectsOutsideRange(t *testing.T) {
	tests := []struct {
		name    string
		f       wire.LocationFilter
		largest LargestObject
		want    []wire.Location
	}{
		{name: "absolute range", f: wire.RangeFilterToObject(at(1, 2), at(2, 1)), largest: LargestAt(at(0, 0)),
			want: []wire.Location{at(1, 2), at(2, 0), at(2, 1)}},
		{name: "end group", f: wire.RangeFilterTo(at(2, 2), 2), largest: LargestAt(at(0, 0)),
			want: []wire.Location{at(2, 2)}},
		{name: "next object", f: wire.NextObjectFilter(), largest: LargestAt(at(2, 1)),
			want: []wire.Location{at(2, 2), at(3, 0), at(3, 1), at(3, 2)}},
		{name: "next group", f: wire.RelativeFilter(0), largest: LargestAt(at(2, 1)),
			want: []wire.Location{at(3, 0), at(3, 1), at(3, 2)}},
		{name: "entirely in the past", f: wire.RangeFilterToObject(at(0, 0), at(0, 2)), largest: LargestAt(at(9, 0)),
			want: []wire.Location{at(0, 0), at(0, 1), at(0, 2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := wire.Params{LocationFilter: wire.Some(tt.f)}
			f := New(&p, tt.largest)
			var sent []wire.Location
			for g := range uint64(4) {
				for o := range uint64(3) {
					if f.Passes(Object{Location: at(g, o)}) {
						sent = append(sent, at(g, o))
					}
				}
			}
			assert.Equal(t, tt.want, sent)
		})
	}
}

// TestC027_PassRequiresAllFilters checks Pass = Forward AND Location AND
// Range filters (§3.3.3).
func TestC027_PassRequiresAllFilters(t *testing.T) {
	in := Object{Location: at(5, 1), SubgroupID: 0, PublisherPriority: 10}
	tests := []struct {
		name string
		p    wire.Params
		meta Object
		want bool
	}{
		{name: "defaults pass", meta: in, want: true},
		{name: "forward=1 passes", p: wire.Params{Forward: wire.Some(true)}, meta: in, want: true},
		{name: "forward=0 passes nothing", p: wire.Params{Forward: wire.Some(false)}, meta: in, want: false},
		{name: "all three pass", meta: in, want: true, p: wire.Params{
			Forward: wire.Some(true), LocationFilter: wire.Some(wire.StartFilter(at(5, 0))),
			RangeFilters: []wire.RangeFilter{rf(wire.ParamSubgroupFilter, 0, rng(0, 0))}}},
		{name: "forward fails", meta: in, want: false, p: wire.Params{
			Forward: wire.Some(false), LocationFilter: wire.Some(wire.StartFilter(at(5, 0))),
			RangeFilters: []wire.RangeFilter{rf(wire.ParamSubgroupFilter, 0, rng(0, 0))}}},
		{name: "location fails", meta: in, want: false, p: wire.Params{
			Forward: wire.Some(true), LocationFilter: wire.Some(wire.StartFilter(at(5, 2))),
			RangeFilters: []wire.RangeFilter{rf(wire.ParamSubgroupFilter, 0, rng(0, 0))}}},
		{name: "range fails", meta: in, want: false, p: wire.Params{
			Forward: wire.Some(true), LocationFilter: wire.Some(wire.StartFilter(at(5, 0))),
			RangeFilters: []wire.RangeFilter{rf(wire.ParamSubgroupFilter, 0, rng(1, 1))}}},
		{name: "one SetID of two fails", meta: in, want: true, p: wire.Params{
			LocationFilter: wire.Some(wire.StartFilter(at(5, 0))),
			RangeFilters:   []wire.RangeFilter{rf(wire.ParamSubgroupFilter, 0, rng(1, 1)), rf(wire.ParamPriorityFilter, 1, rng(10, 10))}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := New(&tt.p, LargestAt(at(5, 0)))
			assert.Equal(t, tt.want, f.Passes(tt.meta))
			assert.Equal(t, !tt.p.Forward.Set || tt.p.Forward.Value, f.Forward())
		})
	}
	// Forward=0 passes nothing at all, whatever the other filters.
	f := New(&wire.Params{Forward: wire.Some(false)}, LargestObject{})
	for g := range uint64(3) {
		assert.False(t, f.Passes(Object{Location: at(g, 0)}))
	}
	assert.True(t, New(nil, LargestObject{}).Passes(in), "nil parameters pass everything")
}

func TestFilterFetch(t *testing.T) {
	_, err := NewFetch(nil, LargestObject{})
	requireCode(t, err, wire.ReqInvalidRange)

	f, err := NewFetch(nil, LargestAt(at(3, 4)))
	require.NoError(t, err)
	assert.Equal(t, Window{Start: at(0, 0), End: at(3, 4), Bounded: true}, f.Window())
	assert.True(t, f.Passes(Object{Location: at(0, 0)}))
	assert.True(t, f.Passes(Object{Location: at(3, 4)}))
	assert.False(t, f.Passes(Object{Location: at(3, 5)}), "objects after Largest Object are not fetched")

	p := wire.Params{
		LocationFilter: wire.Some(wire.StartFilter(at(1, 0))),
		RangeFilters:   []wire.RangeFilter{rf(wire.ParamObjectIDFilter, 0, rng(0, 0))},
	}
	f, err = NewFetch(&p, LargestAt(at(3, 4)))
	require.NoError(t, err)
	assert.False(t, f.Passes(Object{Location: at(0, 0)}))
	assert.True(t, f.Passes(Object{Location: at(2, 0)}))
	assert.False(t, f.Passes(Object{Location: at(2, 1)}))

	p.LocationFilter = wire.Some(wire.StartFilter(at(4, 0)))
	_, err = NewFetch(&p, LargestAt(at(3, 4)))
	requireCode(t, err, wire.ReqInvalidRange)
}

func TestFilterUpdate(t *testing.T) {
	largest0 := LargestAt(at(2, 5))
	initial := wire.Params{
		LocationFilter: wire.Some(wire.StartFilter(at(2, 0))),
		RangeFilters: []wire.RangeFilter{
			rf(wire.ParamSubgroupFilter, 0, rng(0, 0)),
			rf(wire.ParamSubgroupFilter, 1, rng(7, 7)),
			rf(wire.ParamObjectIDFilter, 0, rng(0, 5)),
		},
	}
	obj := func(g, o, sub uint64) Object { return Object{Location: at(g, o), SubgroupID: sub} }
	tests := []struct {
		name       string
		update     wire.Params
		largest    LargestObject
		max        uint64
		err        bool
		pass, fail []Object
		ranges     int
	}{
		{name: "empty update changes nothing", largest: LargestAt(at(9, 9)), max: 10, ranges: 3,
			pass: []Object{obj(2, 0, 0), obj(2, 9, 7)}, fail: []Object{obj(1, 0, 0), obj(2, 6, 0)}},
		{name: "forward 0", update: wire.Params{Forward: wire.Some(false)}, max: 10, ranges: 3,
			fail: []Object{obj(2, 0, 0)}},
		{name: "relative filter resolves at update time", update: wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(1))},
			largest: LargestAt(at(8, 3)), max: 10, ranges: 3,
			pass: []Object{obj(8, 0, 0)}, fail: []Object{obj(7, 0, 0), obj(2, 0, 0)}},
		{name: "next object resolves at update time", update: wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter())},
			largest: LargestAt(at(8, 3)), max: 10, ranges: 3,
			pass: []Object{obj(8, 4, 0)}, fail: []Object{obj(8, 3, 0)}},
		{name: "zero fields removes the location filter", update: wire.Params{LocationFilter: wire.Some(wire.NoLocationFilter())},
			max: 10, ranges: 3, pass: []Object{obj(0, 0, 0), obj(1, 5, 7)}},
		{name: "end group narrows", update: wire.Params{LocationFilter: wire.Some(wire.RangeFilterTo(at(2, 0), 3))},
			max: 10, ranges: 3, pass: []Object{obj(3, 5, 0)}, fail: []Object{obj(4, 0, 0)}},
		{name: "range filter replaces every filter of its type",
			update: wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamSubgroupFilter, 0, rng(3, 3))}}, max: 10, ranges: 2,
			pass: []Object{obj(2, 0, 3)}, fail: []Object{obj(2, 0, 0), obj(2, 0, 7), obj(2, 6, 3)}},
		{name: "clear removes every filter of its type",
			update: wire.Params{RangeFilters: []wire.RangeFilter{{Type: wire.ParamSubgroupFilter, Clear: true}}}, max: 10, ranges: 1,
			pass: []Object{obj(2, 0, 9), obj(2, 5, 0)}, fail: []Object{obj(2, 6, 0)}},
		{name: "clear of an absent type changes nothing",
			update: wire.Params{RangeFilters: []wire.RangeFilter{{Type: wire.ParamPriorityFilter, Clear: true}}}, max: 10, ranges: 3,
			pass: []Object{obj(2, 0, 0)}, fail: []Object{obj(2, 0, 3)}},
		{name: "new type is added",
			update: wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamPriorityFilter, 0, rng(5, 5))}}, max: 10, ranges: 4,
			pass: []Object{{Location: at(2, 0), PublisherPriority: 5}, obj(2, 0, 7)},
			fail: []Object{{Location: at(2, 0), PublisherPriority: 6}}},
		{name: "ranges in effect over the limit are refused", err: true, max: 4,
			update: wire.Params{Forward: wire.Some(false), LocationFilter: wire.Some(wire.NoLocationFilter()),
				RangeFilters: []wire.RangeFilter{rf(wire.ParamPriorityFilter, 0, rng(1, 1), rng(3, 3))}}},
		{name: "replacing stays within the limit", max: 3, ranges: 3,
			update: wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamSubgroupFilter, 0, rng(1, 1), rng(3, 3))}},
			pass:   []Object{obj(2, 0, 3)}, fail: []Object{obj(2, 0, 7)}},
		{name: "fill ranges over the limit are refused", err: true, max: 3,
			update: wire.Params{Forward: wire.Some(false), FillParameters: &wire.Params{
				RangeFilters: []wire.RangeFilter{rf(wire.ParamPriorityFilter, 0, rng(1, 1))}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := New(&initial, largest0)
			before := *f
			err := f.Update(&tt.update, tt.largest, tt.max)
			if tt.err {
				requireCode(t, err, wire.ReqInvalidFilter) // C026
				assert.Equal(t, before, *f, "a refused update leaves the filter unchanged")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.ranges, f.RangeCount())
			for _, o := range tt.pass {
				assert.True(t, f.Passes(o), "%+v should pass", o)
			}
			for _, o := range tt.fail {
				assert.False(t, f.Passes(o), "%+v should not pass", o)
			}
		})
	}
	t.Run("forward toggles back", func(t *testing.T) {
		f := New(nil, LargestObject{})
		require.NoError(t, f.Update(&wire.Params{Forward: wire.Some(false)}, LargestObject{}, 0))
		assert.False(t, f.Passes(Object{}))
		require.NoError(t, f.Update(&wire.Params{Forward: wire.Some(true)}, LargestObject{}, 0))
		assert.True(t, f.Passes(Object{}))
		require.NoError(t, f.Update(nil, LargestObject{}, 0))
		assert.True(t, f.Passes(Object{}))
	})
	t.Run("filter does not alias the parameters", func(t *testing.T) {
		p := wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamObjectIDFilter, 0, rng(0, 0))}}
		f := New(&p, LargestObject{})
		p.RangeFilters[0].Ranges[0] = rng(1, 1)
		assert.True(t, f.Passes(Object{}))
		assert.False(t, f.Passes(Object{Location: at(0, 1)}))
		// An update of another type recompiles from the filter's own copy.
		require.NoError(t, f.Update(&wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamPriorityFilter, 0, from(0))}}, LargestObject{}, 10))
		assert.True(t, f.Passes(Object{}))
		assert.False(t, f.Passes(Object{Location: at(0, 1)}))
	})
}

// TestCheckFilterRanges covers the exported helper; TestC026_MaxFilterRanges
// checks that the session enforces the limit.
func TestCheckFilterRanges(t *testing.T) {
	two := rf(wire.ParamObjectIDFilter, 0, rng(0, 0), from(5))
	tests := []struct {
		name string
		p    *wire.Params
		max  uint64
		err  bool
	}{
		{name: "nil parameters", p: nil, max: 0},
		{name: "no filters with max 0", p: &wire.Params{Forward: wire.Some(true)}, max: 0},
		{name: "filter with max 0", p: &wire.Params{RangeFilters: []wire.RangeFilter{two}}, max: 0, err: true},
		{name: "filter without Ranges with max 0", p: &wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamSubgroupFilter, 0)}}, max: 0, err: true},
		{name: "clear filter with max 0", p: &wire.Params{RangeFilters: []wire.RangeFilter{{Type: wire.ParamSubgroupFilter, Clear: true}}}, max: 0},
		{name: "at the limit", p: &wire.Params{RangeFilters: []wire.RangeFilter{two, rf(wire.ParamPriorityFilter, 1, rng(1, 1))}}, max: 3},
		{name: "over the limit", p: &wire.Params{RangeFilters: []wire.RangeFilter{two, rf(wire.ParamPriorityFilter, 1, rng(1, 1))}}, max: 2, err: true},
		{name: "track property ranges count", p: &wire.Params{RangeFilters: []wire.RangeFilter{
			{Type: wire.ParamTrackPropertyFilter, PropertyType: 2, Ranges: []wire.Range{rng(1, 1), rng(3, 3)}}}}, max: 1, err: true},
		{name: "fill replaces a type within the limit", max: 2, p: &wire.Params{
			RangeFilters:   []wire.RangeFilter{two},
			FillParameters: &wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamObjectIDFilter, 0, rng(1, 1))}}}},
		{name: "fill adds a type over the limit", max: 2, err: true, p: &wire.Params{
			RangeFilters:   []wire.RangeFilter{two},
			FillParameters: &wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamPriorityFilter, 0, rng(1, 1))}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckRanges(tt.p, tt.max)
			if tt.err {
				requireCode(t, err, wire.ReqInvalidFilter)
				return
			}
			assert.NoError(t, err)
		})
	}
}

// busyFilter has a Location filter and a Range filter of each object type,
// the property one matched inside IMMUTABLE_PROPERTIES.
func busyFilter() *Filter {
	p := wire.Params{
		Forward:        wire.Some(true),
		LocationFilter: wire.Some(wire.NextObjectFilter()),
		RangeFilters: []wire.RangeFilter{
			rf(wire.ParamSubgroupFilter, 0, rng(0, 2), rng(5, 9)),
			rf(wire.ParamObjectIDFilter, 0, from(0)),
			rf(wire.ParamPriorityFilter, 0, rng(0, 200)),
			{Type: wire.ParamObjectPropertyFilter, SetID: 0, PropertyType: 0x78, Ranges: []wire.Range{rng(1, 1), rng(40, 50)}},
			rf(wire.ParamSubgroupFilter, 1, rng(100, 100)),
		},
	}
	return New(&p, LargestAt(at(10, 0)))
}

func busyMeta(t testing.TB) Object {
	imm := props(t, wire.KVList{{Type: 0x3C, Value: 1}, {Type: 0x78, Value: 42}})
	return Object{
		Location: at(11, 3), SubgroupID: 6, PublisherPriority: 100,
		Properties: props(t, wire.KVList{{Type: 0x02, Value: 500}, {Type: wire.PropImmutableProperties, Bytes: imm}, {Type: 0x7A, Value: 3}}),
	}
}

func TestFilterPassesAllocs(t *testing.T) {
	f, meta := busyFilter(), busyMeta(t)
	miss := meta
	miss.SubgroupID = 3
	require.True(t, f.Passes(meta))
	require.False(t, f.Passes(miss))
	allocs := testing.AllocsPerRun(1000, func() {
		if !f.Passes(meta) || f.Passes(miss) {
			panic("filter result changed")
		}
	})
	assert.Zero(t, allocs)
}

func BenchmarkFilterPasses(b *testing.B) {
	meta := busyMeta(b)
	cases := []struct {
		name string
		f    *Filter
	}{
		{"unfiltered", New(nil, LargestObject{})},
		{"location", New(&wire.Params{LocationFilter: wire.Some(wire.RangeFilterTo(at(5, 0), 20))}, LargestObject{})},
		{"ranges", New(&wire.Params{RangeFilters: []wire.RangeFilter{
			rf(wire.ParamSubgroupFilter, 0, rng(0, 2), rng(5, 9)), rf(wire.ParamPriorityFilter, 0, rng(0, 200))}}, LargestObject{})},
		{"location+ranges+property", busyFilter()},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !c.f.Passes(meta) {
					b.Fatal("object should pass")
				}
			}
		})
	}
}

// TestMayPassSubgroup: what a subscription's filters say of a subgroup
// none of whose objects is known (a header-only stream, §11.3.2): it may
// pass unless Forward is 0, the Location filter holds no Location of the
// group from the subgroup's first possible Object ID on, or every SetID's
// Range filters fail on the Subgroup ID, the Publisher Priority or all
// Object IDs there may be. Object Property filters cannot be judged.
func TestMayPassSubgroup(t *testing.T) {
	sg := Subgroup{Group: 5, ID: 2, PublisherPriority: 3}
	mode1 := Subgroup{Group: 5, ID: 4, PublisherPriority: 3, FirstObject: 4} // SUBGROUP_ID_MODE 1
	rf := func(typ wire.ParamType, set uint8, rs ...wire.Range) wire.RangeFilter {
		return wire.RangeFilter{Type: typ, SetID: set, Ranges: rs}
	}
	r := func(a, b uint64) wire.Range { return wire.Range{Start: a, End: b} }
	from := func(a uint64) wire.Range { return wire.Range{Start: a, Open: true} }
	cases := []struct {
		name string
		p    wire.Params
		s    Subgroup
		want bool
	}{
		{"no filter", wire.Params{}, sg, true},
		{"Forward 0", wire.Params{Forward: wire.Some(false)}, sg, false},
		{"start in a later group", wire.Params{LocationFilter: wire.Some(wire.StartFilter(at(6, 0)))}, sg, false},
		{"start inside the group", wire.Params{LocationFilter: wire.Some(wire.StartFilter(at(5, 9)))}, sg, true},
		{"end in an earlier group", wire.Params{LocationFilter: wire.Some(wire.RangeFilterTo(at(0, 1), 4))}, sg, false},
		{"end group is the group", wire.Params{LocationFilter: wire.Some(wire.RangeFilterTo(at(0, 1), 5))}, sg, true},
		{"end object before mode 1's first", wire.Params{LocationFilter: wire.Some(wire.RangeFilterToObject(at(5, 0), at(5, 3)))}, mode1, false},
		{"end object at mode 1's first", wire.Params{LocationFilter: wire.Some(wire.RangeFilterToObject(at(5, 0), at(5, 4)))}, mode1, true},
		{"subgroup left out", wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamSubgroupFilter, 0, r(0, 1), from(3))}}, sg, false},
		{"subgroup taken", wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamSubgroupFilter, 0, r(2, 2))}}, sg, true},
		{"priority left out", wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamPriorityFilter, 0, r(0, 2))}}, sg, false},
		{"object IDs before mode 1's first", wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamObjectIDFilter, 0, r(0, 3))}}, mode1, false},
		{"object IDs reach mode 1's first", wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamObjectIDFilter, 0, r(0, 1), r(6, 9))}}, mode1, true},
		{"object IDs, first unknown", wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamObjectIDFilter, 0, r(7, 7))}}, sg, true},
		{"object property unknown", wire.Params{RangeFilters: []wire.RangeFilter{rf(wire.ParamObjectPropertyFilter, 0, r(1, 1))}}, sg, true},
		{"one set fails, another holds", wire.Params{RangeFilters: []wire.RangeFilter{
			rf(wire.ParamSubgroupFilter, 0, r(9, 9)), rf(wire.ParamPriorityFilter, 1, r(3, 3))}}, sg, true},
		{"a set's AND fails", wire.Params{RangeFilters: []wire.RangeFilter{
			rf(wire.ParamSubgroupFilter, 0, r(2, 2)), rf(wire.ParamPriorityFilter, 0, r(4, 4))}}, sg, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := New(&c.p, LargestAt(at(3, 0)))
			assert.Equal(t, c.want, f.MayPass(c.s))
		})
	}
}
