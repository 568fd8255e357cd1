package moqt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// TestImmutableTrackPropertiesEndToEnd: Track Properties that sit only
// inside IMMUTABLE_PROPERTIES take effect as they would outside it, since
// a processor must search both (§10.7). The publisher ranks and records
// its objects with the DEFAULT_PUBLISHER_PRIORITY in there, and serves a
// fill without GROUP_ORDER in its DEFAULT_PUBLISHER_GROUP_ORDER; the
// subscriber expects the fill in that order, and gives the subgroups whose
// header leaves the priority out that DEFAULT_PUBLISHER_PRIORITY (§10.4,
// §10.5, §3.4).
func TestImmutableTrackPropertiesEndToEnd(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		props := immutable(t, wire.KVList{
			{Type: wire.PropDefaultPublisherPriority, Value: 9},
			{Type: wire.PropDefaultPublisherGroupOrder, Value: uint64(wire.GroupOrderDescending)},
		})
		track, err := NewLocalTrack(testTrack, props)
		require.NoError(t, err)
		track.SetCache(CacheLimits{Objects: 100})
		h, _ := fetchHandler(track)
		p := connect(t, &Config{Handler: h}, nil)
		publishGroups(t, track, 0, 3, 2, nil)

		ctx := testCtx(t, 10*time.Second)
		sub, err := p.client.Subscribe(ctx, testTrack, nextObjectWithFill)
		require.NoError(t, err)
		assert.Equal(t, props, sub.Properties())
		var fill []wire.Location
		for range 6 {
			o, err := sub.ReadObject(ctx)
			require.NoError(t, err)
			fill = append(fill, o.Location)
			assert.Equal(t, wire.Some[uint8](9), o.Priority, "fill object %v: the publisher's priority", o.Location)
		}
		assert.Equal(t, []wire.Location{{Group: 2}, {Group: 2, Object: 1}, {Group: 1}, {Group: 1, Object: 1}, {Group: 0}, {Group: 0, Object: 1}},
			fill, "the fill comes in the track's Descending group order")

		w := track.OpenSubgroup(3, 0, SubgroupOptions{})
		require.NoError(t, w.WriteObject(Object{Location: wire.Location{Group: 3}, Payload: []byte("live")}))
		require.NoError(t, w.Close())
		o, err := sub.ReadObject(ctx)
		require.NoError(t, err)
		assert.Equal(t, wire.Location{Group: 3}, o.Location)
		assert.Equal(t, wire.Some[uint8](9), o.Priority, "a header without priority inherits DEFAULT_PUBLISHER_PRIORITY")
	})
}
