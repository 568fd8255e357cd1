package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReasonPhraseOver1024(t *testing.T) {
	long := strings.Repeat("r", MaxReasonLen+1)
	ok := strings.Repeat("r", MaxReasonLen)
	bodies := func(reason string) map[MessageType][]byte {
		return map[MessageType][]byte{
			MsgPublishDone:  rawBody(0, 0, len(reason), reason),
			MsgRequestError: rawBody(0, 0, len(reason), reason),
		}
	}
	for typ, body := range bodies(long) {
		_, err := ParseMessage(Draft21, typ, body)
		assertCloses(t, err, ProtocolViolation)
		assert.NotErrorIs(t, err, ErrTruncated, "%s", typ)
	}
	for typ, body := range bodies(ok) {
		_, err := ParseMessage(Draft21, typ, body)
		assert.NoError(t, err, "%s", typ)
	}
	// The limit applies to the length field, before the bytes arrive.
	_, err := ParseMessage(Draft21, MsgPublishDone, rawBody(0, 0, MaxReasonLen+1))
	assertCloses(t, err, ProtocolViolation)
	assert.NotErrorIs(t, err, ErrTruncated)

	for _, m := range []Message{&PublishDone{ErrorReason: long}, &RequestError{ErrorReason: long}} {
		_, err := AppendMessage(Draft21, nil, m)
		assertCloses(t, err, ProtocolViolation)
	}
}

func TestC084_PublishDoneStreamCountFullRange(t *testing.T) {
	for _, n := range []uint64{0, 1, 1 << 62, 1<<63 + 5, MaxVarint} {
		m := &PublishDone{StatusCode: DoneTrackEnded, StreamCount: n}
		b := bodyOf(t, m)
		got, err := ParseMessage(Draft21, MsgPublishDone, b)
		require.NoError(t, err)
		assert.Equal(t, m, got)
	}
}

func TestPublishDoneUnknownCode(t *testing.T) {
	got, err := ParseMessage(Draft21, MsgPublishDone, rawBody(0x3, 0, 0))
	require.NoError(t, err, "SUBSCRIPTION_ENDED (0x3) is gone but must not close the session")
	assert.False(t, got.(*PublishDone).StatusCode.Known())
}

func TestPublishTrackProperties(t *testing.T) {
	// Track Properties run to the end of the message; a broken one closes
	// the session.
	head := rawBody(1, 1, 1, "n", 1, "t", 5, 0)
	_, err := ParseMessage(Draft21, MsgPublish, append(head, rawBody(0x0E, 1, 0, uint64(MaxVarint), 0)...))
	assertCloses(t, err, ProtocolViolation)
	_, err = ParseMessage(Draft21, MsgPublish, append(head, rawBody(0x0B, 4, 1)...))
	assert.ErrorIs(t, err, ErrTruncated)
	m, err := ParseMessage(Draft21, MsgPublish, append(head, rawBody(0x0B, 2, 0x02, 0x05)...))
	require.NoError(t, err)
	assert.Equal(t, KVList{{Type: PropImmutableProperties, Bytes: []byte{0x02, 0x05}}}, m.(*Publish).TrackProperties)
	assert.Equal(t, uint64(5), m.(*Publish).TrackAlias)
}
