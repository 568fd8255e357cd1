package relay

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// TestRelayForwards carries a track from an announcing publisher to two
// subscribers through the relay, over both transports.
func TestRelayForwards(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pub := n.newPublisher("/pub", testTrack, nil)
		n.announce(pub, wire.NewNamespace("live"))
		c1, _ := n.dial("/sub1", nil)
		c2, _ := n.dial("/sub2", nil)
		s1, err := subscribe(t, c1, testTrack, wire.Params{})
		require.NoError(t, err)
		s2, err := subscribe(t, c2, testTrack, wire.Params{})
		require.NoError(t, err)
		assert.Len(t, pub.subscribes(), 1, "one upstream subscription shared by both")
		writeGroup(t, pub.track, 0, 5)
		for _, s := range []*moqt.Subscription{s1, s2} {
			objs, err := readSubgroup(t, s)
			require.NoError(t, err)
			require.Len(t, objs, 5)
			for i, o := range objs {
				assert.Equal(t, wire.Location{Group: 0, Object: uint64(i)}, o.Location)
				assert.Equal(t, payload(0, uint64(i)), o.Payload)
			}
		}
	})
}
