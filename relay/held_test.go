package relay

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// knownUpstream is an Upstream that, like a cluster's, routes a track
// only once it knows where it is published: a namespace covering it, or
// the track itself; never for a request from peer.
type knownUpstream struct {
	n    **node
	path string // the session it returns

	mu     sync.Mutex
	ns     []wire.Namespace
	tracks []wire.FullTrackName
	peer   *moqt.Session
	asked  []*moqt.Session // who asked, in order
}

func (k *knownUpstream) Session(ctx context.Context, _ wire.Namespace) (*moqt.Session, error) {
	name, ok := RequestTrack(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.asked = append(k.asked, RequestSession(ctx))
	if !ok || RequestSession(ctx) == k.peer {
		return nil, nil
	}
	for _, ns := range k.ns {
		if name.Namespace.HasPrefix(ns) {
			return (*k.n).session(k.path), nil
		}
	}
	for _, tr := range k.tracks {
		if tr.Key() == name.Key() {
			return (*k.n).session(k.path), nil
		}
	}
	return nil, nil
}

func (k *knownUpstream) learnNamespace(ns wire.Namespace) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ns = append(k.ns, ns)
}

func (k *knownUpstream) learnTrack(name wire.FullTrackName) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.tracks = append(k.tracks, name)
}

func heldCount(n *node) int {
	n.relay.reg.mu.Lock()
	defer n.relay.reg.mu.Unlock()
	return n.relay.reg.held
}

// A SUBSCRIBE held by RENDEZVOUS_TIMEOUT proceeds when the relay is
// offered a namespace covering its track (a publisher at another relay of
// a cluster), and gets its objects; one for a track not covered keeps
// waiting and times out.
func TestHeldSubscribeProceedsWhenNamespaceOffered(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		var n *node
		up := &knownUpstream{n: &n, path: "/origin"}
		n = startNode(t, scheme, Config{Upstream: up, UpstreamTracksOnly: true}, nil)
		origin := n.newPublisher("/origin", testTrack, nil)
		c, _ := n.dial("/sub", nil)
		other := wire.FullTrackName{Namespace: wire.NewNamespace("news"), Name: []byte("video")}
		res := asyncSubscribe(t, c, testTrack, wire.Params{RendezvousTimeout: wire.Some[uint64](10_000)})
		resOther := asyncSubscribe(t, c, other, wire.Params{RendezvousTimeout: wire.Some[uint64](3_000)})
		settled(t, "both held", func() bool { return heldCount(n) == 2 })
		assert.Empty(t, origin.subscribes())

		live := wire.NewNamespace("live")
		up.learnNamespace(live)
		withdraw := n.relay.OfferNamespace(live)
		defer withdraw()
		r := <-res
		require.NoError(t, r.err, "the held SUBSCRIBE proceeds")
		defer r.sub.Close()
		require.Len(t, origin.subscribes(), 1)
		assert.True(t, origin.subscribes()[0].Params.RendezvousTimeout.Set, "its RENDEZVOUS_TIMEOUT goes upstream")
		writeGroup(t, origin.track, 0, 2)
		objs, err := readSubgroup(t, r.sub)
		require.NoError(t, err)
		assert.Len(t, objs, 2)

		ro := <-resOther
		assert.Equal(t, wire.ReqTimeout, requestCode(t, ro.err), "a track not covered waits out its timeout")
		settled(t, "none held", func() bool { return heldCount(n) == 0 })
	})
}

// RetryHeld has a held SUBSCRIBE ask Upstream again for its track (one
// PUBLISHed at another relay of a cluster); another track's stays held.
func TestHeldSubscribeProceedsOnRetryHeld(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		var n *node
		up := &knownUpstream{n: &n, path: "/origin"}
		n = startNode(t, scheme, Config{Upstream: up, UpstreamTracksOnly: true}, nil)
		origin := n.newPublisher("/origin", testTrack, nil)
		c, _ := n.dial("/sub", nil)
		audio := testTrack
		audio.Name = []byte("audio")
		res := asyncSubscribe(t, c, testTrack, wire.Params{RendezvousTimeout: wire.Some[uint64](10_000)})
		resAudio := asyncSubscribe(t, c, audio, wire.Params{RendezvousTimeout: wire.Some[uint64](3_000)})
		settled(t, "both held", func() bool { return heldCount(n) == 2 })

		up.learnTrack(testTrack)
		n.relay.RetryHeld(testTrack)
		r := <-res
		require.NoError(t, r.err, "the held SUBSCRIBE proceeds")
		defer r.sub.Close()
		writeGroup(t, origin.track, 0, 1)
		objs, err := readSubgroup(t, r.sub)
		require.NoError(t, err)
		assert.Len(t, objs, 1)

		ra := <-resAudio
		assert.Equal(t, wire.ReqTimeout, requestCode(t, ra.err))
	})
}

// Upstream routes by who asks: a retry asks for each session whose
// SUBSCRIBE is held until one is routed, so one Upstream refuses to route
// for (a cluster's peer) does not keep the others waiting.
func TestRetryHeldAsksForEachHolder(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		var n *node
		up := &knownUpstream{n: &n, path: "/origin"}
		n = startNode(t, scheme, Config{Upstream: up, UpstreamTracksOnly: true}, nil)
		n.newPublisher("/origin", testTrack, nil)
		pc, ps := n.dial("/peer", nil)
		up.mu.Lock()
		up.peer = ps
		up.mu.Unlock()
		hold := wire.Params{RendezvousTimeout: wire.Some[uint64](10_000)}
		resPeer := asyncSubscribe(t, pc, testTrack, hold)
		settled(t, "held", func() bool { return heldCount(n) == 1 })
		c, cs := n.dial("/sub", nil)
		res := asyncSubscribe(t, c, testTrack, hold)
		settled(t, "both held", func() bool { return heldCount(n) == 2 })

		up.learnTrack(testTrack)
		n.relay.RetryHeld(testTrack)
		r := <-res
		require.NoError(t, r.err, "the client's SUBSCRIBE is routed")
		defer r.sub.Close()
		rp := <-resPeer
		require.NoError(t, rp.err, "and the peer's, held for the same track, proceeds with it")
		defer rp.sub.Close()
		up.mu.Lock()
		defer up.mu.Unlock()
		assert.True(t, containsSession(up.asked, cs), "Upstream asked for the client")
	})
}
