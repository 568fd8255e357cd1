package moqt

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// TestLocalTrackPropertiesOrdered: Track Properties given out of type order
// are sent in it, the only order the delta encoding has (§8.3), repeated
// types as given; the caller's list is left alone.
func TestLocalTrackPropertiesOrdered(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		h := newAcceptAll()
		p := connect(t, nil, &Config{Handler: h})
		props := wire.KVList{
			{Type: 0x40, Value: 1},
			{Type: wire.PropDefaultPublisherPriority, Value: 3},
			{Type: 0x79, Bytes: []byte("b")},
			{Type: 0x40, Value: 2},
		}
		given := append(wire.KVList(nil), props...)
		track, err := NewLocalTrack(testTrack, props)
		require.NoError(t, err)
		assert.Equal(t, given, props, "the caller's list is not reordered")
		ctx := testCtx(t, 10*time.Second)
		_, err = track.Publish(ctx, p.server, wire.Params{}, AcceptOptions{})
		require.NoError(t, err, "the PUBLISH is sent")
		sub := recvOrFail(t, h.subs)
		assert.Equal(t, wire.KVList{
			{Type: wire.PropDefaultPublisherPriority, Value: 3},
			{Type: 0x40, Value: 1},
			{Type: 0x40, Value: 2},
			{Type: 0x79, Bytes: []byte("b")},
		}, sub.Properties())
		assert.Equal(t, uint8(3), track.priority)
	})
}

// TestLocalTrackPropertiesRefused: Track Properties no peer may accept are
// refused by NewLocalTrack rather than failing each request on the wire.
func TestLocalTrackPropertiesRefused(t *testing.T) {
	nested := immutable(t, wire.KVList{{Type: 0x40, Value: 1}})
	cases := []struct {
		name  string
		props wire.KVList
	}{
		{"bytes on an even type", wire.KVList{{Type: 0x40, Bytes: []byte("x")}}},
		{"integer on an odd type", wire.KVList{{Type: 0x79, Value: 1}}},
		{"bytes over 65535", wire.KVList{{Type: 0x79, Bytes: bytes.Repeat([]byte("x"), wire.MaxKVBytesLen+1)}}},
		{"too long for a message", wire.KVList{{Type: 0x79, Bytes: make([]byte, 40000)}, {Type: 0x7B, Bytes: make([]byte, 40000)}}},
		{"publisher priority 256", wire.KVList{{Type: wire.PropDefaultPublisherPriority, Value: 256}}},
		{"immutable publisher priority 256", immutable(t, wire.KVList{{Type: wire.PropDefaultPublisherPriority, Value: 256}})},
		{"immutable publisher priority 256 beside 3", append(immutable(t, wire.KVList{{Type: wire.PropDefaultPublisherPriority, Value: 256}}),
			wire.KeyValue{Type: wire.PropDefaultPublisherPriority, Value: 3})},
		{"group order 3", wire.KVList{{Type: wire.PropDefaultPublisherGroupOrder, Value: 3}}},
		{"dynamic groups 2", wire.KVList{{Type: wire.PropDynamicGroups, Value: 2}}},
		{"immutable group order 0", immutable(t, wire.KVList{{Type: wire.PropDefaultPublisherGroupOrder, Value: 0}})},
		{"immutable not parsing", wire.KVList{{Type: wire.PropImmutableProperties, Bytes: []byte{0x41}}}},
		{"immutable nested", immutable(t, nested)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewLocalTrack(testTrack, tc.props)
			assert.Error(t, err)
		})
	}
	_, err := NewLocalTrack(testTrack, nested)
	assert.NoError(t, err, "IMMUTABLE_PROPERTIES that parse")
	_, err = NewLocalTrack(testTrack, wire.KVList{{Type: 0x4000, Value: 1}})
	assert.NoError(t, err, "a Mandatory Track Property is the application's to send (§3.6)")
}
