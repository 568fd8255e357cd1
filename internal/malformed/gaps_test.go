package malformed

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// groupGap and objectGap are Object Properties blocks with a Prior Group
// ID Gap, or a Prior Object ID Gap, of v.
func groupGap(t *testing.T, v uint64) []byte {
	return propsBlock(t, wire.KVList{{Type: wire.PropPriorGroupIDGap, Value: v}})
}

func objectGap(t *testing.T, v uint64) []byte {
	return propsBlock(t, wire.KVList{{Type: wire.PropPriorObjectIDGap, Value: v}})
}

func fillObj(g, o uint64) step { return step{s: -2, loc: wire.Location{Group: g, Object: o}} }

func withProps(st step, p []byte) step { st.props = p; return st }

// TestMalformedPriorGaps: each rule of §10.8 and §10.9, on subgroup
// streams, datagrams and fill objects, in either order of arrival, and
// the object that completes the contradiction is the one reported; what
// the rules allow is not reported.
func TestMalformedPriorGaps(t *testing.T) {
	gg := func(st step, gap uint64) step { return withProps(st, groupGap(t, gap)) }
	og := func(st step, gap uint64) step { return withProps(st, objectGap(t, gap)) }
	twiceGroup := propsBlock(t, wire.KVList{{Type: wire.PropPriorGroupIDGap, Value: 1}, {Type: wire.PropPriorGroupIDGap, Value: 1}})
	twiceObject := propsBlock(t, wire.KVList{{Type: wire.PropPriorObjectIDGap, Value: 1}, {Type: wire.PropPriorObjectIDGap, Value: 1}})
	mutableAndImmutable := propsBlock(t, wire.KVList{{Type: wire.PropImmutableProperties,
		Bytes: groupGap(t, 1)}, {Type: wire.PropPriorGroupIDGap, Value: 1}})
	twoImmutables := propsBlock(t, wire.KVList{{Type: wire.PropImmutableProperties, Bytes: []byte{}},
		{Type: wire.PropImmutableProperties, Bytes: []byte{}}})
	inImmutable := propsBlock(t, wire.KVList{{Type: wire.PropImmutableProperties, Bytes: groupGap(t, 2)}})
	cases := []struct {
		name  string
		steps []step
		want  int // index of the step reported, -1 for none
	}{
		// On the object alone.
		{"Prior Group ID Gap twice", []step{withProps(obj(0, 3, 0, 0, 5), twiceGroup)}, 0},
		{"Prior Group ID Gap mutable and immutable", []step{withProps(dg(3, 0), mutableAndImmutable)}, 0},
		{"Prior Object ID Gap twice", []step{withProps(fillObj(3, 2), twiceObject)}, 0},
		{"two IMMUTABLE_PROPERTIES", []step{withProps(obj(0, 3, 0, 0, 5), twoImmutables)}, 0},
		{"Prior Group ID Gap larger than the Group ID", []step{gg(obj(0, 1, 0, 0, 5), 2)}, 0},
		{"Prior Group ID Gap as large as the Group ID", []step{gg(obj(0, 2, 0, 0, 5), 2)}, -1},
		{"Prior Object ID Gap larger than the Object ID", []step{og(dg(1, 1), 2)}, 0},
		{"Prior Object ID Gap as large as the Object ID", []step{og(dg(1, 2), 2)}, -1},
		// A Group with different Prior Group ID Gaps.
		{"group gaps differ on a stream", []step{gg(obj(0, 5, 0, 0, 5), 2), gg(obj(0, 5, 1, 0, 5), 3)}, 1},
		{"group gaps differ, stream and datagram", []step{gg(obj(0, 5, 0, 0, 5), 2), gg(dg(5, 3), 1)}, 1},
		{"group gaps differ, fill and stream", []step{gg(fillObj(5, 0), 2), gg(obj(0, 5, 1, 0, 5), 0)}, 1},
		{"one group gap, on some objects", []step{gg(obj(0, 5, 0, 0, 5), 2), obj(0, 5, 1, 0, 5),
			gg(dg(5, 2), 2), withProps(obj(1, 5, 3, 1, 5), inImmutable)}, -1},
		// A Prior Group ID Gap covering a group received.
		{"group gap covers a stream's group", []step{obj(0, 3, 0, 0, 5), gg(obj(1, 5, 0, 0, 5), 2)}, 1},
		{"group gap covers a datagram's group", []step{dg(4, 7), gg(dg(5, 0), 1)}, 1},
		{"group gap covers a fill's group", []step{fillObj(3, 0), gg(obj(0, 5, 0, 0, 5), 2)}, 1},
		{"group gap on a later object covers", []step{obj(0, 4, 0, 0, 5), obj(1, 5, 0, 0, 5),
			gg(obj(1, 5, 1, 0, 5), 1)}, 2},
		{"group gap short of the groups received", []step{obj(0, 2, 0, 0, 5), dg(5, 0), gg(obj(1, 5, 1, 0, 5), 2)}, -1},
		// A group in a Prior Group ID Gap.
		{"stream in a group gap", []step{gg(obj(0, 5, 0, 0, 5), 2), obj(1, 4, 0, 0, 5)}, 1},
		{"datagram in a group gap", []step{gg(dg(5, 0), 2), dg(3, 0)}, 1},
		{"fill object in a group gap", []step{gg(obj(0, 5, 0, 0, 5), 2), fillObj(3, 9)}, 1},
		{"stream in a fill's group gap", []step{gg(fillObj(5, 0), 1), obj(0, 4, 0, 0, 5)}, 1},
		{"groups around a group gap", []step{gg(obj(0, 5, 0, 0, 5), 2), obj(1, 2, 0, 0, 5), dg(6, 0), fillObj(5, 1)}, -1},
		{"a zero group gap", []step{obj(0, 4, 0, 0, 5), gg(obj(1, 5, 0, 0, 5), 0), dg(4, 1)}, -1},
		// A Prior Object ID Gap covering an object received.
		{"object gap covers the object before", []step{obj(0, 1, 8, 0, 5), obj(0, 1, 9, 0, 5), og(obj(0, 1, 10, 0, 5), 2)}, 2},
		{"object gap covers another subgroup's", []step{obj(0, 1, 0, 0, 5), obj(0, 1, 1, 0, 5), obj(0, 1, 2, 0, 5),
			og(obj(1, 1, 5, 1, 5), 3)}, 3},
		{"object gap covers the object before a skip", []step{obj(0, 1, 0, 0, 5), obj(0, 1, 1, 0, 5), obj(0, 1, 2, 0, 5),
			og(obj(0, 1, 4, 0, 5), 2)}, 3},
		{"object gap covers a datagram", []step{dg(1, 8), og(obj(0, 1, 10, 0, 5), 2)}, 1},
		{"object gap covers a fill object", []step{fillObj(1, 6), fillObj(1, 7), og(dg(1, 9), 2)}, 2},
		{"object gap over what a stream skipped", []step{obj(0, 1, 0, 0, 5), obj(0, 1, 7, 0, 5),
			og(obj(0, 1, 10, 0, 5), 2), og(dg(1, 6), 5)}, -1},
		// An object in a Prior Object ID Gap.
		{"datagram in an object gap", []step{og(obj(0, 1, 10, 0, 5), 2), dg(1, 9)}, 1},
		{"stream object in an object gap", []step{og(dg(1, 10), 3), obj(0, 1, 0, 0, 5), obj(0, 1, 7, 0, 5)}, 2},
		{"fill object in an object gap", []step{og(obj(0, 1, 10, 0, 5), 2), fillObj(1, 8)}, 1},
		{"objects around an object gap", []step{og(obj(0, 1, 10, 0, 5), 2), dg(1, 7), obj(1, 1, 11, 1, 5), fillObj(2, 9)}, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, run(c.steps))
		})
	}
}

// TestMalformedPriorGapsBounded: a group remembers the ranges of its
// latest checkedGapRanges Prior Object ID Gaps; an object in an older one
// is no longer seen as a contradiction, nor reported.
func TestMalformedPriorGapsBounded(t *testing.T) {
	var tc Track
	const gaps = 3 * checkedGapRanges
	for i := uint64(1); i <= gaps; i++ {
		d := wire.ObjectDatagram{GroupID: 1, ObjectID: 3 * i, Properties: objectGap(t, 1)}
		require.Nil(t, tc.Datagram(&d))
	}
	g := tc.groups[1]
	require.Equal(t, checkedGapRanges, g.rangeCount)
	assert.Nil(t, tc.Datagram(&wire.ObjectDatagram{GroupID: 1, ObjectID: 2}), "the oldest gap is forgotten")
	assert.NotNil(t, tc.Datagram(&wire.ObjectDatagram{GroupID: 1, ObjectID: 3*gaps - 1}), "the latest gap is remembered")
}

// fetchStep is an object on a fetch stream.
type fetchStep struct {
	loc   wire.Location
	props []byte
}

func fo(g, o uint64, props []byte) fetchStep {
	return fetchStep{loc: wire.Location{Group: g, Object: o}, props: props}
}

// TestMalformedPriorGapsFetch: along one fetch stream, in its group order,
// the rules of §10.8 and §10.9 are reported by the object that breaks
// them; an object without the properties, which a relay may remove from
// what it serves by FETCH, is not.
func TestMalformedPriorGapsFetch(t *testing.T) {
	g := func(gap uint64) []byte { return groupGap(t, gap) }
	o := func(gap uint64) []byte { return objectGap(t, gap) }
	cases := []struct {
		name       string
		descending bool
		steps      []fetchStep
		want       int
	}{
		{"ascending, gaps kept", false, []fetchStep{fo(1, 0, nil), fo(4, 0, g(2)), fo(4, 3, o(2)), fo(4, 4, g(2))}, -1},
		{"ascending, gaps removed", false, []fetchStep{fo(1, 0, nil), fo(4, 0, nil), fo(4, 3, nil)}, -1},
		{"ascending, group gap covers the group before", false, []fetchStep{fo(2, 0, nil), fo(4, 0, g(2))}, 1},
		{"ascending, a later object's group gap covers", false, []fetchStep{fo(3, 5, nil), fo(4, 0, nil), fo(4, 1, g(1))}, 2},
		{"ascending, group gaps differ", false, []fetchStep{fo(4, 0, g(2)), fo(4, 1, nil), fo(4, 2, g(1))}, 2},
		{"ascending, object gap covers the object before", false, []fetchStep{fo(4, 1, nil), fo(4, 3, o(2))}, 1},
		{"ascending, group gap larger than the Group ID", false, []fetchStep{fo(1, 0, g(2))}, 0},
		{"ascending, object gap larger than the Object ID", false, []fetchStep{fo(1, 1, o(2))}, 0},
		{"ascending, two IMMUTABLE_PROPERTIES", false, []fetchStep{fo(1, 1, propsBlock(t, wire.KVList{
			{Type: wire.PropImmutableProperties, Bytes: []byte{}}, {Type: wire.PropImmutableProperties, Bytes: []byte{}}}))}, 0},
		{"descending, gaps kept", true, []fetchStep{fo(9, 0, g(2)), fo(6, 0, g(1)), fo(4, 0, nil)}, -1},
		{"descending, next group in the gap", true, []fetchStep{fo(9, 0, nil), fo(9, 1, g(2)), fo(7, 0, nil)}, 2},
		{"descending, group gaps differ", true, []fetchStep{fo(9, 0, g(2)), fo(9, 1, g(3))}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var f Fetch
			got := -1
			for i, st := range c.steps {
				gaps, e := f.Check(st.loc, st.props, c.descending)
				if e != nil {
					got = i
					break
				}
				f.Record(st.loc, gaps)
			}
			assert.Equal(t, c.want, got)
		})
	}
}

// TestSentPriorGaps: a publisher's objects are refused where a receiver
// would report them, and a refused object is not recorded: neither its
// gaps nor the object itself contradict what follows.
func TestSentPriorGaps(t *testing.T) {
	var s Sent
	loc := func(g, o uint64) wire.Location { return wire.Location{Group: g, Object: o} }
	require.Nil(t, s.Object(loc(3, 0), 0, false, nil))
	require.Nil(t, s.Object(loc(3, 1), 0, false, nil))
	assert.NotNil(t, s.Object(loc(5, 0), 0, false, groupGap(t, 2)), "group gap over group 3, sent")
	require.Nil(t, s.Object(loc(5, 0), 0, false, groupGap(t, 1)), "the refused gap did not stick")
	assert.NotNil(t, s.Object(loc(5, 1), 0, false, groupGap(t, 0)), "another group gap in group 5")
	assert.NotNil(t, s.Object(loc(4, 0), 1, false, nil), "group 4 is in group 5's gap")
	assert.NotNil(t, s.Object(loc(4, 0), 0, true, nil), "as a datagram too")
	require.Nil(t, s.Object(loc(5, 4), 0, false, propsBlock(t, wire.KVList{{Type: wire.PropPriorGroupIDGap, Value: 1}, {Type: wire.PropPriorObjectIDGap, Value: 2}})), "objects 2 and 3 do not exist")
	assert.NotNil(t, s.Object(loc(5, 3), 1, false, nil), "object 3 is in the gap")
	assert.NotNil(t, s.Object(loc(5, 6), 0, true, objectGap(t, 2)), "object 4 was sent")
	require.Nil(t, s.Object(loc(5, 7), 0, true, objectGap(t, 1)), "the refused object 6 was not recorded")
	require.Nil(t, s.Object(loc(6, 0), 0, false, groupGap(t, 0)))
	assert.NotNil(t, s.Object(loc(6, 1), 0, false, objectGap(t, 2)), "larger than the Object ID")
	assert.NotNil(t, s.Object(loc(6, 1), 0, false, propsBlock(t, wire.KVList{{Type: wire.PropImmutableProperties, Bytes: []byte{}},
		{Type: wire.PropImmutableProperties, Bytes: []byte{}}})), "two IMMUTABLE_PROPERTIES")
}
