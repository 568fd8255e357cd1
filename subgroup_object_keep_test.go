package moqt

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStreamedObjectTooLargeForCacheNotGathered: a streamed object the
// track's cache could never hold is not gathered in memory for it, however
// much of its payload comes: a relay's upstream declaring an endless
// object grew the relay's heap by gigabytes. One the cache can hold is
// gathered and cached whole.
func TestStreamedObjectTooLargeForCacheNotGathered(t *testing.T) {
	const chunk = 64 << 10
	track, err := NewLocalTrack(testTrack, nil)
	require.NoError(t, err)
	track.SetCache(CacheLimits{Bytes: 1 << 20})
	w := track.OpenSubgroup(0, 0, SubgroupOptions{})

	ow, err := w.BeginObject(0, 1<<40, nil)
	require.NoError(t, err)
	buf := make([]byte, chunk)
	for range 64 { // 4 MiB, four times the cache
		_, err := ow.Write(buf)
		require.NoError(t, err)
	}
	assert.Nil(t, w.keep, "the endless object is not gathered")
	assert.Less(t, cap(w.kept.Payload), chunk, "nothing of its payload is held")
	require.Error(t, ow.Close(), "closed short")

	w = track.OpenSubgroup(1, 0, SubgroupOptions{})
	ow, err = w.BeginObject(0, chunk, nil)
	require.NoError(t, err)
	require.NotNil(t, w.keep, "an object the cache can hold is gathered")
	_, err = ow.Write(buf)
	require.NoError(t, err)
	require.NoError(t, ow.Close())
	_, b := track.cache.c.Load().Len()
	assert.GreaterOrEqual(t, b, int64(chunk), "and cached whole")
}
