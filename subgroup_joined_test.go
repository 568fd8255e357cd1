package moqt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// TestSubgroupJoinedNoFirstObject: a subgroup a relay joined late never
// claims FIRST_OBJECT on its streams (§2.2).
func TestSubgroupJoinedNoFirstObject(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, cfg, _ := newServedTrack(t, testTrack, nil)
		p := connect(t, cfg, nil)
		ctx := testCtx(t, 10*time.Second)
		sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		for sg, joined := range []bool{false, true} {
			w := track.OpenSubgroup(1, uint64(sg)+4, SubgroupOptions{Joined: joined, SubgroupIDIsFirstObject: true})
			require.NoError(t, writeObject(w, uint64(sg)+4, nil, []byte("x")))
			require.NoError(t, w.Close())
			r, err := sub.AcceptSubgroup(ctx)
			require.NoError(t, err)
			assert.Equal(t, !joined, r.Header().FirstObject, "joined=%v", joined)
			assert.Equal(t, wire.SubgroupIDFirstObject, r.Header().SubgroupIDMode, "the first object still names it")
			_, err = r.ReadObject(nil)
			require.NoError(t, err)
		}
	})
}
