package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// assertCloses asserts that err is a *ProtocolError with code.
func assertCloses(t testing.TB, err error, code SessionErrorCode) {
	t.Helper()
	var pe *ProtocolError
	if assert.ErrorAs(t, err, &pe) {
		assert.Equal(t, code, pe.Code, "%v", err)
	}
	var re *RejectError
	assert.False(t, errors.As(err, &re), "a session error is not a rejection")
}

// assertRejects asserts that err is a *RejectError with code.
func assertRejects(t testing.TB, err error, code RequestErrorCode) {
	t.Helper()
	var re *RejectError
	if assert.ErrorAs(t, err, &re) {
		assert.Equal(t, code, re.Code, "%v", err)
	}
	var pe *ProtocolError
	assert.False(t, errors.As(err, &pe), "a rejection is not a session error")
}

// controlGolden holds, for every vector of control.txt, the message it
// decodes to, written out by hand.
var controlGolden = map[string]Message{
	"setup-empty": &Setup{},
	"setup-known": &Setup{
		Path: Some("/live"),
		AuthorizationTokens: []Token{
			{AliasType: TokenUseValue, Type: 0, Value: []byte("abc")},
			{AliasType: TokenRegister, Alias: 7, Type: 0, Value: []byte("xy")},
		},
		MaxAuthTokenCacheSize: Some[uint64](4096),
		Authority:             Some("example.com:443"),
		MaxFilterRanges:       Some[uint64](16),
		MoqtImplementation:    Some("moqt-go/0.1"),
		MaxRequestUpdates:     Some[uint64](4),
	},
	"setup-unknown": &Setup{
		MaxFilterRanges: Some[uint64](2),
		Unknown: KVList{
			{Type: 0x0A, Value: 300},
			{Type: 0x0A, Value: 1},
			{Type: 0x9D, Bytes: []byte("hi")},
			{Type: 0x9D, Bytes: []byte{}},
		},
	},
	"goaway":       &Goaway{NewSessionURI: "moqt://b.example", Timeout: 5000},
	"goaway-empty": &Goaway{},
	"subscribe-minimal": &Subscribe{
		RequestID:      0,
		TrackNamespace: NewNamespace("live"),
		TrackName:      []byte("video"),
	},
	"subscribe-params": &Subscribe{
		RequestID:      2,
		TrackNamespace: NewNamespace("example.com", "meeting"),
		TrackName:      []byte("audio"),
		Parameters: Params{
			ObjectDeliveryTimeout:   Some[uint64](1000),
			AuthorizationTokens:     []Token{{AliasType: TokenUseAlias, Alias: 5}},
			SubgroupDeliveryTimeout: Some[uint64](250),
			Forward:                 Some(false),
			SubscriberPriority:      Some[uint8](200),
			LocationFilter:          Some(RelativeFilter(1)),
			GroupOrder:              Some(GroupOrderDescending),
			NewGroupRequest:         Some[uint64](0),
			IncludeProperties:       Some(false),
		},
	},
	"subscribe-filters": &Subscribe{
		RequestID:      4,
		TrackNamespace: NewNamespace("a"),
		TrackName:      []byte{},
		Parameters: Params{
			RendezvousTimeout: Some[uint64](100),
			LocationFilter:    Some(NextObjectFilter()),
			FillParameters: &Params{
				FillTimeout:    Some[uint64](0),
				LocationFilter: Some(RelativeFilter(1)),
				GroupOrder:     Some(GroupOrderAscending),
			},
			RangeFilters: []RangeFilter{
				{Type: ParamSubgroupFilter, SetID: 0, Ranges: []Range{{Start: 3, End: 5}, {Start: 10, End: 15}}},
				{Type: ParamObjectIDFilter, SetID: 1, Ranges: []Range{{Start: 10, Open: true}}},
				{Type: ParamPriorityFilter, SetID: 0, Ranges: []Range{{Start: 0, End: 127}}},
				{Type: ParamPriorityFilter, SetID: 1, Ranges: []Range{{Start: 200, End: 255}}},
				{Type: ParamObjectPropertyFilter, SetID: 0, PropertyType: 0x3C, Ranges: []Range{{Start: 1, End: 1}}},
			},
		},
	},
	"subscribe-location-3": &Subscribe{
		RequestID:      10,
		TrackNamespace: NewNamespace("n"),
		TrackName:      []byte("t"),
		Parameters:     Params{LocationFilter: Some(RangeFilterTo(Location{10, 0}, 12))},
	},
	"subscribe-ok": &SubscribeOK{
		TrackAlias: 7,
		Parameters: Params{Expires: Some[uint64](0), LargestObject: Some(Location{100, 0})},
		TrackProperties: KVList{
			{Type: PropDefaultPublisherPriority, Value: 64},
			{Type: PropDefaultPublisherGroupOrder, Value: 1},
			{Type: 0x3801, Bytes: []byte("z")},
		},
	},
	"subscribe-ok-minimal": &SubscribeOK{},
	"publish-state-notify": &PublishStateNotify{Parameters: Params{
		LargestObject:  Some(Location{9, 4}),
		Forward:        Some(true),
		LocationFilter: Some(StartFilter(Location{9, 5})),
	}},
	"publish": &Publish{
		RequestID:      1,
		TrackNamespace: NewNamespace("live"),
		TrackName:      []byte("v"),
		TrackAlias:     3,
		Parameters: Params{
			Expires:       Some[uint64](60000),
			LargestObject: Some(Location{2, 9}),
			Forward:       Some(true),
			GroupOrder:    Some(GroupOrderAscending),
		},
		TrackProperties: KVList{{Type: PropDynamicGroups, Value: 1}},
	},
	"publish-done":              &PublishDone{StatusCode: DoneTrackEnded, StreamCount: MaxVarint, ErrorReason: "bye"},
	"publish-done-unknown-code": &PublishDone{StatusCode: 0x9D},
	"fetch": &Fetch{
		RequestID:      12,
		TrackNamespace: NewNamespace("n"),
		TrackName:      []byte("t"),
		Parameters: Params{
			FillTimeout:       Some[uint64](2000),
			LocationFilter:    Some(RangeFilterToObject(Location{5, 1}, Location{7, 3})),
			GroupOrder:        Some(GroupOrderDescending),
			IncludeProperties: Some(true),
		},
	},
	"fetch-ok": &FetchOK{
		EndOfTrack:      true,
		EndLocation:     Location{7, 3},
		TrackProperties: KVList{{Type: PropMaxCacheDuration, Value: 10000}},
	},
	"fetch-ok-open": &FetchOK{EndLocation: Location{300, 0}},
	"track-status": &TrackStatus{
		RequestID:      14,
		TrackNamespace: NewNamespace("n"),
		TrackName:      []byte("t"),
		Parameters: Params{
			AuthorizationTokens: []Token{{AliasType: TokenUseValue, Value: []byte("k")}},
			IncludeProperties:   Some(true),
		},
	},
	"request-ok": &RequestOK{
		Parameters:      Params{LargestObject: Some(Location{5, 7})},
		TrackProperties: KVList{{Type: PropDefaultPublisherPriority, Value: 128}},
	},
	"request-ok-empty": &RequestOK{},
	"request-error":    &RequestError{ErrorCode: ReqDoesNotExist, ErrorReason: "no"},
	"request-error-redirect": &RequestError{
		ErrorCode:     ReqRedirect,
		RetryInterval: 1,
		Redirect: Some(Redirect{
			ConnectURI:     "moqt://b.example",
			TrackNamespace: NewNamespace("live"),
			TrackName:      []byte("v"),
		}),
	},
	"request-error-unknown-code": &RequestError{ErrorCode: 0x11C, RetryInterval: 5001, ErrorReason: "x"},
	"request-update": &RequestUpdate{
		RequestID: 6,
		Parameters: Params{
			Forward:        Some(true),
			LocationFilter: Some(NoLocationFilter()),
			RangeFilters:   []RangeFilter{{Type: ParamSubgroupFilter, Clear: true}},
		},
	},
	"request-update-prefix": &RequestUpdate{
		RequestID:  8,
		Parameters: Params{TrackNamespacePrefix: Some(NewNamespace("a", "b"))},
	},
	"publish-namespace": &PublishNamespace{
		RequestID:      3,
		TrackNamespace: NewNamespace("example.com", "live"),
		Parameters: Params{AuthorizationTokens: []Token{
			{AliasType: TokenRegister, Alias: 1, Type: 2, Value: []byte("tok")},
		}},
	},
	"subscribe-namespace":     &SubscribeNamespace{RequestID: 16, TrackNamespacePrefix: NewNamespace("example.com")},
	"subscribe-namespace-all": &SubscribeNamespace{RequestID: 18, TrackNamespacePrefix: Namespace{}},
	"subscribe-tracks": &SubscribeTracks{
		RequestID:            20,
		TrackNamespacePrefix: NewNamespace("live"),
		Parameters: Params{
			Forward:    Some(false),
			GroupOrder: Some(GroupOrderAscending),
			RangeFilters: []RangeFilter{
				{Type: ParamTrackPropertyFilter, PropertyType: PropDynamicGroups, Ranges: []Range{{Start: 1, End: 1}}},
			},
		},
	},
	"namespace":       &NamespaceMsg{TrackNamespaceSuffix: NewNamespace("room1")},
	"namespace-done":  &NamespaceDone{TrackNamespaceSuffix: NewNamespace("room1", "cam")},
	"publish-skipped": &PublishSkipped{TrackNamespaceSuffix: NewNamespace("room1"), TrackName: []byte("audio")},
}

// sortedNames returns the keys of m in order, for stable subtests.
func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func TestControlGolden(t *testing.T) {
	vecs := loadVectors(t, "control.txt")
	require.ElementsMatch(t, sortedNames(vecs), sortedNames(controlGolden), "every vector has an expected message and vice versa")
	seen := map[MessageType]bool{}
	for _, name := range sortedNames(controlGolden) {
		want := controlGolden[name]
		seen[want.Type()] = true
		t.Run(name, func(t *testing.T) {
			vec := vecs[name]
			mr := NewMessageReader(bytes.NewReader(vec.Bytes))
			got, err := mr.ReadMessage(Draft21)
			require.NoError(t, err, "§%s", vec.Section)
			assert.Equal(t, want, got)
			_, err = mr.ReadMessage(Draft21)
			assert.Equal(t, io.EOF, err, "the vector holds exactly one message")

			enc, err := AppendMessage(Draft21, nil, want)
			require.NoError(t, err)
			assert.Equal(t, vec.Bytes, enc)
		})
	}
	for _, typ := range []MessageType{MsgRequestUpdate, MsgSubscribe, MsgSubscribeOK, MsgRequestError,
		MsgPublishNamespace, MsgRequestOK, MsgNamespace, MsgPublishDone, MsgTrackStatus, MsgNamespaceDone,
		MsgPublishSkipped, MsgGoaway, MsgFetch, MsgFetchOK, MsgPublish, MsgPublishStateNotify,
		MsgSubscribeNamespace, MsgSubscribeTracks, MsgSetup} {
		assert.True(t, seen[typ], "no golden vector for %s", typ)
	}
}

func TestControlGoldenDraft20(t *testing.T) {
	// Draft 20 and draft 21 share one wire format.
	for name, vec := range loadVectors(t, "control.txt") {
		got, err := NewMessageReader(bytes.NewReader(vec.Bytes)).ReadMessage(Draft20)
		require.NoError(t, err, name)
		assert.Equal(t, controlGolden[name], got, name)
	}
}

// TestControlPrefixes checks that every strict prefix of every framed golden
// encoding fails to decode: the stream ends inside the message.
func TestControlPrefixes(t *testing.T) {
	for name, vec := range loadVectors(t, "control.txt") {
		for i := range len(vec.Bytes) {
			_, err := NewMessageReader(bytes.NewReader(vec.Bytes[:i])).ReadMessage(Draft21)
			if i == 0 {
				assert.Equal(t, io.EOF, err, "%s: empty stream", name)
				continue
			}
			assertCloses(t, err, ProtocolViolation)
			assert.ErrorIs(t, err, ErrTruncated, "%s: prefix %d", name, i)
		}
	}
}

// endsInList reports whether messages of type t end in a field that runs to
// the end of the body (Setup Options, Track Properties), so that a body cut
// at a Key-Value-Pair boundary is itself valid.
func endsInList(t MessageType) bool {
	switch t {
	case MsgSetup, MsgSubscribeOK, MsgPublish, MsgFetchOK, MsgRequestOK:
		return true
	}
	return false
}

// TestControlBodyPrefixes checks that a Length that is too small for the
// body (every shorter body with a matching Length) is a truncation, for
// messages whose last field has its own length.
func TestControlBodyPrefixes(t *testing.T) {
	for name, want := range controlGolden {
		if endsInList(want.Type()) {
			continue
		}
		body, err := want.AppendBody(Draft21, nil)
		require.NoError(t, err)
		for i := range len(body) {
			_, err := ParseMessage(Draft21, want.Type(), body[:i])
			assertCloses(t, err, ProtocolViolation)
			assert.ErrorIs(t, err, ErrTruncated, "%s: body prefix %d", name, i)
		}
	}
}

// TestLengthMismatch covers a Message Length that does not match the body
// (§9), both ways.
func TestLengthMismatch(t *testing.T) {
	done := &PublishDone{StatusCode: DoneGoingAway, StreamCount: 3, ErrorReason: "x"}
	framed, err := AppendMessage(Draft21, nil, done)
	require.NoError(t, err)
	withLength := func(n int) []byte {
		b := bytes.Clone(framed)
		binary.BigEndian.PutUint16(b[1:], uint16(n))
		return b
	}
	body := len(framed) - 3

	t.Run("length one short", func(t *testing.T) {
		// The reader takes a body one byte short; the last byte is left
		// over as the start of a next message.
		mr := NewMessageReader(bytes.NewReader(withLength(body - 1)))
		_, err := mr.ReadMessage(Draft21)
		assertCloses(t, err, ProtocolViolation)
		assert.ErrorIs(t, err, ErrTruncated)
	})
	t.Run("length one long at end of stream", func(t *testing.T) {
		_, err := NewMessageReader(bytes.NewReader(withLength(body + 1))).ReadMessage(Draft21)
		assertCloses(t, err, ProtocolViolation)
		assert.ErrorIs(t, err, ErrTruncated)
	})
	t.Run("length one long swallows the next message", func(t *testing.T) {
		stream := append(withLength(body+1), framed...)
		_, err := NewMessageReader(bytes.NewReader(stream)).ReadMessage(Draft21)
		assertCloses(t, err, ProtocolViolation)
		assert.NotErrorIs(t, err, ErrTruncated, "a trailing byte, not a truncation")
	})
	t.Run("trailing bytes in every fixed-end body", func(t *testing.T) {
		for name, want := range controlGolden {
			if endsInList(want.Type()) {
				continue
			}
			b, err := want.AppendBody(Draft21, nil)
			require.NoError(t, err)
			_, err = ParseMessage(Draft21, want.Type(), append(b, 0))
			assertCloses(t, err, ProtocolViolation)
			assert.NotErrorIs(t, err, ErrTruncated, name)
		}
	})
}

func TestUnknownMessageType(t *testing.T) {
	for _, typ := range []MessageType{0x00, 0x01, 0x0A, 0x1E, 0x20, 0x21, 0x40, 0x41, 0x2F01, MaxVarint} {
		_, err := ParseMessage(Draft21, typ, nil)
		assertCloses(t, err, ProtocolViolation)
		assert.False(t, typ.Known())
	}
	// Through the framed reader: type 0x1E (PUBLISH_OK up to draft 17).
	_, err := NewMessageReader(bytes.NewReader([]byte{0x1E, 0x00, 0x01, 0x00})).ReadMessage(Draft21)
	assertCloses(t, err, ProtocolViolation)
}

func TestMessageReaderSequence(t *testing.T) {
	vecs := loadVectors(t, "control.txt")
	var stream []byte
	names := sortedNames(vecs)
	for _, n := range names {
		stream = append(stream, vecs[n].Bytes...)
	}
	r := bytes.NewReader(stream)
	mr := NewMessageReader(r)
	for _, n := range names {
		got, err := mr.ReadMessage(Draft21)
		require.NoError(t, err, n)
		assert.Equal(t, controlGolden[n], got, n)
	}
	_, err := mr.ReadMessage(Draft21)
	assert.Equal(t, io.EOF, err)
}

func TestAppendMessageErrorsLeaveBufferUnchanged(t *testing.T) {
	prefix := []byte{1, 2, 3}
	b, err := AppendMessage(Draft21, prefix, &PublishDone{ErrorReason: string(make([]byte, MaxReasonLen+1))})
	assertCloses(t, err, ProtocolViolation)
	assert.Equal(t, []byte{1, 2, 3}, b)

	// A body over 65535 bytes cannot be framed.
	big := &Setup{Unknown: KVList{{Type: 0x21, Bytes: make([]byte, MaxKVBytesLen)}, {Type: 0x23, Bytes: []byte{1}}}}
	b, err = AppendMessage(Draft21, prefix, big)
	assertCloses(t, err, ProtocolViolation)
	assert.Equal(t, []byte{1, 2, 3}, b)
}

// loadedSubscribe exercises every parameter encoding, nested
// FILL_PARAMETERS and range filters.
func loadedSubscribe() *Subscribe {
	return &Subscribe{
		RequestID:      1 << 40,
		TrackNamespace: NewNamespace("example.com", "meeting", "room-42"),
		TrackName:      []byte("video-hd"),
		Parameters: Params{
			ObjectDeliveryTimeout: Some[uint64](1000),
			AuthorizationTokens: []Token{
				{AliasType: TokenRegister, Alias: 1, Type: 7, Value: bytes.Repeat([]byte{0xAB}, 200)},
				{AliasType: TokenUseAlias, Alias: 2},
			},
			Forward:            Some(true),
			SubscriberPriority: Some[uint8](7),
			LocationFilter:     Some(RangeFilterToObject(Location{10, 0}, Location{20, 5})),
			GroupOrder:         Some(GroupOrderAscending),
			FillParameters: &Params{
				FillTimeout:    Some[uint64](0),
				LocationFilter: Some(RelativeFilter(3)),
				RangeFilters:   []RangeFilter{{Type: ParamObjectIDFilter, Ranges: []Range{{Start: 0, End: 9}}}},
			},
			RangeFilters: []RangeFilter{
				{Type: ParamSubgroupFilter, Ranges: []Range{{Start: 0, End: 2}, {Start: 4, Open: true}}},
				{Type: ParamObjectPropertyFilter, SetID: 2, PropertyType: 0x40, Ranges: []Range{{Start: 1, End: 300}}},
			},
			NewGroupRequest: Some[uint64](9),
		},
	}
}

func TestAppendMessageAllocatesNothing(t *testing.T) {
	msgs := map[string]Message{
		"SUBSCRIBE": loadedSubscribe(),
		"SUBSCRIBE_OK": &SubscribeOK{
			TrackAlias:      9,
			Parameters:      Params{Expires: Some[uint64](1), LargestObject: Some(Location{1, 2})},
			TrackProperties: KVList{{Type: 0x0B, Bytes: []byte{0x02, 0x05}}, {Type: 0x0E, Value: 3}},
		},
		"PUBLISH_DONE":  &PublishDone{StatusCode: DoneExpired, StreamCount: 12, ErrorReason: "expired"},
		"REQUEST_ERROR": controlGolden["request-error-redirect"],
		"SETUP":         controlGolden["setup-known"],
	}
	for name, m := range msgs {
		buf := make([]byte, 0, 4096)
		allocs := testing.AllocsPerRun(100, func() {
			var err error
			buf, err = AppendMessage(Draft21, buf[:0], m)
			if err != nil {
				t.Fatal(err)
			}
		})
		assert.Zero(t, allocs, name)
		got, err := NewMessageReader(bytes.NewReader(buf)).ReadMessage(Draft21)
		require.NoError(t, err, name)
		assert.Equal(t, m, got, name)
	}
}

// framed returns a frame of type t whose Length field says declared and
// whose body is the first len(body) bytes actually sent.
func framed(t MessageType, declared int, body []byte) []byte {
	b := AppendVarint(nil, uint64(t))
	b = binary.BigEndian.AppendUint16(b, uint16(declared))
	return append(b, body...)
}

// allocatedBytes is the heap allocated while f runs, the least of a few
// runs so that a stray allocation elsewhere cannot fail a check.
func allocatedBytes(f func()) uint64 {
	least := ^uint64(0)
	for range 5 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// A reader costs what the peer actually sent, not what it declared: a
// frame that declares 65535 bytes and stops after 100 allocates a few
// hundred bytes, and a new reader almost nothing.
func TestMessageReaderGrowsWithInput(t *testing.T) {
	partial := framed(MsgSubscribe, MaxMessageBody, make([]byte, 100))
	n := allocatedBytes(func() {
		_, _, err := NewMessageReader(bytes.NewReader(partial)).ReadFrame()
		assertCloses(t, err, ProtocolViolation)
	})
	assert.Less(t, n, uint64(2048), "bytes allocated for a 100-byte prefix of a 64 KiB frame")

	// A whole large message is read, and its buffer let go when the next
	// read starts.
	big := make([]byte, 60000)
	for i := range big {
		big[i] = byte(i)
	}
	stream := append(framed(MsgSubscribe, len(big), big), framed(MsgSubscribe, 3, []byte{1, 2, 3})...)
	mr := NewMessageReader(bytes.NewReader(stream))
	typ, body, err := mr.ReadFrame()
	require.NoError(t, err)
	assert.Equal(t, MsgSubscribe, typ)
	assert.Equal(t, big, body)
	_, body, err = mr.ReadFrame()
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 2, 3}, body)
	assert.LessOrEqual(t, cap(mr.buf), keepBuffer, "buffer kept after a large message")
}

// Reading small messages from a reader that exists allocates nothing.
func TestMessageReaderSteadyStateAllocatesNothing(t *testing.T) {
	msg := framed(MsgRequestUpdate, 40, make([]byte, 40))
	src := bytes.NewReader(msg)
	mr := NewMessageReader(src)
	allocs := testing.AllocsPerRun(100, func() {
		src.Reset(msg)
		if _, _, err := mr.ReadFrame(); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}
