package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSubscribeRoundTripLoaded(t *testing.T) {
	want := loadedSubscribe()
	got, err := ParseMessage(Draft21, MsgSubscribe, bodyOf(t, want))
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

func TestTrackStatusAndFetchShareTheSubscribeFormat(t *testing.T) {
	// Same bytes, three messages: only the allowed parameters differ.
	body := rawBody(2, 1, 1, "n", 1, "t", 1, int(ParamAuthorizationToken), 2, 2, 9)
	for _, typ := range []MessageType{MsgSubscribe, MsgFetch, MsgTrackStatus} {
		m, err := ParseMessage(Draft21, typ, body)
		require.NoError(t, err, "%s", typ)
		assert.Equal(t, body, bodyOf(t, m))
	}
	withPriority := rawBody(2, 1, 1, "n", 1, "t", 1, int(ParamSubscriberPriority), []byte{1})
	_, err := ParseMessage(Draft21, MsgTrackStatus, withPriority)
	assertCloses(t, err, ProtocolViolation)
	_, err = ParseMessage(Draft21, MsgFetch, withPriority)
	assert.NoError(t, err)
}

func TestPublishStateNotifyRejectsNothingButBadParams(t *testing.T) {
	m, err := ParseMessage(Draft21, MsgPublishStateNotify, []byte{0x00})
	require.NoError(t, err)
	assert.Equal(t, &PublishStateNotify{}, m)
	_, err = ParseMessage(Draft21, MsgPublishStateNotify, nil)
	assert.ErrorIs(t, err, ErrTruncated)
}

func subscribeOKBench() *SubscribeOK {
	return &SubscribeOK{
		TrackAlias: 42,
		Parameters: Params{Expires: Some[uint64](30000), LargestObject: Some(Location{1234, 56})},
		TrackProperties: KVList{
			{Type: PropObjectDeliveryTimeout, Value: 2000},
			{Type: PropMaxCacheDuration, Value: 60000},
			{Type: PropDefaultPublisherPriority, Value: 64},
			{Type: PropDefaultPublisherGroupOrder, Value: 1},
		},
	}
}

func benchmarkAppend(b *testing.B, m Message) {
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendMessage(Draft21, buf[:0], m); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

func benchmarkParse(b *testing.B, m Message) {
	body, err := m.AppendBody(Draft21, nil)
	require.NoError(b, err)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := ParseMessage(Draft21, m.Type(), body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendSubscribe(b *testing.B)   { benchmarkAppend(b, loadedSubscribe()) }
func BenchmarkAppendSubscribeOK(b *testing.B) { benchmarkAppend(b, subscribeOKBench()) }
func BenchmarkParseSubscribe(b *testing.B)    { benchmarkParse(b, loadedSubscribe()) }
func BenchmarkParseSubscribeOK(b *testing.B)  { benchmarkParse(b, subscribeOKBench()) }
