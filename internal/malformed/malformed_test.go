package malformed

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// The conditions themselves are tested over a fake publisher in the root
// package (malformed_test.go there), where they cancel a subscription.
// These tests cover what only the checks' state shows: allocations and the
// bounds on memory.

func propsBlock(t *testing.T, l wire.KVList) []byte {
	t.Helper()
	b, err := l.Append(nil)
	require.NoError(t, err)
	return b
}

// TestMalformedCheckHotPathAllocs: once a stream has begun, checking its
// objects allocates nothing, with Object Properties or without, Prior ID
// Gaps included; nor does checking a datagram of a group already seen.
func TestMalformedCheckHotPathAllocs(t *testing.T) {
	props := propsBlock(t, wire.KVList{{Type: wire.PropImmutableProperties,
		Bytes: propsBlock(t, wire.KVList{{Type: 0x3E, Value: 0}})}, {Type: 0x3C, Value: 0}})
	var tc Track
	var c Stream
	require.Nil(t, c.Object(&tc, wire.Location{Group: 1}, 0, 5, wire.ObjectNormal, nil))
	id := uint64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		id++
		if e := c.Object(&tc, wire.Location{Group: 1, Object: id}, 0, 5, wire.ObjectNormal, props); e != nil {
			t.Fatal(e)
		}
	})
	assert.Zero(t, allocs, "stream objects")
	d := wire.ObjectDatagram{GroupID: 2, Properties: props}
	require.Nil(t, tc.Datagram(&d))
	allocs = testing.AllocsPerRun(1000, func() {
		d.ObjectID++
		if e := tc.Datagram(&d); e != nil {
			t.Fatal(e)
		}
	})
	assert.Zero(t, allocs, "datagrams")
}

// BenchmarkMalformedCheck measures the Malformed Track checks of one
// object on a stream already begun, without and with Object Properties.
func BenchmarkMalformedCheck(b *testing.B) {
	props, err := wire.KVList{{Type: 0x3C, Value: 1}, {Type: 0x3E, Value: 0}}.Append(nil)
	require.NoError(b, err)
	for _, bc := range []struct {
		name  string
		props []byte
	}{{"plain", nil}, {"properties", props}} {
		b.Run(bc.name, func(b *testing.B) {
			var tc Track
			var c Stream
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if e := c.Object(&tc, wire.Location{Group: 1, Object: uint64(i)}, 0, 5, wire.ObjectNormal, bc.props); e != nil {
					b.Fatal(e)
				}
			}
		})
	}
}

// TestMalformedCheckBounded: however many groups, subgroups and datagrams
// arrive, a subscription remembers at most checkedGroups groups, the
// latest, each with at most checkedSubgroups subgroups and checkedDatagrams
// datagram Object IDs; what it forgot no longer contradicts anything.
func TestMalformedCheckBounded(t *testing.T) {
	var tc Track
	const groups = 3 * checkedGroups
	for g := uint64(0); g < groups; g++ {
		for sg := uint64(0); sg < 3*checkedSubgroups; sg++ {
			var c Stream
			require.Nil(t, c.Object(&tc, wire.Location{Group: g, Object: 2 * sg}, sg, 1, wire.ObjectNormal, nil))
		}
		for id := uint64(1); id < 6*checkedDatagrams; id += 2 {
			require.Nil(t, tc.Datagram(&wire.ObjectDatagram{GroupID: g, ObjectID: id}))
		}
	}
	require.Len(t, tc.groups, checkedGroups)
	for g := uint64(groups - checkedGroups); g < groups; g++ {
		require.Contains(t, tc.groups, g, "the latest groups are kept")
		assert.Equal(t, checkedDatagrams, tc.groups[g].dgCount)
	}
	// Group 0 and its subgroup 0 are forgotten: another priority for it is
	// no longer seen as a contradiction, and nothing is reported.
	var c Stream
	assert.Nil(t, c.Object(&tc, wire.Location{Group: 0}, 0, 2, wire.ObjectNormal, nil))
	// In a kept group, the oldest subgroups are forgotten too.
	c = Stream{}
	assert.Nil(t, c.Object(&tc, wire.Location{Group: groups - 1}, 0, 2, wire.ObjectNormal, nil))
	c = Stream{}
	assert.NotNil(t, c.Object(&tc, wire.Location{Group: groups - 1, Object: 2 * (3*checkedSubgroups - 1)},
		3*checkedSubgroups-1, 2, wire.ObjectNormal, nil), "the latest subgroup is remembered")
}

// step is one thing a subscription receives: an object on stream s (a
// fresh Stream per index), that stream's FIN, a datagram, or an object on
// a fill stream.
type step struct {
	s        int // stream index; -1 for a datagram, -2 for a fill object
	loc      wire.Location
	subgroup uint64
	prio     uint8
	status   wire.ObjectStatus
	props    []byte
	fin      bool // the FIN of stream s after its objects
	eog      bool // END_OF_GROUP: on the subgroup header for a FIN, or the datagram flag
	partial  bool // the FIN may have come early
}

func obj(s int, g, o, sg uint64, prio uint8) step {
	return step{s: s, loc: wire.Location{Group: g, Object: o}, subgroup: sg, prio: prio}
}

func fin(s int, g uint64, eog bool) step {
	return step{s: s, loc: wire.Location{Group: g}, fin: true, eog: eog}
}

func dg(g, o uint64) step { return step{s: -1, loc: wire.Location{Group: g, Object: o}} }

func withStatus(st step, status wire.ObjectStatus) step { st.status = status; return st }

// run feeds steps to a fresh Track and returns the index of the first step
// reported as malformed, or -1.
func run(steps []step) int {
	var tc Track
	streams := map[int]*Stream{}
	for i, st := range steps {
		var e *Error
		switch {
		case st.s == -2:
			var gaps Gaps
			if gaps, e = checkObjectProperties(st.loc, st.props); e == nil {
				e = tc.Fetched(st.loc, gaps)
			}
		case st.s < 0:
			e = tc.Datagram(&wire.ObjectDatagram{GroupID: st.loc.Group, ObjectID: st.loc.Object,
				Status: st.status, Properties: st.props, EndOfGroup: st.eog})
		default:
			c := streams[st.s]
			if c == nil {
				c = &Stream{}
				streams[st.s] = c
			}
			if st.fin {
				e = c.Fin(st.loc.Group, st.eog, st.partial)
			} else {
				e = c.Object(&tc, st.loc, st.subgroup, st.prio, st.status, st.props)
			}
		}
		if e != nil {
			return i
		}
	}
	return -1
}

// TestMalformedConditions: each §12.1 condition, and the Object Properties
// rules of §3.6 and §10.7, is reported by the object (or FIN) that
// completes the contradiction, in either order of arrival; what is
// consistent is not reported.
func TestMalformedConditions(t *testing.T) {
	mandatory := propsBlock(t, wire.KVList{{Type: 0x4000, Value: 1}})
	nested := propsBlock(t, wire.KVList{{Type: wire.PropImmutableProperties,
		Bytes: propsBlock(t, wire.KVList{{Type: wire.PropImmutableProperties, Bytes: []byte{}}})}})
	unparseable := propsBlock(t, wire.KVList{{Type: wire.PropImmutableProperties, Bytes: []byte{0x3C}}})
	fine := propsBlock(t, wire.KVList{{Type: wire.PropImmutableProperties,
		Bytes: propsBlock(t, wire.KVList{{Type: 0x3E, Value: 0}})}, {Type: 0x3C, Value: 1}})
	withProps := func(st step, p []byte) step { st.props = p; return st }
	eogDatagram := dg(1, 2)
	eogDatagram.eog = true
	partialFin := fin(0, 1, false)
	partialFin.partial = true
	cases := []struct {
		name  string
		steps []step
		want  int // index of the step reported, -1 for none
	}{
		{"consistent track", []step{obj(0, 1, 0, 0, 5), obj(0, 1, 1, 0, 5), fin(0, 1, true), obj(1, 2, 0, 0, 5),
			withStatus(obj(1, 2, 1, 0, 5), wire.ObjectEndOfTrack)}, -1},
		{"1: two priorities for one subgroup", []step{obj(0, 1, 0, 3, 5), obj(1, 1, 1, 3, 6)}, 1},
		{"1: another subgroup may differ", []step{obj(0, 1, 0, 3, 5), obj(1, 1, 1, 4, 6)}, -1},
		{"2: object after the subgroup's FIN", []step{obj(0, 1, 0, 0, 5), obj(0, 1, 1, 0, 5), fin(0, 1, false),
			obj(1, 1, 2, 0, 5)}, 3},
		{"2: FIN after a larger object of its subgroup", []step{obj(1, 1, 5, 0, 5), obj(0, 1, 0, 0, 5),
			obj(0, 1, 1, 0, 5), fin(0, 1, false)}, 3},
		{"2: a partial FIN proves nothing", []step{obj(0, 1, 0, 0, 5), partialFin, obj(1, 1, 2, 0, 5)}, -1},
		{"3: two final objects for one subgroup", []step{obj(0, 1, 0, 0, 5), obj(0, 1, 1, 0, 5), fin(0, 1, false),
			obj(1, 1, 0, 0, 5), fin(1, 1, false)}, 4},
		{"4: object after END_OF_GROUP", []step{withStatus(obj(0, 1, 2, 0, 5), wire.ObjectEndOfGroup),
			obj(1, 1, 3, 1, 5)}, 1},
		{"4: END_OF_GROUP after a larger object", []step{obj(1, 1, 3, 1, 5),
			withStatus(obj(0, 1, 2, 0, 5), wire.ObjectEndOfGroup)}, 1},
		{"4: object after a FIN with END_OF_GROUP", []step{obj(0, 1, 0, 0, 5), fin(0, 1, true), obj(1, 1, 1, 1, 5)}, 2},
		{"4: datagram after the datagram that ends the group", []step{eogDatagram, dg(1, 3)}, 1},
		{"4: two ends of one group", []step{eogDatagram, withStatus(obj(0, 1, 4, 0, 5), wire.ObjectEndOfGroup)}, 1},
		{"5: object after END_OF_TRACK", []step{withStatus(obj(0, 2, 1, 0, 5), wire.ObjectEndOfTrack),
			obj(1, 3, 0, 0, 5)}, 1},
		{"5: END_OF_TRACK before a group already seen", []step{obj(0, 3, 0, 0, 5),
			withStatus(obj(1, 2, 1, 0, 5), wire.ObjectEndOfTrack)}, 1},
		{"5: datagram after END_OF_TRACK", []step{withStatus(obj(0, 2, 1, 0, 5), wire.ObjectEndOfTrack), dg(2, 2)}, 1},
		{"7: datagram then the same object on a stream", []step{dg(1, 4), obj(0, 1, 4, 0, 5)}, 1},
		{"7: stream object then the same as a datagram", []step{obj(0, 1, 4, 0, 5), dg(1, 4)}, 1},
		{"7: streams and datagrams mixed in a group", []step{obj(0, 1, 0, 0, 5), dg(1, 1), obj(0, 1, 2, 0, 5)}, -1},
		{"Mandatory Track Property on an object", []step{withProps(obj(0, 1, 0, 0, 5), mandatory)}, 0},
		{"Mandatory Track Property on a datagram", []step{withProps(dg(1, 0), mandatory)}, 0},
		{"nested IMMUTABLE_PROPERTIES", []step{withProps(obj(0, 1, 0, 0, 5), nested)}, 0},
		{"unparseable IMMUTABLE_PROPERTIES", []step{withProps(dg(1, 0), unparseable)}, 0},
		{"ordinary properties", []step{withProps(obj(0, 1, 0, 0, 5), fine), withProps(dg(1, 1), fine)}, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, run(c.steps))
		})
	}
}
