package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

var video = wire.FullTrackName{Namespace: wire.NewNamespace("live", "cam"), Name: []byte("video")}

// threeNodes starts NATS and nodes A, B and C.
func threeNodes(t *testing.T) (*natsServer, *testNode, *testNode, *testNode) {
	return threeNodesTTL(t, testTTL)
}

// threeNodesSteady is threeNodes with the default TTL, for tests in which
// nothing is to expire: under a heavy load the short one's idle bound on
// the nodes' sessions (2/3 of it) can end a session between keep-alives.
func threeNodesSteady(t *testing.T) (*natsServer, *testNode, *testNode, *testNode) {
	return threeNodesTTL(t, defaultTTL)
}

func threeNodesTTL(t *testing.T, ttl time.Duration) (*natsServer, *testNode, *testNode, *testNode) {
	ns := startNATS(t)
	node := func(name string) *testNode { return startTestNodeWith(t, name, ns.url(), ttl, nil) }
	return ns, node("A"), node("B"), node("C")
}

// payloads lists "g/i" for groups from..to-1 of n objects.
func payloads(from, to uint64, n int) []string {
	var out []string
	for g := from; g < to; g++ {
		for i := 0; i < n; i++ {
			out = append(out, fmt.Sprintf("%d/%d", g, i))
		}
	}
	return out
}

func TestPublisherAtOneNodeSubscribersAtOthersGetEveryObjectOnce(t *testing.T) {
	_, a, b, c := threeNodesSteady(t)
	pub := newPublisher(t, video)
	pub.announce(t, a)
	b.waitRoute(video, a, 10*time.Second)
	c.waitRoute(video, a, 10*time.Second)

	var subs []*moqt.Subscription
	for _, tn := range []*testNode{b, b, c, c} {
		sub, err := subscribe(t, tn.client(nil), video)
		require.NoError(t, err, "at %s", tn.name)
		subs = append(subs, sub)
	}
	assert.Equal(t, 1, pub.subscribes(), "the publisher is asked once, by its node")
	assert.Equal(t, 2, a.peerSubscribes(), "one inter-node subscription per node, shared by its subscribers")

	for g := uint64(0); g < 5; g++ {
		writeGroup(t, pub.track, g, 10)
	}
	for i, sub := range subs {
		assert.ElementsMatch(t, payloads(0, 5, 10), readObjects(t, sub, 50), "subscriber %d: every object, once (groups travel on streams of their own)", i)
	}
	// Nothing more than what was published: the next object read is the
	// next one written.
	writeGroup(t, pub.track, 5, 1)
	for _, sub := range subs {
		assert.Equal(t, []string{"5/0"}, readObjects(t, sub, 1))
	}
}

func TestDiscoveryAcrossNodes(t *testing.T) {
	_, a, b, c := threeNodesSteady(t)
	watcher := c.client(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nsSub, err := watcher.SubscribeNamespace(ctx, wire.NewNamespace("live"), wire.Params{})
	require.NoError(t, err)

	pub := newPublisher(t, video)
	_, ann := pub.announce(t, a)
	ev, err := nsSub.Next(ctx)
	require.NoError(t, err)
	assert.Equal(t, moqt.NamespaceEvent{Namespace: video.Namespace}, ev, "announced at A, seen at C")

	// A late SUBSCRIBE_NAMESPACE at B sees it at once.
	late, err := b.client(nil).SubscribeNamespace(ctx, wire.NewNamespace(), wire.Params{})
	require.NoError(t, err)
	ev, err = late.Next(ctx)
	require.NoError(t, err)
	assert.Equal(t, moqt.NamespaceEvent{Namespace: video.Namespace}, ev)

	require.NoError(t, ann.Close())
	ev, err = nsSub.Next(ctx)
	require.NoError(t, err)
	assert.Equal(t, moqt.NamespaceEvent{Namespace: video.Namespace, Done: true}, ev, "withdrawn at A: NAMESPACE_DONE at C")
	ev, err = late.Next(ctx)
	require.NoError(t, err)
	assert.True(t, ev.Done)

	// A subscriber at A, where it was announced, is not told twice.
	_ = a
}

func TestNodeKilledSubscribersToldAndPublisherFoundAtAnother(t *testing.T) {
	_, a, b, c := threeNodes(t)
	pub := newPublisher(t, video)
	pub.announce(t, a)
	b.waitRoute(video, a, 10*time.Second)
	c.waitRoute(video, a, 10*time.Second)
	sb, err := subscribe(t, b.client(nil), video)
	require.NoError(t, err)
	sc, err := subscribe(t, c.client(nil), video)
	require.NoError(t, err)
	writeGroup(t, pub.track, 0, 3)
	readObjects(t, sb, 3)
	readObjects(t, sc, 3)

	a.kill()
	// Told within the TTL of A's last refresh, which came at most TTL/3
	// before; a second TTL covers the registry's own expiry rounds.
	for _, sub := range []*moqt.Subscription{sb, sc} {
		err := ended(t, sub, 2*testTTL+time.Second)
		var done *moqt.DoneError
		require.True(t, errors.As(err, &done), "PUBLISH_DONE, not %v", err)
	}

	// The publisher comes back at C; new subscribers at B find it there.
	pub2 := newPublisher(t, video)
	pub2.announce(t, c)
	b.waitRoute(video, c, 10*time.Second)
	sub, err := subscribe(t, b.client(nil), video)
	require.NoError(t, err)
	writeGroup(t, pub2.track, 0, 4)
	assert.ElementsMatch(t, payloads(0, 1, 4), readObjects(t, sub, 4))
}

// Two publishers announce one namespace at two nodes, each with a track
// of its own: every node finds each track, whether another node announced
// the namespace first or a session connected to it did (§7.5: a SUBSCRIBE
// goes to every matching publisher; FETCH and TRACK_STATUS to one that has
// the track). Before, C asked only A, the first to register the
// namespace, and A and B only their own publisher: DOES_NOT_EXIST.
func TestNamespaceAtTwoNodesEveryTrackFound(t *testing.T) {
	_, a, b, c := threeNodesSteady(t)
	audio := wire.FullTrackName{Namespace: video.Namespace, Name: []byte("audio")}
	pubV, pubA := newPublisher(t, video), newPublisher(t, audio)
	pubV.announce(t, a)
	c.waitRoute(video, a, 10*time.Second)
	pubA.announce(t, b)
	b.waitRoute(video, a, 10*time.Second)
	waitTargets(t, a, audio, 1) // a view holds the other nodes' entries
	waitTargets(t, c, audio, 2)
	var subs []*moqt.Subscription
	for _, at := range []struct {
		tn   *testNode
		name wire.FullTrackName
	}{{c, video}, {c, audio}, {a, audio}, {b, video}} {
		sub, err := subscribe(t, at.tn.client(nil), at.name)
		require.NoError(t, err, "%s at %s", at.name, at.tn.name)
		subs = append(subs, sub)
	}
	writeGroup(t, pubV.track, 0, 3)
	writeGroup(t, pubA.track, 0, 2)
	for i, n := range []int{3, 2, 2, 3} {
		assert.ElementsMatch(t, payloads(0, 1, n), readObjects(t, subs[i], n), "subscriber %d", i)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tn := range []*testNode{a, c} {
		s := tn.client(nil)
		ts, err := s.TrackStatus(ctx, audio, wire.Params{})
		require.NoError(t, err, "TRACK_STATUS at %s", tn.name)
		assert.Equal(t, wire.Some(wire.Location{Group: 0, Object: 1}), ts.Largest)
		f, err := s.Fetch(ctx, audio, wire.Params{LocationFilter: wire.Some(wire.RangeFilterToObject(wire.Location{}, wire.Location{Group: 0, Object: 1}))})
		require.NoError(t, err, "FETCH at %s", tn.name)
		var got []string
		for {
			o, err := f.ReadObject(ctx)
			if err != nil {
				require.ErrorIs(t, err, io.EOF)
				break
			}
			got = append(got, string(o.Payload))
		}
		assert.Equal(t, payloads(0, 1, 2), got, "FETCH at %s", tn.name)
	}
}

// A publisher that moves to another node, announcing there before it
// leaves the first, carries the track on: the node its subscribers are at
// subscribes to the new node as soon as it announces the namespace (§7.5:
// a PUBLISH_NAMESPACE matching a subscription gets a SUBSCRIBE), so the
// track outlives the first publisher. Before, a track carried from one
// node never subscribed to another, and ended with the first publisher.
func TestPublisherMovingToAnotherNodeCarriesTheTrackOn(t *testing.T) {
	_, a, b, c := threeNodesSteady(t)
	pub1 := newPublisher(t, video)
	s1, _ := pub1.announce(t, a)
	c.waitRoute(video, a, 10*time.Second)
	sub, err := subscribe(t, c.client(nil), video)
	require.NoError(t, err)
	writeGroup(t, pub1.track, 0, 3)
	assert.ElementsMatch(t, payloads(0, 1, 3), readObjects(t, sub, 3))

	pub2 := newPublisher(t, video)
	pub2.announce(t, b)
	select {
	case <-pub2.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the track carried at C did not subscribe to the publisher at B")
	}
	writeGroup(t, pub2.track, 1, 2)
	assert.ElementsMatch(t, payloads(1, 2, 2), readObjects(t, sub, 2), "from the publisher at B")

	require.NoError(t, s1.Close()) // the first publisher leaves
	writeGroup(t, pub2.track, 2, 2)
	assert.ElementsMatch(t, payloads(2, 3, 2), readObjects(t, sub, 2), "the track goes on")
	select {
	case <-sub.Done():
		t.Fatalf("the subscription ended: %v", sub.Err())
	default:
	}
}

// waitTargets waits until tn's view routes name to n nodes.
func waitTargets(t *testing.T, tn *testNode, name wire.FullTrackName, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		targets, _, changed := tn.node.view.route(name)
		if len(targets) == n {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%s: %d nodes for %s, want %d", tn.name, len(targets), name, n)
		}
	}
}

func TestNoLoopARequestFromANodeIsNotRoutedOn(t *testing.T) {
	_, a, _, c := threeNodesSteady(t)
	pub := newPublisher(t, video)
	pub.announce(t, c)
	a.waitRoute(video, c, 10*time.Second)

	// A session presenting the cluster token is a node's: A does not send
	// its request on to C, where the track is.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	peer, err := moqt.Dial(ctx, "moqt://"+a.srv.Addr().String()+"/", &moqt.Config{Logger: quiet,
		ServerCertificateHashes: [][32]byte{a.hash},
		AuthorizationTokens:     []wire.Token{wire.UseToken(wire.TokenTypeOutOfBand, token)}})
	require.NoError(t, err)
	defer peer.Close()
	_, err = subscribe(t, peer, video)
	var re *moqt.RequestError
	require.True(t, errors.As(err, &re), "refused, not %v", err)
	assert.Equal(t, wire.ReqDoesNotExist, re.Code)
	_, err = peer.PublishNamespace(ctx, wire.NewNamespace("x"), wire.Params{})
	require.True(t, errors.As(err, &re), "a node asks only for tracks: %v", err)
	assert.Equal(t, wire.ReqUnauthorized, re.Code)

	// A client's request is routed to C.
	sub, err := subscribe(t, a.client(nil), video)
	require.NoError(t, err)
	writeGroup(t, pub.track, 0, 2)
	assert.ElementsMatch(t, payloads(0, 1, 2), readObjects(t, sub, 2))
	assert.Equal(t, 1, c.peerSubscribes())
}

// TestLateRefreshDoesNotCutFlows: a node that B's registry view drops
// while its session is up (its refresh late: a busy machine, a NATS
// hiccup) takes no route any more, but the flows through it go on; when
// the node comes back in the registry its session serves new routes again.
func TestLateRefreshDoesNotCutFlows(t *testing.T) {
	_, a, b, _ := threeNodes(t)
	pub, sub := liveAcross(t, a, b)

	// B's view expires everything of A at once, as if A's refreshes had
	// stopped for two TTLs.
	rl := b.node.relay()
	b.node.view.run(rl, b.node.peers, b.node.view.expire(time.Now().Add(2*testTTL), testTTL))
	writeGroup(t, pub.track, 1, 3)
	assert.ElementsMatch(t, payloads(1, 2, 3), readObjects(t, sub, 3), "the flow through A goes on")
	select {
	case <-sub.Done():
		t.Fatalf("the subscription ended: %v", sub.Err())
	default:
	}
	// A's next refresh puts it back: a new subscriber at B is routed there.
	b.waitRoute(video, a, 10*time.Second)
	sub2, err := subscribe(t, b.client(nil), video)
	require.NoError(t, err)
	writeGroup(t, pub.track, 2, 2)
	assert.ElementsMatch(t, payloads(2, 3, 2), readObjects(t, sub2, 2))
	assert.ElementsMatch(t, payloads(2, 3, 2), readObjects(t, sub, 2))
}

// liveAcross announces video at a and subscribes to it at b, through the
// cluster, once a route is known; group 0's three objects have crossed.
func liveAcross(t *testing.T, a, b *testNode) (*publisher, *moqt.Subscription) {
	t.Helper()
	pub := newPublisher(t, video)
	pub.announce(t, a)
	b.waitRoute(video, a, 10*time.Second)
	sub, err := subscribe(t, b.client(nil), video)
	require.NoError(t, err)
	writeGroup(t, pub.track, 0, 3)
	require.ElementsMatch(t, payloads(0, 1, 3), readObjects(t, sub, 3))
	return pub, sub
}
