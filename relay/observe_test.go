package relay

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// recorder is an Observer keeping the last state told of each name.
type recorder struct {
	mu     sync.Mutex
	ns     map[string][]*moqt.Session
	tracks map[string][]*moqt.Session
	calls  int
}

func newRecorder() *recorder {
	return &recorder{ns: map[string][]*moqt.Session{}, tracks: map[string][]*moqt.Session{}}
}

func (r *recorder) Namespace(ns wire.Namespace, from []*moqt.Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ns[ns.String()] = from
	r.calls++
}

func (r *recorder) Track(name wire.FullTrackName, from []*moqt.Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tracks[name.String()] = from
	r.calls++
}

func (r *recorder) nsFrom(ns wire.Namespace) ([]*moqt.Session, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	from, ok := r.ns[ns.String()]
	return from, ok
}

func (r *recorder) trackFrom(name wire.FullTrackName) ([]*moqt.Session, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	from, ok := r.tracks[name.String()]
	return from, ok
}

func TestObserverHearsNamespacesAndTracksComeAndGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		n := startNode(t, "moqt", Config{Observer: rec}, nil)
		live := wire.NewNamespace("live", "cam")
		c1, s1 := n.dial("/p1", nil)
		c2, s2 := n.dial("/p2", nil)
		a1 := announceNS(t, c1, live)
		synctest.Wait()
		from, _ := rec.nsFrom(live)
		assert.Equal(t, []*moqt.Session{s1}, from, "told once its PUBLISH_NAMESPACE is accepted, with the session")
		a2 := announceNS(t, c2, live)
		synctest.Wait()
		from, _ = rec.nsFrom(live)
		assert.ElementsMatch(t, []*moqt.Session{s1, s2}, from)
		require.NoError(t, a1.Close())
		synctest.Wait()
		from, _ = rec.nsFrom(live)
		assert.Equal(t, []*moqt.Session{s2}, from)
		require.NoError(t, a2.Close())
		synctest.Wait()
		from, ok := rec.nsFrom(live)
		assert.True(t, ok)
		assert.Empty(t, from, "the last announcement went: none")

		ss, err := publishTo(t, c1, newTrack(t, testTrack), wire.Params{})
		require.NoError(t, err)
		synctest.Wait()
		tf, _ := rec.trackFrom(testTrack)
		assert.Equal(t, []*moqt.Session{s1}, tf, "a PUBLISHed track, with its publisher")
		require.NoError(t, ss.End(wire.DoneTrackEnded, "bye"))
		synctest.Wait()
		tf, ok = rec.trackFrom(testTrack)
		assert.True(t, ok)
		assert.Empty(t, tf, "PUBLISH_DONE: gone")
	})
}

func TestObserverLeavesUpstreamSessionsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		var n *node
		n = startNode(t, "moqt", Config{Observer: rec, Upstream: upstreamTo(&n, "/up"), UpstreamTracksOnly: true}, nil)
		up := n.newPublisher("/up", testTrack, nil)
		c, _ := n.dial("/sub", nil)
		sub, err := subscribe(t, c, testTrack, wire.Params{})
		require.NoError(t, err, "routed to Upstream's session, which the relay then knows as one")
		defer sub.Close()
		other := wire.NewNamespace("other")
		announceNS(t, up.client, other)
		synctest.Wait()
		from, _ := rec.nsFrom(other)
		assert.Empty(t, from, "an upstream session's namespace is not this relay's to tell")
	})
}

func TestOfferNamespaceSeenBySubscribersAndRoutedUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type asked struct {
			s     *moqt.Session
			track wire.FullTrackName
			ok    bool
		}
		var mu sync.Mutex
		var got []asked
		var n *node
		up := UpstreamFunc(func(ctx context.Context, ns wire.Namespace) (*moqt.Session, error) {
			tr, ok := RequestTrack(ctx)
			mu.Lock()
			got = append(got, asked{RequestSession(ctx), tr, ok})
			mu.Unlock()
			return n.session("/origin"), nil
		})
		n = startNode(t, "moqt", Config{Upstream: up, UpstreamTracksOnly: true}, nil)
		origin := n.newPublisher("/origin", testTrack, nil)
		sc, ss := n.dial("/sub", nil)
		watch, err := subscribeNS(t, sc, wire.NewNamespace("live"), false, wire.Params{})
		require.NoError(t, err)

		live := testTrack.Namespace
		w1 := n.relay.OfferNamespace(live)
		assert.Equal(t, published(live), nextEvent(t, watch), "an outside offer is seen as an announcement is")
		w2 := n.relay.OfferNamespace(live)
		w1()
		w1() // idempotent
		noEvent(t, watch, 0)
		synctest.Wait()
		noEvent(t, watch, 0)

		sub, err := subscribe(t, sc, testTrack, wire.Params{})
		require.NoError(t, err, "its tracks go to Upstream")
		defer sub.Close()
		assert.Len(t, origin.subscribes(), 1)
		mu.Lock()
		assert.Equal(t, []asked{{ss, testTrack, true}}, got, "Upstream is told who asks, for what")
		mu.Unlock()

		w2()
		assert.Equal(t, withdrawn(live), nextEvent(t, watch), "the last offer withdrawn: NAMESPACE_DONE")
		require.NoError(t, watch.Close())
		n.relay.ns.mu.Lock()
		discs := len(n.relay.ns.discs)
		n.relay.ns.mu.Unlock()
		assert.Zero(t, discs, "UpstreamTracksOnly: no SUBSCRIBE_NAMESPACE upstream")
	})
}

func TestUpstreamTracksOnlyAnnouncesNothingUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n *node
		n = startNode(t, "moqt", Config{Upstream: upstreamTo(&n, "/up"), UpstreamTracksOnly: true}, nil)
		uh := &tracksClient{}
		uc, _ := n.dial("/up", uh)
		upWatch, err := subscribeNS(t, uc, wire.NewNamespace(), false, wire.Params{})
		require.NoError(t, err)
		pc, _ := n.dial("/pub", nil)
		live := wire.NewNamespace("live")
		announceNS(t, pc, live)
		// The upstream's session is also a client here: it hears of the
		// namespace as any subscriber does, and nothing else reaches it.
		assert.Equal(t, published(live), nextEvent(t, upWatch))
		synctest.Wait()
		n.relay.ns.mu.Lock()
		fwd := n.relay.ns.entries[live.Key()].fwd
		n.relay.ns.mu.Unlock()
		assert.Nil(t, fwd, "not announced upstream")
	})
}
