package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawBody builds bytes by hand: an int or uint64 is appended as a minimal
// vi64, a []byte or string verbatim.
func rawBody(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch v := p.(type) {
		case int:
			b = AppendVarint(b, uint64(v))
		case uint64:
			b = AppendVarint(b, v)
		case []byte:
			b = append(b, v...)
		case string:
			b = append(b, v...)
		default:
			panic("rawBody: unsupported part")
		}
	}
	return b
}

// subscribeWith returns a SUBSCRIBE body for request 6, ("n"), "t", with
// count parameters given as raw bytes.
func subscribeWith(count int, params ...any) []byte {
	return rawBody(append([]any{6, 1, 1, "n", 1, "t", count}, params...)...)
}

// u8 is a uint8 field.
func u8(v byte) []byte { return []byte{v} }

func TestC015_GroupOrderOutOfRange(t *testing.T) {
	for _, v := range []byte{0, 3, 0x80, 0xff} {
		_, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, int(ParamGroupOrder), u8(v)))
		assertCloses(t, err, ProtocolViolation)
	}
	for _, v := range []byte{1, 2} {
		m, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, int(ParamGroupOrder), u8(v)))
		require.NoError(t, err)
		assert.Equal(t, Some(GroupOrder(v)), m.(*Subscribe).Parameters.GroupOrder)
	}
	// Inside FILL_PARAMETERS too.
	_, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, int(ParamFillParameters), 3, 1, int(ParamGroupOrder), u8(0)))
	assertCloses(t, err, ProtocolViolation)
	// The encoder refuses to write one.
	_, err = AppendMessage(Draft21, nil, &Subscribe{TrackName: []byte("t"), Parameters: Params{GroupOrder: Some(GroupOrder(3))}})
	assertCloses(t, err, ProtocolViolation)
}

func TestC017_ForwardOutOfRange(t *testing.T) {
	for _, v := range []byte{2, 0x7f, 0xff} {
		_, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, int(ParamForward), u8(v)))
		assertCloses(t, err, ProtocolViolation)
		// INCLUDE_PROPERTIES has the same 0/1 rule (§9.20.22).
		_, err = ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, int(ParamIncludeProperties), u8(v)))
		assertCloses(t, err, ProtocolViolation)
	}
	_, err := ParseMessage(Draft21, MsgPublishStateNotify, rawBody(1, int(ParamForward), u8(2)))
	assertCloses(t, err, ProtocolViolation)
}

// TestC025_DuplicateRangeFilter: a repeated (Parameter Type, SetID, Property
// Type) is rejected with INVALID_FILTER, and the message, with its Request
// ID, still decodes.
func TestC025_DuplicateRangeFilter(t *testing.T) {
	sub := func(p1, p2 []byte) []byte { return subscribeWith(2, p1, p2) }
	subgroup := func(set byte) []byte { return rawBody(int(ParamSubgroupFilter), 3, u8(set), 0, 1) }
	prop := func(delta int, set byte, ptype int) []byte {
		return rawBody(delta, 3, u8(set), ptype, 0)
	}
	cases := []struct {
		name   string
		body   []byte
		reject bool
	}{
		{"same type and SetID", sub(subgroup(0), rawBody(0, 3, u8(0), 5, 1)), true},
		{"different SetID", sub(subgroup(0), rawBody(0, 3, u8(1), 5, 1)), false},
		{"same property type", sub(prop(int(ParamObjectPropertyFilter), 2, 0x40), prop(0, 2, 0x40)), true},
		{"different property type", sub(prop(int(ParamObjectPropertyFilter), 2, 0x40), prop(0, 2, 0x42)), false},
		{"different filter type", sub(subgroup(0), rawBody(1, 3, u8(0), 5, 1)), false},
		{"removal form does not count", sub(rawBody(int(ParamSubgroupFilter), 0), rawBody(0, 0)), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := ParseMessage(Draft21, MsgSubscribe, c.body)
			if !c.reject {
				require.NoError(t, err)
				return
			}
			assertRejects(t, err, ReqInvalidFilter)
			require.NotNil(t, m)
			s := m.(*Subscribe)
			assert.Equal(t, uint64(6), s.RequestID)
			assert.Equal(t, []byte("t"), s.TrackName)
			assert.Len(t, s.Parameters.RangeFilters, 2)
		})
	}
	t.Run("in every message that carries filters", func(t *testing.T) {
		dup := rawBody(2, subgroup(7), rawBody(0, 3, u8(7), 9, 0))
		for _, c := range []struct {
			typ  MessageType
			body []byte
			id   func(Message) uint64
		}{
			{MsgFetch, rawBody(10, 1, 1, "n", 1, "t", dup), func(m Message) uint64 { return m.(*Fetch).RequestID }},
			{MsgRequestUpdate, rawBody(12, dup), func(m Message) uint64 { return m.(*RequestUpdate).RequestID }},
			{MsgSubscribeTracks, rawBody(14, 0, dup), func(m Message) uint64 { return m.(*SubscribeTracks).RequestID }},
		} {
			m, err := ParseMessage(Draft21, c.typ, c.body)
			assertRejects(t, err, ReqInvalidFilter)
			require.NotNil(t, m, "%s", c.typ)
			assert.NotZero(t, c.id(m), "%s keeps its Request ID", c.typ)
		}
	})
	t.Run("inside FILL_PARAMETERS", func(t *testing.T) {
		inner := rawBody(2, subgroup(0), rawBody(0, 3, u8(0), 5, 1))
		_, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, int(ParamFillParameters), len(inner), inner))
		assertRejects(t, err, ReqInvalidFilter)
	})
	t.Run("a session error after the filter wins", func(t *testing.T) {
		body := append(sub(subgroup(0), rawBody(0, 3, u8(0), 5, 1)), 0x00)
		_, err := ParseMessage(Draft21, MsgSubscribe, body)
		assertCloses(t, err, ProtocolViolation)
		body = subscribeWith(3, subgroup(0), rawBody(0, 3, u8(0), 5, 1), rawBody(0x0b, u8(9))) // then FORWARD 9
		_, err = ParseMessage(Draft21, MsgSubscribe, body)
		assertCloses(t, err, ProtocolViolation)
	})
}

func TestC028_RangeDeltaOverflow(t *testing.T) {
	// Start delta: range 0 to 2^64-1, then a Start delta of 1.
	start := rawBody(int(ParamObjectIDFilter), 1+1+9+1, u8(0), 0, uint64(MaxVarint), 1)
	m, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, start))
	assertRejects(t, err, ReqInvalidFilter)
	assert.Equal(t, uint64(6), m.(*Subscribe).RequestID)
	// End delta: Start 5, End delta 2^64-1.
	end := rawBody(int(ParamObjectIDFilter), 1+1+9, u8(0), 5, uint64(MaxVarint))
	_, err = ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, end))
	assertRejects(t, err, ReqInvalidFilter)
	// Reaching exactly 2^64-1 is fine.
	edge := rawBody(int(ParamObjectIDFilter), 1+1+9, u8(0), 1, uint64(MaxVarint-1))
	m, err = ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, edge))
	require.NoError(t, err)
	assert.Equal(t, []Range{{Start: 1, End: MaxVarint}}, m.(*Subscribe).Parameters.RangeFilters[0].Ranges)
}

func TestC029_LocationFilterEndGroupOverflow(t *testing.T) {
	lf := func(start uint64, delta uint64) []byte {
		v := rawBody(start, 0, delta)
		return rawBody(int(ParamLocationFilter), len(v), v)
	}
	_, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, lf(MaxVarint, 1)))
	assertCloses(t, err, ProtocolViolation)
	_, err = ParseMessage(Draft21, MsgFetch, subscribeWith(1, lf(1<<63, 1<<63)))
	assertCloses(t, err, ProtocolViolation)
	m, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, lf(MaxVarint-1, 1)))
	require.NoError(t, err)
	assert.Equal(t, uint64(MaxVarint), m.(*Subscribe).Parameters.LocationFilter.Value.EndGroup)
	// More than four fields is not a Location Filter.
	_, err = ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, int(ParamLocationFilter), 5, rawBody(1, 2, 3, 4, 5)))
	assertCloses(t, err, ProtocolViolation)
	// A length that splits a field is a truncation.
	_, err = ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, int(ParamLocationFilter), 1, []byte{0x81}, 0x00))
	assertCloses(t, err, ProtocolViolation)
}

func TestC030_PriorityFilterAbove255(t *testing.T) {
	pf := func(ranges ...any) []byte {
		v := rawBody(append([]any{u8(0)}, ranges...)...)
		return rawBody(int(ParamPriorityFilter), len(v), v)
	}
	for name, f := range map[string][]byte{
		"end 256":        pf(0, 256),
		"open start 256": pf(256),
		"second range":   pf(0, 10, 250, 20),
	} {
		_, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, f))
		assertRejects(t, err, ReqInvalidFilter)
		_ = name
	}
	m, err := ParseMessage(Draft21, MsgFetch, subscribeWith(1, pf(0, 255)))
	require.NoError(t, err)
	assert.Equal(t, []Range{{Start: 0, End: 255}}, m.(*Fetch).Parameters.RangeFilters[0].Ranges)
}

func TestC031_ObjectPropertyFilterOddType(t *testing.T) {
	f := rawBody(int(ParamObjectPropertyFilter), 4, u8(0), 0x3D, 1, 0)
	m, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, f))
	assertRejects(t, err, ReqInvalidFilter)
	assert.Equal(t, uint64(0x3D), m.(*Subscribe).Parameters.RangeFilters[0].PropertyType)
	f = rawBody(int(ParamObjectPropertyFilter), 4, u8(0), 0x3C, 1, 0)
	_, err = ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, f))
	assert.NoError(t, err)
}

func TestC032_TrackPropertyFilterOddType(t *testing.T) {
	f := rawBody(int(ParamTrackPropertyFilter), 4, u8(0), 0x31, 1, 0)
	m, err := ParseMessage(Draft21, MsgSubscribeTracks, rawBody(2, 1, 4, "live", 1, f))
	assertRejects(t, err, ReqInvalidFilter)
	assert.Equal(t, uint64(2), m.(*SubscribeTracks).RequestID)
	// A property filter needs its Property Type.
	f = rawBody(int(ParamTrackPropertyFilter), 1, u8(0))
	_, err = ParseMessage(Draft21, MsgSubscribeTracks, rawBody(2, 1, 4, "live", 1, f))
	assertCloses(t, err, ProtocolViolation)
}

func TestC097_FillParametersDisallowedParameter(t *testing.T) {
	fill := func(inner []byte) []byte {
		return subscribeWith(1, int(ParamFillParameters), len(inner), inner)
	}
	for name, inner := range map[string][]byte{
		"FORWARD":               rawBody(1, int(ParamForward), u8(1)),
		"AUTHORIZATION_TOKEN":   rawBody(1, int(ParamAuthorizationToken), 2, 2, 1),
		"OBJECT_DELIVERY":       rawBody(1, int(ParamObjectDeliveryTimeout), 5),
		"TRACK_PROPERTY_FILTER": rawBody(1, int(ParamTrackPropertyFilter), 0),
		"nested FILL":           rawBody(1, int(ParamFillParameters), 1, 0),
		"NEW_GROUP_REQUEST":     rawBody(1, int(ParamNewGroupRequest), 0),
	} {
		_, err := ParseMessage(Draft21, MsgSubscribe, fill(inner))
		assertCloses(t, err, ProtocolViolation)
		_ = name
	}
	// Every listed parameter is accepted (Table 6), as is an empty list.
	listed := rawBody(8, int(ParamFillTimeout), 1, 0x16, u8(5), 1, 0, 1, u8(2),
		3, 0, 1, 0, 1, 0, 1, 0)
	m, err := ParseMessage(Draft21, MsgSubscribe, fill(listed))
	require.NoError(t, err)
	fp := m.(*Subscribe).Parameters.FillParameters
	require.NotNil(t, fp)
	assert.Equal(t, Some[uint8](5), fp.SubscriberPriority)
	assert.Len(t, fp.RangeFilters, 4)
	m, err = ParseMessage(Draft21, MsgSubscribe, fill(rawBody(0)))
	require.NoError(t, err)
	assert.Equal(t, &Params{}, m.(*Subscribe).Parameters.FillParameters, "present but empty requests a fill")
	// Trailing bytes inside the FILL_PARAMETERS value.
	_, err = ParseMessage(Draft21, MsgSubscribe, fill(rawBody(0, 0)))
	assertCloses(t, err, ProtocolViolation)
}

func TestParamRepeated(t *testing.T) {
	for _, p := range []ParamType{ParamForward, ParamObjectDeliveryTimeout, ParamSubscriberPriority} {
		_, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(2, int(p), u8(1), 0, u8(1)))
		assertCloses(t, err, ProtocolViolation)
	}
	_, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(2, int(ParamLocationFilter), 0, 0, 0))
	assertCloses(t, err, ProtocolViolation)
	// AUTHORIZATION_TOKEN may repeat (§8.9).
	m, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(2, int(ParamAuthorizationToken), 2, 2, 1, 0, 2, 2, 3))
	require.NoError(t, err)
	assert.Len(t, m.(*Subscribe).Parameters.AuthorizationTokens, 2)
}

func TestParamUnknown(t *testing.T) {
	for _, typ := range []int{0x00, 0x01, 0x05, 0x07, 0x24, 0x2A, 0x33, 0x36, 0x9D} {
		_, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, typ, 0))
		assertCloses(t, err, ProtocolViolation)
	}
	// A type delta past 2^64-1.
	_, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(2, int(ParamForward), u8(1), uint64(MaxVarint), 0))
	assertCloses(t, err, ProtocolViolation)
}

func TestParamNotAllowedInMessage(t *testing.T) {
	cases := []struct {
		name string
		typ  MessageType
		body []byte
	}{
		{"EXPIRES in SUBSCRIBE", MsgSubscribe, subscribeWith(1, int(ParamExpires), 0)},
		{"LARGEST_OBJECT in SUBSCRIBE", MsgSubscribe, subscribeWith(1, int(ParamLargestObject), 0, 0)},
		{"TRACK_PROPERTY_FILTER in SUBSCRIBE", MsgSubscribe, subscribeWith(1, int(ParamTrackPropertyFilter), 0)},
		{"TRACK_NAMESPACE_PREFIX in SUBSCRIBE", MsgSubscribe, subscribeWith(1, int(ParamTrackNamespacePrefix), 0)},
		{"FILL_TIMEOUT in SUBSCRIBE", MsgSubscribe, subscribeWith(1, int(ParamFillTimeout), 0)},
		{"RENDEZVOUS_TIMEOUT in FETCH", MsgFetch, subscribeWith(1, int(ParamRendezvousTimeout), 0)},
		{"FORWARD in FETCH", MsgFetch, subscribeWith(1, int(ParamForward), u8(1))},
		{"SUBSCRIBER_PRIORITY in TRACK_STATUS", MsgTrackStatus, subscribeWith(1, int(ParamSubscriberPriority), u8(1))},
		{"FORWARD in SUBSCRIBE_NAMESPACE", MsgSubscribeNamespace, rawBody(2, 0, 1, int(ParamForward), u8(1))},
		{"EXPIRES in PUBLISH_NAMESPACE", MsgPublishNamespace, rawBody(2, 0, 1, int(ParamExpires), 0)},
		{"GROUP_ORDER in SUBSCRIBE_OK", MsgSubscribeOK, rawBody(1, 1, int(ParamGroupOrder), u8(1))},
		{"EXPIRES in FETCH_OK", MsgFetchOK, rawBody(u8(0), 0, 0, 1, int(ParamExpires), 0)},
		{"LARGEST_OBJECT in FETCH_OK", MsgFetchOK, rawBody(u8(0), 0, 0, 1, int(ParamLargestObject), 0, 0)},
		{"SUBSCRIBER_PRIORITY in PUBLISH_STATE_NOTIFY", MsgPublishStateNotify, rawBody(1, int(ParamSubscriberPriority), u8(1))},
		{"RENDEZVOUS_TIMEOUT in PUBLISH", MsgPublish, rawBody(2, 1, 1, "n", 1, "t", 0, 1, int(ParamRendezvousTimeout), 0)},
		{"FORWARD in REQUEST_OK", MsgRequestOK, rawBody(1, int(ParamForward), u8(1))},
		{"FILL_PARAMETERS in REQUEST_OK", MsgRequestOK, rawBody(1, int(ParamFillParameters), 1, 0)},
		{"EXPIRES in REQUEST_UPDATE", MsgRequestUpdate, rawBody(2, 1, int(ParamExpires), 0)},
		{"RENDEZVOUS_TIMEOUT in REQUEST_UPDATE", MsgRequestUpdate, rawBody(2, 1, int(ParamRendezvousTimeout), 0)},
	}
	for _, c := range cases {
		_, err := ParseMessage(Draft21, c.typ, c.body)
		assertCloses(t, err, ProtocolViolation)
		assert.Contains(t, err.Error(), "not allowed", c.name)
	}
}

// TestParamSubscribeTracksTakesSubscribeParams: any parameter valid in
// SUBSCRIBE is valid in SUBSCRIBE_TRACKS, including a Location Filter and
// FILL_PARAMETERS (§9.18.1).
func TestParamSubscribeTracksTakesSubscribeParams(t *testing.T) {
	body := rawBody(4, 0, 4,
		int(ParamRendezvousTimeout), 10,
		int(ParamSubscriberPriority-ParamRendezvousTimeout), u8(9),
		1, 2, 0, 0, // LOCATION_FILTER: Next Object
		2, 3, 1, 0x21, 0, // FILL_PARAMETERS: a zero-length LOCATION_FILTER
	)
	m, err := ParseMessage(Draft21, MsgSubscribeTracks, body)
	require.NoError(t, err)
	p := m.(*SubscribeTracks).Parameters
	assert.Equal(t, Some(NextObjectFilter()), p.LocationFilter)
	assert.Equal(t, &Params{LocationFilter: Some(NoLocationFilter())}, p.FillParameters)
	assert.NoError(t, p.Check(InSubscribeTracks))
}

func TestParamCountLargerThanBody(t *testing.T) {
	_, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(200, int(ParamForward), u8(1)))
	assertCloses(t, err, ProtocolViolation)
	assert.ErrorIs(t, err, ErrTruncated)
	_, err = ParseMessage(Draft21, MsgSubscribe, subscribeWith(2, int(ParamForward), u8(1)))
	assert.ErrorIs(t, err, ErrTruncated)
}

func TestParamMalformedAuthorizationToken(t *testing.T) {
	for name, tok := range map[string][]byte{
		"unknown alias type":  rawBody(4, 1),
		"DELETE with a value": rawBody(0, 1, 9),
		"REGISTER truncated":  rawBody(1, 1),
		"empty":               {},
	} {
		_, err := ParseMessage(Draft21, MsgSubscribe, subscribeWith(1, int(ParamAuthorizationToken), len(tok), tok))
		assertCloses(t, err, KeyValueFormattingError)
		_ = name
	}
}

func TestParamsCheckPreciseContext(t *testing.T) {
	m, err := ParseMessage(Draft21, MsgRequestUpdate, bodyOf(t, controlGolden["request-update-prefix"]))
	require.NoError(t, err)
	u := m.(*RequestUpdate)
	assert.NoError(t, u.Check(InUpdateSubscribeNamespace))
	assert.NoError(t, u.Check(InUpdateSubscribeTracks))
	assertCloses(t, u.Check(InUpdateSubscription), ProtocolViolation)
	assertCloses(t, u.Check(InUpdateFetch), ProtocolViolation)

	sub := controlGolden["request-update"].(*RequestUpdate)
	assert.NoError(t, sub.Check(InUpdateSubscription))
	assertCloses(t, sub.Check(InUpdateFetch), ProtocolViolation)
}

// bodyOf returns the encoded body of m.
func bodyOf(t testing.TB, m Message) []byte {
	t.Helper()
	b, err := m.AppendBody(Draft21, nil)
	require.NoError(t, err)
	return b
}

// TestC026_RangeCountForMaxFilterRanges: the figure the session compares
// with the peer's MAX_FILTER_RANGES counts every Range of every range
// filter of the request (§3.3.2, §9.1.6); FILL_PARAMETERS is its own scope.
func TestC026_RangeCountForMaxFilterRanges(t *testing.T) {
	assert.Equal(t, 6, controlGolden["subscribe-filters"].(*Subscribe).Parameters.RangeCount())
	assert.Equal(t, 3, loadedSubscribe().Parameters.RangeCount())
	assert.Equal(t, 0, controlGolden["subscribe-params"].(*Subscribe).Parameters.RangeCount())
}

// TestOptGet: Get is the comma-ok form of Set and Value, and an absent
// Opt yields the zero value even when Value was filled in.
func TestOptGet(t *testing.T) {
	v, ok := Some(uint64(7)).Get()
	assert.True(t, ok)
	assert.Equal(t, uint64(7), v)

	v, ok = Opt[uint64]{}.Get()
	assert.False(t, ok)
	assert.Zero(t, v)

	v, ok = Opt[uint64]{Value: 9}.Get()
	assert.False(t, ok, "Set decides presence")
	assert.Zero(t, v)

	loc, ok := Some(Location{Group: 1, Object: 2}).Get()
	assert.True(t, ok)
	assert.Equal(t, Location{Group: 1, Object: 2}, loc)
}
