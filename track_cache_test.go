package moqt

import (
	"context"
	"errors"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// cursorEntries reads every entry of t's cursor over [start, end].
func cursorEntries(t *testing.T, ctx context.Context, tr *LocalTrack, start, end wire.Location, desc bool) []Object {
	t.Helper()
	cu := tr.cursor(filter.Window{Start: start, End: end, Bounded: true}, desc)
	var got []Object
	for range 1000 {
		o, err := cu.next(ctx)
		if errors.Is(err, io.EOF) {
			return got
		}
		require.NoError(t, err)
		got = append(got, o)
	}
	t.Fatal("cursor does not end")
	return nil
}

func cacheTrack(t *testing.T, props wire.KVList) *LocalTrack {
	tr, err := NewLocalTrack(wire.FullTrackName{Namespace: wire.NewNamespace("cache"), Name: []byte("t")}, props)
	require.NoError(t, err)
	return tr
}

func mark(g, o uint64, k wire.EndOfRange) Object {
	return Object{Location: wire.Location{Group: g, Object: o}, EndOfRange: k}
}

// Objects published through a LocalTrack with a cache come back from its
// cursor with every field a fetch stream carries, in both group orders: a
// subgroup's objects and its status object, a streamed object once
// complete (waited for meanwhile), a datagram with its preference, and a
// streamed object closed short as unknown.
func TestTrackCacheCursor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := cacheTrack(t, nil)
		tr.SetCache(CacheLimits{Objects: 100})
		sg := tr.OpenSubgroup(0, 4, SubgroupOptions{Priority: wire.Some[uint8](9), Properties: true})
		require.NoError(t, sg.WriteObject(Object{Location: wire.Location{Group: 0, Object: 0}, SubgroupID: 4,
			Properties: []byte{0x10, 0x01}, Payload: []byte("a")}))
		ow, err := sg.BeginObject(1, 4, nil)
		require.NoError(t, err)
		_, err = ow.Write([]byte("bc"))
		require.NoError(t, err)

		// The streamed object's publication began: a cursor reaching it
		// waits until it is complete.
		got := make(chan []Object)
		go func() {
			got <- cursorEntries(t, context.Background(), tr, wire.Location{}, wire.Location{Group: 0, Object: 1}, false)
		}()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("the cursor did not wait for the streamed object")
		default:
		}
		_, err = ow.Write([]byte("de"))
		require.NoError(t, err)
		require.NoError(t, sg.WriteObject(Object{Location: wire.Location{Group: 0, Object: 2}, SubgroupID: 4, Status: wire.ObjectEndOfGroup}))
		require.NoError(t, sg.Close())
		require.NoError(t, tr.WriteDatagram(Object{Location: wire.Location{Group: 1, Object: 0}, Payload: []byte("dg")}))
		short := tr.OpenSubgroup(2, 0, SubgroupOptions{})
		ow, err = short.BeginObject(0, 10, nil)
		require.NoError(t, err)
		_, err = ow.Write([]byte("xyz"))
		require.NoError(t, err)
		require.Error(t, ow.Close())
		end := tr.OpenSubgroup(3, 0, SubgroupOptions{})
		require.NoError(t, end.WriteObject(Object{Location: wire.Location{Group: 3}, Status: wire.ObjectEndOfTrack}))

		o00 := Object{Location: wire.Location{Group: 0, Object: 0}, SubgroupID: 4, Priority: wire.Some[uint8](9),
			Properties: []byte{0x10, 0x01}, Payload: []byte("a")}
		o01 := Object{Location: wire.Location{Group: 0, Object: 1}, SubgroupID: 4, Priority: wire.Some[uint8](9), Payload: []byte("bcde")}
		dg := Object{Location: wire.Location{Group: 1, Object: 0}, Priority: wire.Some[uint8](defaultPublisherPriority),
			Payload: []byte("dg"), Datagram: true}
		assert.Equal(t, []Object{o00, o01}, <-got)
		// The End of Group and End of Track are not served; nothing past
		// them exists.
		// The subgroup closed short may go on elsewhere (§11.3.2): the rest
		// of its group is unknown.
		assert.Equal(t, []Object{o00, o01, dg, mark(1, ^uint64(0), wire.EndOfNonExistentRange), mark(2, ^uint64(0), wire.EndOfUnknownRange)},
			cursorEntries(t, context.Background(), tr, wire.Location{}, wire.Location{Group: 3}, false))
		assert.Equal(t, []Object{mark(3, 0, wire.EndOfNonExistentRange), mark(2, ^uint64(0), wire.EndOfUnknownRange), dg, o00, o01},
			cursorEntries(t, context.Background(), tr, wire.Location{}, wire.Location{Group: 3}, true))

		eot, ok := tr.endOfTrack()
		assert.True(t, ok)
		assert.Equal(t, wire.Location{Group: 3}, eot)
	})
}

// A streamed object whose subgroup is reset while it is being written is
// unknown, as is what the subgroup did not carry; one interrupted by
// Close likewise.
func TestTrackCacheAbandonedByReset(t *testing.T) {
	tr := cacheTrack(t, nil)
	tr.SetCache(CacheLimits{Objects: 100})
	sg := tr.OpenSubgroup(0, 0, SubgroupOptions{})
	_, err := sg.BeginObject(0, 10, nil)
	require.NoError(t, err)
	sg.Reset(wire.ResetCancelled)
	sg = tr.OpenSubgroup(1, 0, SubgroupOptions{})
	_, err = sg.BeginObject(0, 10, nil)
	require.NoError(t, err)
	require.Error(t, sg.Close())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The rest of group 0 is unknown too: the reset subgroup may go on
	// elsewhere (§11.3.2).
	assert.Equal(t, []Object{mark(1, 0, wire.EndOfUnknownRange)}, cursorEntries(t, ctx, tr, wire.Location{}, wire.Location{Group: 1}, false))
}

// A cache set after objects were published knows nothing of them, nor of
// a Largest Object learnt through SetLargest; a track without a cache
// knows nothing at all, but its End of Track.
func TestTrackCacheNeverSeen(t *testing.T) {
	tr := cacheTrack(t, nil)
	sg := tr.OpenSubgroup(0, 0, SubgroupOptions{})
	require.NoError(t, sg.WriteObject(Object{Location: wire.Location{Group: 0, Object: 0}, Payload: []byte("a")}))
	ctx := context.Background()
	assert.Equal(t, []Object{mark(0, 5, wire.EndOfUnknownRange)}, cursorEntries(t, ctx, tr, wire.Location{}, wire.Location{Group: 0, Object: 5}, false))

	tr.SetCache(CacheLimits{Bytes: 1 << 20})
	require.NoError(t, sg.WriteObject(Object{Location: wire.Location{Group: 0, Object: 1}, Payload: []byte("b")}))
	require.NoError(t, sg.Close()) // open, it might still carry {0, 2} on
	tr.SetLargest(wire.Location{Group: 4, Object: 2})
	require.NoError(t, tr.OpenSubgroup(4, 0, SubgroupOptions{}).WriteObject(Object{Location: wire.Location{Group: 4, Object: 3}, Payload: []byte("c")}))
	got := cursorEntries(t, ctx, tr, wire.Location{}, wire.Location{Group: 4, Object: 3}, false)
	require.Len(t, got, 4)
	assert.Equal(t, mark(0, 0, wire.EndOfUnknownRange), got[0])
	assert.Equal(t, []byte("b"), got[1].Payload)
	assert.Equal(t, mark(4, 2, wire.EndOfUnknownRange), got[2])
	assert.Equal(t, []byte("c"), got[3].Payload)

	// Limits of no objects and no bytes remove the cache.
	tr.SetCache(CacheLimits{Duration: time.Hour})
	assert.Equal(t, []Object{mark(4, 3, wire.EndOfUnknownRange)}, cursorEntries(t, ctx, tr, wire.Location{}, wire.Location{Group: 4, Object: 3}, false))
	_, ok := tr.endOfTrack()
	assert.False(t, ok)
	require.NoError(t, tr.WriteDatagram(Object{Location: wire.Location{Group: 5}, Status: wire.ObjectEndOfTrack}))
	eot, ok := tr.endOfTrack()
	assert.True(t, ok)
	assert.Equal(t, wire.Location{Group: 5}, eot)
}

// MAX_CACHE_DURATION caps the configured Duration (§10.3), found inside
// IMMUTABLE_PROPERTIES too (§10.7), where it wins over a mutable one.
func TestTrackCacheMaxCacheDuration(t *testing.T) {
	second := wire.KeyValue{Type: wire.PropMaxCacheDuration, Value: 1000}
	cases := []struct {
		name  string
		props wire.KVList
	}{
		{"track property", wire.KVList{second}},
		{"inside IMMUTABLE_PROPERTIES", immutable(t, wire.KVList{second})},
		{"inside IMMUTABLE_PROPERTIES and out", append(immutable(t, wire.KVList{second}),
			wire.KeyValue{Type: wire.PropMaxCacheDuration, Value: 3_600_000})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := cacheTrack(t, c.props)
				tr.SetCache(CacheLimits{Objects: 10, Duration: time.Hour})
				sg := tr.OpenSubgroup(0, 0, SubgroupOptions{})
				require.NoError(t, sg.WriteObject(Object{Location: wire.Location{Group: 0, Object: 0}, Payload: []byte("a")}))
				ctx := context.Background()
				require.Len(t, cursorEntries(t, ctx, tr, wire.Location{}, wire.Location{Group: 0}, false), 1)
				assert.Empty(t, cursorEntries(t, ctx, tr, wire.Location{}, wire.Location{Group: 0}, false)[0].EndOfRange)
				time.Sleep(1500 * time.Millisecond)
				assert.Equal(t, []Object{mark(0, 0, wire.EndOfUnknownRange)}, cursorEntries(t, ctx, tr, wire.Location{}, wire.Location{Group: 0}, false))
			})
		})
	}
}

// Tracks whose caches share a CacheBudget stay within it together; what a
// cut took from a track reads as unknown to its fetches, and a cache
// replaced or removed leaves the budget.
func TestTrackCacheBudget(t *testing.T) {
	const size = 1 << 10
	budget := NewCacheBudget(64 << 10)
	tracks := make([]*LocalTrack, 4)
	for i := range tracks {
		tr, err := NewLocalTrack(wire.FullTrackName{Namespace: wire.NewNamespace("cache"), Name: []byte{byte('a' + i)}}, nil)
		require.NoError(t, err)
		tr.SetCache(CacheLimits{Bytes: 1 << 20, Budget: budget})
		tracks[i] = tr
	}
	body := make([]byte, size)
	for g := range uint64(16) {
		for _, tr := range tracks {
			sg := tr.OpenSubgroup(g, 0, SubgroupOptions{})
			for o := range uint64(4) {
				require.NoError(t, sg.WriteObject(Object{Location: wire.Location{Group: g, Object: o}, Payload: body}))
			}
			require.NoError(t, sg.Close())
			require.LessOrEqual(t, budget.Held(), budget.Limit())
		}
	}
	// 4 tracks of 64 KiB each on a budget of 64 KiB: the first groups
	// went, from each.
	ctx := context.Background()
	for i, tr := range tracks {
		got := cursorEntries(t, ctx, tr, wire.Location{}, wire.Location{Group: 15, Object: 3}, false)
		require.NotEmpty(t, got)
		assert.Equal(t, wire.EndOfUnknownRange, got[0].EndOfRange, "track %d starts unknown", i)
		assert.Less(t, got[0].Location.Group, uint64(15), "track %d keeps its last groups", i)
		assert.Equal(t, wire.Location{Group: 15, Object: 3}, got[len(got)-1].Location)
		assert.Greater(t, len(got), 8, "track %d keeps about a fair share", i)
	}
	cached := func(tr *LocalTrack) int64 {
		_, b := tr.cache.c.Load().Len()
		return b
	}
	left := cached(tracks[2]) + cached(tracks[3])
	tracks[0].SetCache(CacheLimits{Objects: 10}) // replaced, out of the budget
	tracks[1].SetCache(CacheLimits{})            // removed
	assert.Equal(t, left, budget.Held(), "two of four caches left")
	tracks[2].SetCache(CacheLimits{})
	tracks[3].SetCache(CacheLimits{})
	assert.Zero(t, budget.Held())
}

// writeRange writes the objects from to to (both included) of w's group on
// w, each payload naming its Location.
func writeRange(t *testing.T, w *SubgroupWriter, g, from, to uint64) {
	t.Helper()
	for id := from; id <= to; id++ {
		l := wire.Location{Group: g, Object: id}
		require.NoError(t, w.WriteObject(Object{Location: l, Payload: []byte(l.String())}))
	}
}

func entryLocations(objs []Object) []wire.Location {
	var out []wire.Location
	for _, o := range objs {
		out = append(out, o.Location)
	}
	return out
}

// An object below the Largest Object that an open subgroup may still
// carry is pending, not absent (§2.1): a cursor over a subgroup lagging
// behind a later group, or one opened with nothing written yet, waits for
// the objects still to come and serves them, in order, once each.
func TestTrackCacheLaggingSubgroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := cacheTrack(t, nil)
		tr.SetCache(CacheLimits{Objects: 100})
		lag := tr.OpenSubgroup(0, 0, SubgroupOptions{})
		writeRange(t, lag, 0, 0, 0)
		idle := tr.OpenSubgroup(1, 0, SubgroupOptions{}) // nothing written yet
		next := tr.OpenSubgroup(2, 0, SubgroupOptions{})
		writeRange(t, next, 2, 0, 1)
		require.NoError(t, next.Close())

		got := make(chan []Object, 1)
		go func() {
			got <- cursorEntries(t, context.Background(), tr, wire.Location{}, wire.Location{Group: 2, Object: 1}, false)
		}()
		synctest.Wait()
		select {
		case objs := <-got:
			t.Fatalf("the cursor did not wait for the open subgroups: %v", entryLocations(objs))
		default:
		}
		writeRange(t, lag, 0, 1, 2)
		require.NoError(t, lag.Close())
		writeRange(t, idle, 1, 0, 0)
		require.NoError(t, idle.Close())
		assert.Equal(t, []wire.Location{{Group: 0}, {Group: 0, Object: 1}, {Group: 0, Object: 2}, {Group: 1},
			{Group: 2}, {Group: 2, Object: 1}}, entryLocations(<-got))
	})
}

// A lagging subgroup that is reset, not finished, leaves what it did not
// carry unknown, told in-band; one the cursor's wait outlives is timed out.
func TestTrackCacheLaggingSubgroupEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := cacheTrack(t, nil)
		tr.SetCache(CacheLimits{Objects: 100})
		lag := tr.OpenSubgroup(0, 0, SubgroupOptions{})
		writeRange(t, lag, 0, 0, 0)
		stuck := tr.OpenSubgroup(1, 0, SubgroupOptions{})
		writeRange(t, stuck, 1, 0, 0)
		next := tr.OpenSubgroup(2, 0, SubgroupOptions{})
		writeRange(t, next, 2, 0, 0)
		require.NoError(t, next.Close())

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		got := make(chan []Object, 1)
		go func() { got <- cursorEntries(t, ctx, tr, wire.Location{}, wire.Location{Group: 2}, false) }()
		synctest.Wait()
		writeRange(t, lag, 0, 1, 1)
		lag.Reset(wire.ResetCancelled)
		start := time.Now()
		objs := <-got
		assert.Equal(t, time.Second, time.Since(start), "the stuck subgroup is waited for until ctx ends")
		require.Len(t, objs, 6)
		assert.Equal(t, []wire.Location{{Group: 0}, {Group: 0, Object: 1}}, entryLocations(objs[:2]))
		assert.Equal(t, mark(0, ^uint64(0), wire.EndOfUnknownRange), objs[2])
		assert.Equal(t, wire.Location{Group: 1}, objs[3].Location)
		assert.Equal(t, mark(1, ^uint64(0), wire.EndOfTimedOutRange), objs[4])
		assert.Equal(t, wire.Location{Group: 2}, objs[5].Location)
		require.NoError(t, stuck.Close())
	})
}
