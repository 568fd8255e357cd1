package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRequestErrorRedirectPresence(t *testing.T) {
	// REDIRECT without a Redirect is cut short.
	_, err := ParseMessage(Draft21, MsgRequestError, rawBody(int(ReqRedirect), 0, 0))
	assertCloses(t, err, ProtocolViolation)
	assert.ErrorIs(t, err, ErrTruncated)
	// Any other code followed by a Redirect has trailing bytes.
	redirect := rawBody(0, 0, 1, "t")
	_, err = ParseMessage(Draft21, MsgRequestError, rawBody(int(ReqDoesNotExist), 0, 0, redirect))
	assertCloses(t, err, ProtocolViolation)
	assert.NotErrorIs(t, err, ErrTruncated)
	// A Redirect to the current session with a namespace-scoped target.
	m, err := ParseMessage(Draft21, MsgRequestError, rawBody(int(ReqRedirect), 0, 0, 0, 1, 1, "x", 0))
	require.NoError(t, err)
	assert.Equal(t, &RequestError{ErrorCode: ReqRedirect, Redirect: Some(Redirect{
		TrackNamespace: NewNamespace("x"), TrackName: []byte{},
	})}, m)

	for name, m := range map[string]*RequestError{
		"REDIRECT without Redirect": {ErrorCode: ReqRedirect},
		"Redirect without REDIRECT": {ErrorCode: ReqTimeout, Redirect: Some(Redirect{})},
		"Redirect to a bad name":    {ErrorCode: ReqRedirect, Redirect: Some(Redirect{TrackNamespace: fieldsOf(33, 1)})},
	} {
		_, err := AppendMessage(Draft21, nil, m)
		assertCloses(t, err, ProtocolViolation)
		_ = name
	}
}

func TestRequestErrorCheck(t *testing.T) {
	uri := &RequestError{ErrorCode: ReqRedirect, Redirect: Some(Redirect{ConnectURI: "moqt://c.example", TrackName: []byte("t")})}
	assertCloses(t, uri.Check(true, MsgPublish), ProtocolViolation)
	assert.NoError(t, uri.Check(false, MsgSubscribe))
	for _, typ := range []MessageType{MsgSubscribeNamespace, MsgPublishNamespace, MsgSubscribeTracks} {
		assertCloses(t, uri.Check(false, typ), ProtocolViolation)
	}
	noName := &RequestError{ErrorCode: ReqRedirect, Redirect: Some(Redirect{TrackNamespace: NewNamespace("a")})}
	assert.NoError(t, noName.Check(true, MsgPublishNamespace))
	assert.NoError(t, (&RequestError{ErrorCode: ReqGoingAway}).Check(true, MsgSubscribeTracks))
}

func TestRequestErrorUnknownCode(t *testing.T) {
	for _, code := range []uint64{0x7, 0x32, 0x9D, MaxVarint} {
		m, err := ParseMessage(Draft21, MsgRequestError, rawBody(code, 0, 0))
		require.NoError(t, err)
		assert.Equal(t, RequestErrorCode(code), m.(*RequestError).ErrorCode)
		assert.False(t, m.(*RequestError).ErrorCode.Known())
	}
}

// TestTrackPropertiesOutsideTrackStatusOK: Track Properties are populated
// only in TRACK_STATUS_OK; in the other REQUEST_OKs they close the session
// (§9.3).
func TestTrackPropertiesOutsideTrackStatusOK(t *testing.T) {
	m, err := ParseMessage(Draft21, MsgRequestOK, rawBody(0, 0x0E, 3))
	require.NoError(t, err, "parsing alone cannot tell which request is answered")
	ok := m.(*RequestOK)
	assert.NoError(t, ok.Check(InTrackStatusOK))
	for _, ctx := range []ParamContext{InPublishOK, InUpdateOK, InSubscribeNamespaceOK, InPublishNamespaceOK,
		InSubscribeTracksOK, InTrackStatusOK | InPublishOK} {
		assertCloses(t, ok.Check(ctx), ProtocolViolation)
	}
	empty := &RequestOK{Parameters: Params{Expires: Some[uint64](5)}}
	assert.NoError(t, empty.Check(InPublishOK))
	assert.NoError(t, empty.Check(InUpdateOK))
	assertCloses(t, empty.Check(InTrackStatusOK), ProtocolViolation)
}

func TestRequestOKParamsCheck(t *testing.T) {
	largest := &RequestOK{Parameters: Params{LargestObject: Some(Location{1, 1})}}
	assert.NoError(t, largest.Check(InUpdateOK))
	assert.NoError(t, largest.Check(InTrackStatusOK))
	assertCloses(t, largest.Check(InPublishOK), ProtocolViolation)
	assertCloses(t, largest.Check(InSubscribeNamespaceOK), ProtocolViolation)
}

func TestSubscribeOKTrackPropertiesErrors(t *testing.T) {
	_, err := ParseMessage(Draft21, MsgSubscribeOK, rawBody(1, 0, 0x3D, 0x81, 0x00))
	assertCloses(t, err, ProtocolViolation)
	assert.ErrorIs(t, err, ErrTruncated)
	_, err = ParseMessage(Draft21, MsgSubscribeOK, rawBody(1, 0, 2, 0, uint64(MaxVarint), 0))
	assertCloses(t, err, ProtocolViolation)
	_, err = AppendMessage(Draft21, nil, &SubscribeOK{TrackProperties: KVList{{Type: 4}, {Type: 2}}})
	assertCloses(t, err, ProtocolViolation)
}

func TestParseResetsReusedMessage(t *testing.T) {
	// A message value reused for a second parse keeps nothing of the first.
	for name, want := range controlGolden {
		t.Run(name, func(t *testing.T) {
			m, err := NewMessage(want.Type())
			require.NoError(t, err)
			for _, other := range controlGolden {
				if other.Type() == want.Type() {
					require.NoError(t, m.ParseBody(Draft21, bodyOf(t, other)))
				}
			}
			require.NoError(t, m.ParseBody(Draft21, bodyOf(t, want)))
			assert.Equal(t, want, m)
		})
	}
}
