package moqt

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// A FETCH served from the track's cache after an END_OF_TRACK reports End
// Of Track at that Location once its range reaches it, and not before
// (§9.12); the End of Track itself is not carried.
func TestFetchEndOfTrackFromCache(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		lt := pubTrack(t, wire.Opt[wire.Location]{})
		lt.SetCache(CacheLimits{Objects: 16})
		sg := lt.OpenSubgroup(0, 0, SubgroupOptions{})
		require.NoError(t, sg.WriteObject(pobj(0, 0, "a")))
		require.NoError(t, sg.WriteObject(pobj(0, 1, "b")))
		require.NoError(t, sg.WriteObject(Object{Location: pl(0, 2), Status: wire.ObjectEndOfTrack}))
		require.NoError(t, sg.Close())
		h, _ := fetchHandler(lt)
		_, fp := serverSession(t, &Config{Handler: h})

		fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{}))
		ok := expect[*wire.FetchOK](fs)
		assert.True(t, ok.EndOfTrack)
		assert.Equal(t, pl(0, 2), ok.EndLocation)
		es := fp.acceptPubFetch(false).all()
		assert.Equal(t, []wire.Location{pl(0, 0), pl(0, 1)}, pubLocs(es))

		fs = fp.open(pubFetchMsg(t, 2, trackA, wire.Params{LocationFilter: wire.Some(wire.RangeFilterToObject(pl(0, 0), pl(0, 1)))}))
		ok = expect[*wire.FetchOK](fs)
		assert.False(t, ok.EndOfTrack)
		assert.Equal(t, pl(0, 1), ok.EndLocation)
		assert.Equal(t, []wire.Location{pl(0, 0), pl(0, 1)}, pubLocs(fp.acceptPubFetch(false).all()))
	})
}

// A FETCH that starts past the track's END_OF_TRACK (the track published
// on after it, or a larger Largest Object was learnt) is answered with an
// End Location at or after its Start Location, which the subscriber
// would otherwise take for a protocol violation (§9.12).
func TestFetchStartPastEndOfTrack(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		lt := pubTrack(t, wire.Opt[wire.Location]{})
		lt.SetCache(CacheLimits{Objects: 16})
		sg := lt.OpenSubgroup(0, 0, SubgroupOptions{})
		require.NoError(t, sg.WriteObject(pobj(0, 0, "a")))
		require.NoError(t, sg.WriteObject(Object{Location: pl(0, 1), Status: wire.ObjectEndOfTrack}))
		require.NoError(t, sg.Close())
		lt.SetLargest(pl(3, 0))
		h, _ := fetchHandler(lt)
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{LocationFilter: wire.Some(wire.StartFilter(pl(2, 0)))}))
		ok := expect[*wire.FetchOK](fs)
		assert.False(t, ok.EndOfTrack)
		assert.Equal(t, pl(3, 0), ok.EndLocation)
		// Nothing exists there: FETCH_HEADER and FIN.
		assert.Empty(t, fp.acceptPubFetch(false).all())
	})
}
