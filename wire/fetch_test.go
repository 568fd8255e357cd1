package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFetchOKEndOfTrack(t *testing.T) {
	for _, v := range []byte{2, 0x80, 0xff} {
		_, err := ParseMessage(Draft21, MsgFetchOK, rawBody([]byte{v}, 1, 1, 0))
		assertCloses(t, err, ProtocolViolation)
	}
	m, err := ParseMessage(Draft21, MsgFetchOK, rawBody([]byte{1}, 1, 2, 0))
	require.NoError(t, err)
	assert.Equal(t, &FetchOK{EndOfTrack: true, EndLocation: Location{1, 2}}, m)
}

func TestFetchOKParamsAndProperties(t *testing.T) {
	// No parameter is defined for FETCH_OK; Track Properties follow.
	m, err := ParseMessage(Draft21, MsgFetchOK, rawBody([]byte{0}, 4, 0, 0, 0x3FFF, 0, 0x4000, 1, "m"))
	require.NoError(t, err)
	ok := m.(*FetchOK)
	assert.Equal(t, KVList{{Type: 0x3FFF, Bytes: []byte{}}, {Type: 0x7FFF, Bytes: []byte("m")}}, ok.TrackProperties)
	assert.True(t, IsMandatoryTrackProperty(ok.TrackProperties[1].Type))
}
