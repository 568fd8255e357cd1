package relay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// chain starts an origin and an edge whose upstream is the origin, dialed
// with DialUpstream.
func chain(t *testing.T, scheme string, edgeCfg Config) (origin, edge *node) {
	t.Helper()
	origin = startNode(t, scheme, Config{}, nil)
	var d *Dialer
	edgeCfg.Upstream = UpstreamFunc(func(ctx context.Context, ns wire.Namespace) (*moqt.Session, error) {
		return d.Session(ctx, ns)
	})
	edge = startNode(t, scheme, edgeCfg, nil)
	d = DialUpstream(origin.url("/edge"), origin.clientConfig(edge.relay))
	t.Cleanup(func() { _ = d.Close() })
	return origin, edge
}

func TestNamespaceChainPublisherAtEdge(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		origin, edge := chain(t, scheme, Config{})
		sc, _ := origin.dial("/sub", nil)
		disc, err := subscribeNS(t, sc, wire.NewNamespace("live"), false, wire.Params{})
		require.NoError(t, err)

		pub := edge.newPublisher("/pub", testTrack, nil)
		ann := announceNS(t, pub.client, testTrack.Namespace)
		assert.Equal(t, published(testTrack.Namespace), nextEvent(t, disc), "the edge announced it to the origin")
		sub, err := subscribe(t, sc, testTrack, wire.Params{})
		require.NoError(t, err, "the origin routes the SUBSCRIBE to the edge, the edge to the publisher")
		waitFor(t, "publisher serves", func() bool { return len(pub.servedSubs()) == 1 })
		writeGroup(t, pub.track, 0, 3)
		objs, err := readSubgroup(t, sub)
		require.NoError(t, err)
		assert.Len(t, objs, 3)

		require.NoError(t, ann.Close())
		assert.Equal(t, withdrawn(testTrack.Namespace), nextEvent(t, disc), "withdrawn at the edge: withdrawn upstream")
		waitFor(t, "origin forgets it", func() bool { return origin.relay.localAnnouncers(testTrack.Namespace) == 0 })
	})
}

func TestNamespaceChainPublisherAtOrigin(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		origin, edge := chain(t, scheme, Config{})
		pub := origin.newPublisher("/pub", testTrack, nil)
		ann := announceNS(t, pub.client, testTrack.Namespace)

		sc, _ := edge.dial("/sub", nil)
		disc, err := subscribeNS(t, sc, wire.NewNamespace(), false, wire.Params{})
		require.NoError(t, err)
		assert.Equal(t, published(testTrack.Namespace), nextEvent(t, disc), "discovered upstream")
		sub, err := subscribe(t, sc, testTrack, wire.Params{})
		require.NoError(t, err)
		waitFor(t, "publisher serves", func() bool { return len(pub.servedSubs()) == 1 })
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
		waitFor(t, "edge tables empty", edge.relay.namespacesEmpty)
		waitFor(t, "the upstream SUBSCRIBE_NAMESPACE ends with its last user", func() bool {
			return origin.relay.namespacesEmpty()
		})
	})
}

// TestNamespaceUpstreamPrefixesDisjoint: a wider downstream prefix replaces
// the narrower upstream discovery instead of overlapping it upstream.
func TestNamespaceUpstreamPrefixesDisjoint(t *testing.T) {
	origin, edge := chain(t, "moqt", Config{})
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
			waitFor(t, "namespace tables empty", n.relay.namespacesEmpty)
			waitFor(t, "registry empty", func() bool { return n.relay.tablesEmpty() == nil })
		}
	})
}

// TestNamespacesEndWithRelayClose: Close resets the namespace subscriptions
// and revokes the announcements.
func TestNamespacesEndWithRelayClose(t *testing.T) {
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
	assert.True(t, n.relay.namespacesEmpty())
}
