package relay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// levelTrack is a LocalTrack under live/cam named name, with Track
// Property 0x40 = level.
func levelTrack(t *testing.T, name string, level uint64) *moqt.LocalTrack {
	t.Helper()
	tr, err := moqt.NewLocalTrack(wire.FullTrackName{Namespace: testTrack.Namespace, Name: []byte(name)},
		wire.KVList{{Type: 0x40, Value: level}})
	require.NoError(t, err)
	return tr
}

// levelFilter is a TRACK_PROPERTY_FILTER for Track Property 0x40 = level.
func levelFilter(level uint64) []wire.RangeFilter {
	return []wire.RangeFilter{{Type: wire.ParamTrackPropertyFilter, PropertyType: 0x40,
		Ranges: []wire.Range{{Start: level, End: level}}}}
}

// TestSubscribeTracksPropertyFilter: a SUBSCRIBE_TRACKS gets PUBLISH only
// for the tracks whose Track Properties pass its TRACK_PROPERTY_FILTER
// (§3.3.2, §4.3), whether published before the request or after it, and
// a REQUEST_UPDATE that replaces the filter brings the tracks that pass
// the new one.
func TestSubscribeTracksPropertyFilter(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, &moqt.Config{MaxFilterRanges: 4})
		pc, _ := n.dial("/pub", nil)
		low, high := levelTrack(t, "low", 1), levelTrack(t, "high", 2)
		for _, tr := range []*moqt.LocalTrack{low, high} {
			_, err := publishTo(t, pc, tr, wire.Params{})
			require.NoError(t, err)
		}
		sh := &tracksClient{}
		sc, _ := n.dial("/sub", sh)
		req, err := subscribeNS(t, sc, wire.NewNamespace("live"), true, wire.Params{RangeFilters: levelFilter(2)})
		require.NoError(t, err)
		settled(t, "PUBLISH of the matching track", func() bool { return len(sh.published()) == 1 })
		assert.Equal(t, []string{high.Name().String()}, sh.published())

		// Published after the request: only the one that passes comes,
		// and after the one published before that does not pass would
		// have, had it been offered.
		low2 := levelTrack(t, "low2", 1)
		_, err = publishTo(t, pc, low2, wire.Params{})
		require.NoError(t, err)
		later := levelTrack(t, "high2", 2)
		_, err = publishTo(t, pc, later, wire.Params{})
		require.NoError(t, err)
		settled(t, "PUBLISH of the later matching track", func() bool { return len(sh.published()) == 2 })
		assert.Equal(t, []string{high.Name().String(), later.Name().String()}, sh.published())

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, req.Update(ctx, wire.Params{RangeFilters: levelFilter(1)}))
		settled(t, "PUBLISH of the tracks passing the new filter", func() bool { return len(sh.published()) == 4 })
		assert.ElementsMatch(t, []string{low.Name().String(), low2.Name().String()}, []string{sh.published()[2], sh.published()[3]})
	})
}
