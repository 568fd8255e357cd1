package wire

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	nsA   = Namespace{[]byte("a")}
	nameB = []byte("b")
)

// golden18 and golden19 are the messages the vectors of control18.txt and
// control19.txt encode.
var golden18 = map[string]Message{
	"fetch-standalone": &Fetch{FetchType: FetchStandalone, TrackNamespace: nsA, TrackName: nameB,
		StartLocation: Location{1, 0}, EndLocation: Location{2, 0}},
	"fetch-relative-joining": &Fetch{RequestID: 2, FetchType: FetchRelativeJoining, JoiningStart: 3,
		Parameters: Params{SubscriberPriority: Some[uint8](128)}},
	"fetch-absolute-joining": &Fetch{RequestID: 4, FetchType: FetchAbsoluteJoining, JoiningStart: 10},
	"fetch-ok":               &FetchOK{EndLocation: Location{2, 1}},
	"goaway-request-id":      &Goaway{Timeout: 1000, RequestID: Some[uint64](5)},
	"goaway-request-stream":  &Goaway{},
	"subscribe-absolute-range": &Subscribe{TrackNamespace: nsA, TrackName: nameB, Parameters: Params{
		Forward: Some(false), LocationFilter: Some(RangeFilterTo(Location{5, 1}, 7))}},
	"subscribe-largest-object": &Subscribe{TrackNamespace: nsA, TrackName: nameB,
		Parameters: Params{LocationFilter: Some(NextObjectFilter())}},
	"subscribe-next-group": &Subscribe{TrackNamespace: nsA, TrackName: nameB,
		Parameters: Params{LocationFilter: Some(RelativeFilter(0))}},
	"subscribe-absolute-start-zero": &Subscribe{TrackNamespace: nsA, TrackName: nameB,
		Parameters: Params{LocationFilter: Some(NoLocationFilter())}},
	"publish-ok": &RequestOK{Parameters: Params{Forward: Some(true), SubscriberPriority: Some[uint8](64),
		GroupOrder: Some(GroupOrderDescending)}},
	"publish-blocked":                      &PublishSkipped{TrackNamespaceSuffix: nsA, TrackName: nameB},
	"publish-done-subscription-ended":      &PublishDone{StatusCode: DoneSubscriptionEnded, StreamCount: 1<<62 - 1},
	"request-error-invalid-joining":        &RequestError{ErrorCode: ReqInvalidJoiningRequestID},
	"request-error-duplicate-subscription": &RequestError{ErrorCode: ReqDuplicateSubscription},
	"setup-unknown-max-request-updates":    &Setup{Unknown: KVList{{Type: 8, Value: 4}}},
}

var golden19 = map[string]Message{
	"goaway": &Goaway{Timeout: 1000},
	"fetch-standalone": &Fetch{FetchType: FetchStandalone, TrackNamespace: nsA, TrackName: nameB,
		StartLocation: Location{1, 0}, EndLocation: Location{2, 0}},
	"subscribe-range-filter": &Subscribe{TrackNamespace: nsA, TrackName: nameB, Parameters: Params{
		LocationFilter: Some(NextObjectFilter()),
		RangeFilters:   []RangeFilter{{Type: ParamSubgroupFilter, Ranges: []Range{{Start: 3, End: 5}}}}}},
	"subscribe-tracks-group-order": &SubscribeTracks{TrackNamespacePrefix: nsA,
		Parameters: Params{GroupOrder: Some(GroupOrderAscending)}},
	"publish-skipped":              &PublishSkipped{TrackNamespaceSuffix: nsA, TrackName: nameB},
	"request-error-invalid-filter": &RequestError{ErrorCode: ReqInvalidFilter},
	"setup-max-request-updates":    &Setup{MaxRequestUpdates: Some[uint64](4)},
}

func TestDraftVectors(t *testing.T) {
	for _, c := range []struct {
		v      Version
		file   string
		golden map[string]Message
	}{{Draft18, "control18.txt", golden18}, {Draft19, "control19.txt", golden19}} {
		vecs := loadVectors(t, c.file)
		require.Equal(t, sortedNames(c.golden), sortedNames(vecs), "%s: every vector has a message", c.file)
		for name, want := range c.golden {
			vec := vecs[name]
			got, err := NewMessageReader(bytes.NewReader(vec.Bytes)).ReadMessage(c.v)
			require.NoError(t, err, "%s %s", c.v, name)
			assert.Equal(t, want, got, "%s %s decodes", c.v, name)
			enc, err := AppendMessage(c.v, nil, want)
			require.NoError(t, err, "%s %s", c.v, name)
			assert.Equal(t, vec.Bytes, enc, "%s %s encodes", c.v, name)
		}
	}
}

// TestDraftVectorsElsewhere decodes each draft's vectors under the other
// drafts: the messages whose layout changed must not decode to the same
// value.
func TestDraftVectorsElsewhere(t *testing.T) {
	for _, name := range []string{"fetch-standalone", "fetch-relative-joining", "goaway-request-id",
		"subscribe-absolute-range"} {
		vec := loadVectors(t, "control18.txt")[name]
		for _, v := range []Version{Draft20, Draft21} {
			got, err := NewMessageReader(bytes.NewReader(vec.Bytes)).ReadMessage(v)
			if err == nil {
				assert.NotEqual(t, golden18[name], got, "%s read as %s", name, v)
			}
		}
	}
	vec := loadVectors(t, "control18.txt")["goaway-request-id"]
	_, err := NewMessageReader(bytes.NewReader(vec.Bytes)).ReadMessage(Draft19)
	requireViolation(t, err, "19 has no GOAWAY Request ID")
}

func requireViolation(t *testing.T, err error, msg string) {
	t.Helper()
	var pe *ProtocolError
	require.ErrorAs(t, err, &pe, msg)
	assert.Equal(t, ProtocolViolation, pe.Code, msg)
}

func TestCrossVersionDecode(t *testing.T) {
	subscribeWith := func(params ...byte) []byte {
		return append([]byte{0, 1, 1, 'a', 1, 'b'}, params...)
	}
	for _, c := range []struct {
		name string
		v    Version
		t    MessageType
		body []byte
	}{
		{"PUBLISH_STATE_NOTIFY in 19", Draft19, MsgPublishStateNotify, []byte{0}},
		{"PUBLISH_STATE_NOTIFY in 18", Draft18, MsgPublishStateNotify, []byte{0}},
		{"0x1E is not PUBLISH_OK in 18", Draft18, 0x1E, []byte{0}},
		{"INCLUDE_PROPERTIES in 19", Draft19, MsgSubscribe, subscribeWith(1, 0x35, 1)},
		{"FILL_PARAMETERS in 19", Draft19, MsgSubscribe, subscribeWith(1, 0x23, 0)},
		{"range filter in 18", Draft18, MsgSubscribe, subscribeWith(1, 0x25, 3, 0, 3, 2)},
		{"filter type 5", Draft18, MsgSubscribe, subscribeWith(1, 0x21, 1, 5)},
		{"AbsoluteStart without start", Draft19, MsgSubscribe, subscribeWith(1, 0x21, 1, 3)},
		{"field-count filter in 18", Draft18, MsgSubscribe, subscribeWith(1, 0x21, 3, 5, 1, 2)},
		{"GROUP_ORDER in SUBSCRIBE_TRACKS in 18", Draft18, MsgSubscribeTracks, []byte{0, 1, 1, 'a', 1, 0x22, 1}},
		{"LOCATION_FILTER in 18 FETCH", Draft18, MsgFetch, []byte{0, 1, 1, 1, 'a', 1, 'b', 1, 0, 2, 0, 1, 0x21, 1, 2}},
		{"fetch type 4", Draft19, MsgFetch, []byte{0, 4, 0}},
		{"GOAWAY Request ID in 21", Draft21, MsgGoaway, []byte{0, 0, 5}},
	} {
		_, err := ParseMessage(c.v, c.t, c.body)
		requireViolation(t, err, c.name)
	}
}

func TestCrossVersionEncode(t *testing.T) {
	filter := func(f LocationFilter) *Subscribe {
		return &Subscribe{TrackNamespace: nsA, Parameters: Params{LocationFilter: Some(f)}}
	}
	for _, c := range []struct {
		name string
		v    Version
		m    Message
	}{
		{"PUBLISH_STATE_NOTIFY", Draft18, &PublishStateNotify{}},
		{"joining FETCH", Draft21, &Fetch{FetchType: FetchRelativeJoining}},
		{"FETCH end location", Draft20, &Fetch{EndLocation: Location{2, 0}}},
		{"LOCATION_FILTER in FETCH", Draft19, &Fetch{Parameters: Params{LocationFilter: Some(NextObjectFilter())}}},
		{"FILL_PARAMETERS", Draft19, &Subscribe{Parameters: Params{FillParameters: &Params{}}}},
		{"INCLUDE_PROPERTIES", Draft18, &Subscribe{Parameters: Params{IncludeProperties: Some(true)}}},
		{"range filter", Draft18, &Subscribe{Parameters: Params{RangeFilters: []RangeFilter{{Type: ParamSubgroupFilter, Clear: true}}}}},
		{"GROUP_ORDER in SUBSCRIBE_TRACKS", Draft18, &SubscribeTracks{Parameters: Params{GroupOrder: Some(GroupOrderAscending)}}},
		{"relative filter N>0", Draft18, filter(RelativeFilter(2))},
		{"filter to an object", Draft19, filter(RangeFilterToObject(Location{1, 0}, Location{2, 3}))},
		{"GOAWAY Request ID", Draft19, &Goaway{RequestID: Some[uint64](1)}},
		{"INVALID_FILTER", Draft18, &RequestError{ErrorCode: ReqInvalidFilter}},
		{"INVALID_JOINING_REQUEST_ID", Draft21, &RequestError{ErrorCode: ReqInvalidJoiningRequestID}},
		{"DUPLICATE_SUBSCRIPTION", Draft19, &RequestError{ErrorCode: ReqDuplicateSubscription}},
		{"SUBSCRIPTION_ENDED", Draft20, &PublishDone{StatusCode: DoneSubscriptionEnded}},
		{"MAX_FILTER_RANGES", Draft18, &Setup{MaxFilterRanges: Some[uint64](1)}},
		{"PUBLISH_OK parameter in 21", Draft21, &RequestOK{Parameters: Params{Forward: Some(true)}}},
	} {
		_, err := AppendMessage(c.v, nil, c.m)
		require.ErrorIs(t, err, ErrNotInDraft, c.name)
		var nd *NotInDraftError
		require.ErrorAs(t, err, &nd)
		assert.Equal(t, c.v, nd.Version, c.name)
		assert.Contains(t, err.Error(), c.v.String(), c.name)
	}
	// A code that no draft defines is the application's choice: it encodes.
	_, err := AppendMessage(Draft18, nil, &RequestError{ErrorCode: 0x7f})
	require.NoError(t, err)
}

// TestRoundTripAllDrafts encodes messages every draft can express under
// each draft and decodes them back.
func TestRoundTripAllDrafts(t *testing.T) {
	msgs := []Message{
		&Subscribe{RequestID: 4, TrackNamespace: nsA, TrackName: nameB, Parameters: Params{
			Forward: Some(true), SubscriberPriority: Some[uint8](3), LocationFilter: Some(StartFilter(Location{9, 2}))}},
		&SubscribeOK{TrackAlias: 7, Parameters: Params{LargestObject: Some(Location{4, 4}), Expires: Some[uint64](9)}},
		&RequestUpdate{RequestID: 6, Parameters: Params{LocationFilter: Some(RangeFilterTo(Location{1, 1}, 3))}},
		&RequestError{ErrorCode: ReqRedirect, ErrorReason: "x", Redirect: Some(Redirect{TrackNamespace: nsA, TrackName: nameB})},
		&PublishDone{StatusCode: DoneTrackEnded, StreamCount: 3},
		&Goaway{NewSessionURI: "moqt://b", Timeout: 5},
		&TrackStatus{RequestID: 8, TrackNamespace: nsA, TrackName: nameB},
		&NamespaceMsg{TrackNamespaceSuffix: nsA},
	}
	for _, v := range Versions {
		for _, m := range msgs {
			enc, err := AppendMessage(v, nil, m)
			require.NoError(t, err, "%s %s", v, m.Type())
			got, err := NewMessageReader(bytes.NewReader(enc)).ReadMessage(v)
			require.NoError(t, err, "%s %s", v, m.Type())
			assert.Equal(t, m, got, "%s %s", v, m.Type())
		}
	}
}

func TestFetchStreamTimedOutRange(t *testing.T) {
	o := FetchObject{EndOfRange: EndOfTimedOutRange, GroupID: 1, ObjectID: 2}
	for _, v := range Versions {
		e := FetchEncoder{Version: v}
		b, err := e.AppendObject(nil, o)
		d := FetchDecoder{Version: v}
		raw := Location{1, 2}.Append(AppendVarint(nil, uint64(EndOfTimedOutRange)))
		got, _, derr := d.Parse(raw)
		if v.Profile().TimedOutRange {
			require.NoError(t, err)
			require.NoError(t, derr)
			assert.Equal(t, o, got)
			assert.Equal(t, raw, b)
			continue
		}
		require.ErrorIs(t, err, ErrNotInDraft, "%s", v)
		requireViolation(t, derr, v.String()+": 0x20C is not an End of Range")
	}
}

func TestProfiles(t *testing.T) {
	p18, p19, p20, p21 := Draft18.Profile(), Draft19.Profile(), Draft20.Profile(), Draft21.Profile()
	assert.Equal(t, "PUBLISH_BLOCKED", p18.MessageName(MsgPublishSkipped))
	assert.Equal(t, "PUBLISH_SKIPPED", p19.MessageName(MsgPublishSkipped))
	assert.True(t, p18.GoawayRequestID && !p19.GoawayRequestID && !p21.GoawayRequestID)
	assert.True(t, p18.JoiningFetch && p19.JoiningFetch && !p20.JoiningFetch)
	assert.True(t, !p19.FillStreams && p20.FillStreams)
	assert.True(t, !p18.RangeFilters && p19.RangeFilters)
	assert.Equal(t, uint64(1<<62-1), p18.UnknownStreamCount)
	assert.Equal(t, uint64(MaxVarint), p21.UnknownStreamCount)
	assert.True(t, p19.HasSessionError(VersionNegotiationFailed))
	assert.False(t, p20.HasSessionError(VersionNegotiationFailed))
	assert.False(t, p18.HasSessionError(TooManyRequestUpdates))
	assert.True(t, p18.HasRequestError(ReqDuplicateSubscription))
	assert.False(t, p19.HasRequestError(ReqDuplicateSubscription))
	assert.True(t, p19.HasRequestError(ReqInvalidJoiningRequestID))
	assert.False(t, p21.HasRequestError(ReqInvalidJoiningRequestID))
	assert.True(t, p19.HasPublishDoneCode(DoneSubscriptionEnded))
	assert.False(t, p21.HasPublishDoneCode(DoneSubscriptionEnded))
	assert.False(t, p18.HasSetupOption(SetupMaxRequestUpdates))
	assert.True(t, p19.HasSetupOption(SetupMaxFilterRanges))
	for _, p := range []*Profile{p18, p19, p21} {
		assert.True(t, p.HasResetCode(ResetMalformedTrack))
	}
	c, ok := p18.ParamContexts(ParamGroupOrder)
	require.True(t, ok)
	assert.NotZero(t, c&InPublishOK)
	c, _ = p19.ParamContexts(ParamGroupOrder)
	assert.Zero(t, c&InPublishOK)
	assert.NotZero(t, c&InSubscribeTracks)
	_, ok = p19.ParamContexts(ParamIncludeProperties)
	assert.False(t, ok)
}

func TestParamsForDraft(t *testing.T) {
	p := Params{Forward: Some(false), SubscriberPriority: Some[uint8](9)}
	b, err := p.AppendFor(Draft18, InPublishOK, nil)
	require.NoError(t, err, "18 carries subscription parameters in PUBLISH_OK")
	got, err := ParseParamsFor(Draft18, b, InPublishOK)
	require.NoError(t, err)
	assert.Equal(t, p, got)
	require.NoError(t, got.CheckFor(Draft19, InPublishOK))
	requireViolation(t, got.CheckFor(Draft21, InPublishOK), "21 moved them to REQUEST_UPDATE")
	_, err = p.AppendFor(Draft21, InPublishOK, nil)
	require.ErrorIs(t, err, ErrNotInDraft)
}
