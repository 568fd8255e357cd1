package relay

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// endedCount is the number of ended tracks the relay keeps.
func (rl *Relay) endedCount() int {
	rl.reg.mu.Lock()
	defer rl.reg.mu.Unlock()
	return len(rl.reg.ended)
}

// endedObjects are what endTrack publishes: group 0 of 3 objects, whose
// subgroup says it ends the group, then object 1:0 and an End of Track at
// 1:1.
var endedObjects = []wire.Location{{Group: 0}, {Group: 0, Object: 1}, {Group: 0, Object: 2}, {Group: 1}}

// endTrack has a publisher of testTrack with props, announcing (live),
// publish endedObjects to a subscriber through n, end the track with
// TRACK_ENDED and leave; it returns once the relay saw it leave.
func endTrack(t *testing.T, n *node, props wire.KVList) {
	t.Helper()
	pub := n.newPublisher("/pub", testTrack, props)
	n.announce(pub, wire.NewNamespace("live"))
	c, _ := n.dial("/sub", nil)
	sub, err := subscribe(t, c, testTrack, wire.Params{})
	require.NoError(t, err)
	w := pub.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{EndOfGroup: true})
	for o := range uint64(3) {
		require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Object: o}, Payload: payload(0, o)}))
	}
	require.NoError(t, w.Close())
	objs, err := readSubgroup(t, sub)
	require.NoError(t, err)
	require.Len(t, objs, 3)
	w = pub.track.OpenSubgroup(1, 0, moqt.SubgroupOptions{})
	require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: 1}, Payload: payload(1, 0)}))
	require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: 1, Object: 1}, Status: wire.ObjectEndOfTrack}))
	require.NoError(t, w.Close())
	_, err = readSubgroup(t, sub)
	require.NoError(t, err)
	pub.track.End(wire.DoneTrackEnded, "over")
	require.Equal(t, wire.DoneTrackEnded, doneCode(t, sub))
	require.NoError(t, pub.client.Close())
	require.NoError(t, c.Close())
	settled(t, "the track left the registry, its publisher gone", func() bool {
		return n.relay.trackCount() == 0 && len(n.relay.reg.announcersOf(testTrack.Namespace)) == 0
	})
}

// fetchAll FETCHes the whole of testTrack through the relay and reads it.
func fetchAll(t *testing.T, c *moqt.Session) (*moqt.Fetch, []moqt.Object, error) {
	t.Helper()
	ctx := fetchCtx(t)
	f, err := c.Fetch(ctx, testTrack, wire.Params{})
	if err != nil {
		return nil, nil, err
	}
	objs, err := readFetch(ctx, f)
	return f, objs, err
}

// TestEndedTrackServedFromCache: once its publisher ended the track
// (TRACK_ENDED) and left, the relay still answers FETCH from the track's
// cache, with End Of Track and the final Largest Object in FETCH_OK
// (§9.12), and TRACK_STATUS with that Largest Object (§9.13), until
// Config.KeepEnded (the cache's Duration by default) passes; then they get
// DOES_NOT_EXIST, and the cache has left the budget. A SUBSCRIBE meanwhile
// gets DOES_NOT_EXIST, as SUBSCRIBE_OK needs an Established upstream
// (§7.4). Before, FETCH and TRACK_STATUS got DOES_NOT_EXIST at once: the
// relay dropped the cache with the track.
func TestEndedTrackServedFromCache(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		budget := moqt.NewCacheBudget(0)
		n := startNode(t, scheme, Config{Cache: moqt.CacheLimits{Bytes: 1 << 20, Duration: 20 * time.Second, Budget: budget}}, nil)
		endTrack(t, n, nil)
		c, _ := n.dial("/late", nil)
		ctx := fetchCtx(t)

		f, objs, err := fetchAll(t, c)
		require.NoError(t, err, "FETCH after the publisher left")
		assert.True(t, f.EndOfTrack)
		assert.Equal(t, wire.Location{Group: 1, Object: 1}, f.End)
		assert.Equal(t, endedObjects, locs(objs))
		for _, o := range objs {
			assert.Zero(t, o.EndOfRange, "at %v", o.Location)
			assert.Equal(t, payload(o.Location.Group, o.Location.Object), o.Payload)
		}
		ts, err := c.TrackStatus(ctx, testTrack, wire.Params{})
		require.NoError(t, err, "TRACK_STATUS after the publisher left")
		assert.Equal(t, wire.Some(wire.Location{Group: 1, Object: 1}), ts.Largest)
		_, err = subscribe(t, c, testTrack, wire.Params{})
		assert.Equal(t, wire.ReqDoesNotExist, requestCode(t, err), "SUBSCRIBE: no publisher")
		assert.Equal(t, 1, n.relay.endedCount())
		assert.Positive(t, budget.Held())

		time.Sleep(20 * time.Second) // past KeepEnded, the cache's Duration
		settled(t, "the ended track released", func() bool { return n.relay.endedCount() == 0 && budget.Held() == 0 })
		_, _, err = fetchAll(t, c)
		assert.Equal(t, wire.ReqDoesNotExist, requestCode(t, err), "FETCH once released")
		_, err = c.TrackStatus(fetchCtx(t), testTrack, wire.Params{})
		assert.Equal(t, wire.ReqDoesNotExist, requestCode(t, err), "TRACK_STATUS once released")
	})
}

// TestEndedTrackKeptWithinMaxCacheDuration: a track's MAX_CACHE_DURATION
// (§10.3) bounds how long its cache is kept after its end, below
// KeepEnded: nothing of it may be served past that.
func TestEndedTrackKeptWithinMaxCacheDuration(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		endTrack(t, n, wire.KVList{{Type: wire.PropMaxCacheDuration, Value: 5000}})
		c, _ := n.dial("/late", nil)
		time.Sleep(4 * time.Second)
		_, objs, err := fetchAll(t, c)
		require.NoError(t, err, "within MAX_CACHE_DURATION")
		assert.Equal(t, endedObjects, locs(objs))
		time.Sleep(2 * time.Second)
		settled(t, "released at MAX_CACHE_DURATION", func() bool { return n.relay.endedCount() == 0 })
		_, _, err = fetchAll(t, c)
		assert.Equal(t, wire.ReqDoesNotExist, requestCode(t, err))
	})
}

// TestEndedTrackReplacedByNewPublisher: a new publisher of an ended track
// replaces its kept cache, whose group numbers it may reuse (here it
// starts again at group 0, with other payloads): one announcing a
// namespace of the track is asked for it from then on; one offering the
// track with PUBLISH, or reached through Config.Upstream by a SUBSCRIBE,
// makes a new track, and the old cache goes at once; so does a namespace
// of the track offered (Relay.OfferNamespace), or the track said to be
// published elsewhere (Relay.RetryHeld), as a cluster does for its other
// relays' publishers, Config.Upstream being asked from then on.
func TestEndedTrackReplacedByNewPublisher(t *testing.T) {
	for _, how := range []string{"announce", "publish", "subscribe", "offer", "retry"} {
		t.Run(how, func(t *testing.T) {
			forSchemes(t, func(t *testing.T, scheme string) {
				var n *node
				n = startNode(t, scheme, Config{Upstream: upstreamTo(&n, "/pub2")}, nil)
				endTrack(t, n, nil)
				require.Equal(t, 1, n.relay.endedCount())
				tr, err := moqt.NewLocalTrack(testTrack, nil)
				require.NoError(t, err)
				tr.SetCache(moqt.CacheLimits{Objects: 100})
				w := tr.OpenSubgroup(0, 0, moqt.SubgroupOptions{EndOfGroup: true})
				require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{}, Payload: []byte("new")}))
				require.NoError(t, w.Close())
				p := &fetchPub{track: tr, ranges: make(chan wire.LocationFilter, 16)}
				pc, ps := n.dial("/pub2", p)
				settled(t, "a session alone is no publisher", func() bool { return n.relay.endedCount() == 1 })
				switch how {
				case "announce":
					n.relay.reg.addAnnouncer(ps, wire.NewNamespace("live"))
				case "publish":
					_, err := tr.Publish(fetchCtx(t), pc, wire.Params{}, moqt.AcceptOptions{})
					require.NoError(t, err)
				case "subscribe":
					c, _ := n.dial("/sub2", nil)
					_, err := subscribe(t, c, testTrack, wire.Params{})
					require.NoError(t, err)
				case "offer":
					t.Cleanup(n.relay.OfferNamespace(wire.NewNamespace("live")))
				case "retry":
					n.relay.RetryHeld(testTrack)
				}
				settled(t, "the old cache released", func() bool { return n.relay.endedCount() == 0 })
				c, _ := n.dial("/late", nil)
				_, objs, err := fetchAll(t, c)
				require.NoError(t, err)
				require.Len(t, objs, 1, "the new track's only object: %v", locs(objs))
				assert.Equal(t, []byte("new"), objs[0].Payload)
			})
		})
	}
}

// TestEndedTracksBounded: many short tracks ending do not pile up: at most
// maxEndedTracks are kept, the oldest released first, every one is
// released when its time is up, and the relay's Close releases the rest
// and stops their timers.
func TestEndedTracksBounded(t *testing.T) {
	old := maxEndedTracks
	maxEndedTracks = 4
	t.Cleanup(func() { maxEndedTracks = old })
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{KeepEnded: 10 * time.Second}, nil)
		pc, _ := n.dial("/pub", nil)
		ctx := fetchCtx(t)
		name := func(i int) wire.FullTrackName {
			return wire.FullTrackName{Namespace: wire.NewNamespace("short"), Name: fmt.Appendf(nil, "t%d", i)}
		}
		end := func(i int) {
			tr, err := moqt.NewLocalTrack(name(i), nil)
			require.NoError(t, err)
			_, err = tr.Publish(ctx, pc, wire.Params{}, moqt.AcceptOptions{})
			require.NoError(t, err)
			synctest.Wait()
			tr.End(wire.DoneTrackEnded, "short")
			synctest.Wait()
		}
		for i := range 6 {
			end(i)
		}
		assert.Equal(t, 4, n.relay.endedCount(), "at most maxEndedTracks kept")
		assert.Nil(t, n.relay.reg.endedTrack(name(1)), "the oldest released")
		assert.NotNil(t, n.relay.reg.endedTrack(name(2)))
		assert.NotNil(t, n.relay.reg.endedTrack(name(5)))
		time.Sleep(10 * time.Second)
		settled(t, "every one released in its time", func() bool { return n.relay.endedCount() == 0 })

		end(6)
		require.Equal(t, 1, n.relay.endedCount())
		require.NoError(t, n.relay.Close())
		assert.Equal(t, 0, n.relay.endedCount(), "Close releases the ended tracks")
	})
}

// TestEndedTrackNotKeptWhenRestarted: a track that ends because the
// publishers left are all behind it (they restarted it, numbering groups
// anew) keeps no cache: they have the track now, and FETCH goes to them.
func TestEndedTrackNotKeptWhenRestarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		a, _, _, sub := n.twoPublishers(t)
		writeGroup(t, a.track, 3, 2)
		_, err := readSubgroup(t, sub)
		require.NoError(t, err)
		a.track.End(wire.DoneTrackEnded, "over")
		assert.Equal(t, wire.DoneTrackEnded, doneCode(t, sub))
		settled(t, "the track left, its cache not kept", func() bool {
			return n.relay.trackCount() == 0 && n.relay.endedCount() == 0
		})
	})
}
