package relay

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// chain starts an origin and an edge whose upstream is the origin.
func chain(t *testing.T, scheme string) (origin, edge *node) {
	t.Helper()
	origin = startNode(t, scheme, Config{}, nil)
	return origin, edgeOf(t, origin, "edge")
}

func TestNamespaceChainPublisherAtEdge(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		origin, edge := chain(t, scheme)
		sc, _ := origin.dial("/sub", nil)
		disc, err := subscribeNS(t, sc, wire.NewNamespace("live"), false, wire.Params{})
		require.NoError(t, err)

		pub := edge.newPublisher("/pub", testTrack, nil)
		ann := announceNS(t, pub.client, testTrack.Namespace)
		assert.Equal(t, published(testTrack.Namespace), nextEvent(t, disc), "the edge announced it to the origin")
		sub, err := subscribe(t, sc, testTrack, wire.Params{})
		require.NoError(t, err, "the origin routes the SUBSCRIBE to the edge, the edge to the publisher")
		settled(t, "publisher serves", func() bool { return len(pub.servedSubs()) == 1 })
		writeGroup(t, pub.track, 0, 3)
		objs, err := readSubgroup(t, sub)
		require.NoError(t, err)
		assert.Len(t, objs, 3)

		require.NoError(t, ann.Close())
		assert.Equal(t, withdrawn(testTrack.Namespace), nextEvent(t, disc), "withdrawn at the edge: withdrawn upstream")
		settled(t, "origin forgets it", func() bool { return origin.relay.localAnnouncers(testTrack.Namespace) == 0 })
	})
}

func TestNamespaceChainPublisherAtOrigin(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		origin, edge := chain(t, scheme)
		pub := origin.newPublisher("/pub", testTrack, nil)
		ann := announceNS(t, pub.client, testTrack.Namespace)

		sc, _ := edge.dial("/sub", nil)
		disc, err := subscribeNS(t, sc, wire.NewNamespace(), false, wire.Params{})
		require.NoError(t, err)
		assert.Equal(t, published(testTrack.Namespace), nextEvent(t, disc), "discovered upstream")
		sub, err := subscribe(t, sc, testTrack, wire.Params{})
		require.NoError(t, err)
		settled(t, "publisher serves", func() bool { return len(pub.servedSubs()) == 1 })
		writeGroup(t, pub.track, 0, 2)
		objs, err := readSubgroup(t, sub)
		require.NoError(t, err)
		assert.Len(t, objs, 2)

		// A narrower subscriber shares the upstream discovery.
		sc2, _ := edge.dial("/sub2", nil)
		narrow, err := subscribeNS(t, sc2, wire.NewNamespace("live"), false, wire.Params{})
		require.NoError(t, err)
		assert.Equal(t, published(testTrack.Namespace), nextEvent(t, narrow))
		require.NoError(t, ann.Close())
		assert.Equal(t, withdrawn(testTrack.Namespace), nextEvent(t, disc))
		assert.Equal(t, withdrawn(testTrack.Namespace), nextEvent(t, narrow))
		require.NoError(t, disc.Close())
		require.NoError(t, narrow.Close())
		settled(t, "edge tables empty", edge.relay.ns.empty)
		settled(t, "the upstream SUBSCRIBE_NAMESPACE ends with its last user", func() bool {
			return origin.relay.ns.empty()
		})
	})
}

// TestNamespaceUpstreamPrefixesDisjoint: a wider downstream prefix replaces
// the narrower upstream discovery instead of overlapping it upstream.
func TestNamespaceUpstreamPrefixesDisjoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin, edge := chain(t, "moqt")
		pub := origin.newPublisher("/pub", testTrack, nil)
		announceNS(t, pub.client, testTrack.Namespace)
		sc, _ := edge.dial("/sub", nil)
		narrow, err := subscribeNS(t, sc, wire.NewNamespace("live", "cam"), false, wire.Params{})
		require.NoError(t, err)
		assert.Equal(t, published(testTrack.Namespace), nextEvent(t, narrow))
		sc2, _ := edge.dial("/sub2", nil)
		wide, err := subscribeNS(t, sc2, wire.NewNamespace("live"), false, wire.Params{})
		require.NoError(t, err)
		assert.Equal(t, published(testTrack.Namespace), nextEvent(t, wide), "the wider prefix is asked upstream")
		edge.relay.ns.mu.Lock()
		n := len(edge.relay.ns.discs)
		edge.relay.ns.mu.Unlock()
		assert.Equal(t, 1, n, "one upstream SUBSCRIBE_NAMESPACE covering both")
	})
}

// TestNamespaceChurn: publishers and subscribers of namespaces and tracks
// come, go and are killed; nothing is left.
func TestNamespaceChurn(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{Linger: -1}, nil)
		for round := range 4 {
			var pubs []*moqt.Session
			var anns []*moqt.Announcement
			for i := range 3 {
				pc, _ := n.dial(fmt.Sprintf("/p%d-%d", round, i), nil)
				pubs = append(pubs, pc)
				anns = append(anns, announceNS(t, pc, wire.NewNamespace("live", fmt.Sprint(i))))
				_, err := publishTo(t, pc, newTrack(t, wire.FullTrackName{Namespace: wire.NewNamespace("live", fmt.Sprint(i)), Name: []byte("v")}), wire.Params{})
				require.NoError(t, err)
			}
			var subs []*moqt.NamespaceSubscription
			for i := range 3 {
				sc, _ := n.dial(fmt.Sprintf("/s%d-%d", round, i), &tracksClient{})
				s, err := subscribeNS(t, sc, wire.NewNamespace("live"), i%2 == 0, wire.Params{})
				require.NoError(t, err)
				subs = append(subs, s)
				if i == 2 {
					defer sc.Close()
				}
			}
			require.NoError(t, anns[0].Close())
			require.NoError(t, pubs[1].Close()) // killed with its announcement and track
			require.NoError(t, subs[0].Close())
			for _, s := range subs[1:] {
				_ = s.Close()
			}
			for _, pc := range pubs {
				_ = pc.Close()
			}
			settled(t, "namespace tables empty", n.relay.ns.empty)
			settled(t, "registry empty", func() bool { return n.relay.tablesEmpty() == nil })
		}
	})
}

// TestNamespacesEndWithRelayClose: Close resets the namespace subscriptions
// and revokes the announcements.
func TestNamespacesEndWithRelayClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		pc, _ := n.dial("/pub", nil)
		ann := announceNS(t, pc, wire.NewNamespace("live"))
		sc, _ := n.dial("/sub", &tracksClient{})
		disc, err := subscribeNS(t, sc, wire.NewNamespace(), false, wire.Params{})
		require.NoError(t, err)
		assert.Equal(t, published(wire.NewNamespace("live")), nextEvent(t, disc))
		require.NoError(t, n.relay.Close())
		select {
		case <-ann.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("announcement not revoked")
		}
		assert.Equal(t, withdrawn(wire.NewNamespace("live")), nextEvent(t, disc), "its stream ended: every namespace Done")
		assert.True(t, n.relay.ns.empty())
	})
}

// TestSessionNamespacesNotForwarded: session-level namespaces an upstream
// reports are never passed on to another session (§6.5). The library's
// own NamespaceWriter refuses to send them, so the report is applied
// directly, as another implementation could send it.
func TestSessionNamespacesNotForwarded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n *node
		n = startNode(t, "moqt", Config{Upstream: upstreamTo(&n, "/up")}, nil)
		_, up := n.dial("/up", moqt.HandlerFunc(func(r moqt.Request) {
			if sr, ok := r.(*moqt.SubscribeNamespaceRequest); ok && !sr.Tracks {
				if _, err := sr.Accept(wire.Params{}); err == nil {
					<-sr.Context().Done()
					return
				}
			}
			moqt.DefaultHandler.ServeMOQT(r)
		}))
		sc, _ := n.dial("/sub", nil)
		sub, err := subscribeNS(t, sc, wire.NewNamespace(), false, wire.Params{})
		require.NoError(t, err)
		var d *upDisc
		settled(t, "upstream discovery", func() bool {
			n.relay.ns.mu.Lock()
			defer n.relay.ns.mu.Unlock()
			for x := range n.relay.ns.discs {
				d = x
			}
			return d != nil
		})
		live := wire.NewNamespace("live")
		require.True(t, n.relay.ns.applyDisc(d, up, moqt.NamespaceEvent{Namespace: wire.NewNamespace(".session", "x")}))
		require.True(t, n.relay.ns.applyDisc(d, up, moqt.NamespaceEvent{Namespace: live}))
		assert.Equal(t, published(live), nextEvent(t, sub), "only the application's namespace")
		n.relay.ns.mu.Lock()
		entries := len(n.relay.ns.entries)
		n.relay.ns.mu.Unlock()
		assert.Equal(t, 1, entries, "the session-level namespace was not kept")
	})
}

func TestSubscribeTracksChainPublisherAtOrigin(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		origin, edge := chain(t, scheme)
		pc, _ := origin.dial("/pub", nil)
		tr := newTrack(t, testTrack)
		ss, err := publishTo(t, pc, tr, wire.Params{})
		require.NoError(t, err)

		sh := &tracksClient{}
		sc, _ := edge.dial("/sub", sh)
		req, err := subscribeNS(t, sc, wire.NewNamespace("live"), true, wire.Params{})
		require.NoError(t, err)
		settled(t, "the origin's track PUBLISHed through the edge", func() bool { return sh.subscription(0) != nil })
		assert.Equal(t, []string{testTrack.String()}, sh.published())
		// The edge pauses the PUBLISH it got until its own is accepted
		// (§7.5), so Forward may go 1, 0 and 1 again at the publisher:
		// groups are written until one gets through.
		got := false
		for g := uint64(0); !got && g < 50; g++ {
			settled(t, "Forward=1 at the publisher", ss.Forward)
			writeGroup(t, tr, g, 2)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			r, err := sh.subscription(0).AcceptSubgroup(ctx)
			cancel()
			if err != nil {
				continue
			}
			got = true
			for i := range 2 {
				o, err := r.ReadObject(nil)
				require.NoError(t, err)
				assert.LessOrEqual(t, o.Location.Group, g, "a group written, possibly an earlier one")
				assert.Equal(t, uint64(i), o.Location.Object)
			}
		}
		assert.True(t, got, "objects flow from the origin's publisher to the edge's subscriber")
		require.NoError(t, req.Close())
		settled(t, "the upstream SUBSCRIBE_TRACKS ends with the last downstream one", func() bool {
			origin.relay.ns.mu.Lock()
			defer origin.relay.ns.mu.Unlock()
			return len(origin.relay.ns.tsubs) == 0
		})
	})
}

// TestNamespaceThreeRelays: a publisher announcing at one edge is
// discovered and subscribed to from another edge, through the origin.
func TestNamespaceThreeRelays(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		origin := startNode(t, scheme, Config{}, nil)
		east, west := edgeOf(t, origin, "east"), edgeOf(t, origin, "west")
		pub := east.newPublisher("/pub", testTrack, nil)
		announceNS(t, pub.client, testTrack.Namespace)
		settled(t, "announced at the origin", func() bool { return origin.relay.localAnnouncers(testTrack.Namespace) == 1 })

		sc, _ := west.dial("/sub", nil)
		disc, err := subscribeNS(t, sc, wire.NewNamespace("live"), false, wire.Params{})
		require.NoError(t, err)
		assert.Equal(t, published(testTrack.Namespace), nextEvent(t, disc), "west discovers east's publisher through the origin")
		sub, err := subscribe(t, sc, testTrack, wire.Params{})
		require.NoError(t, err)
		settled(t, "publisher serves", func() bool { return len(pub.servedSubs()) == 1 })
		writeGroup(t, pub.track, 0, 3)
		objs, err := readSubgroup(t, sub)
		require.NoError(t, err)
		assert.Len(t, objs, 3)

		require.NoError(t, pub.client.Close())
		assert.Equal(t, withdrawn(testTrack.Namespace), nextEvent(t, disc), "the publisher's end travels to the far edge")
	})
}
