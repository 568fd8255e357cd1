package relay

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// tracksClient is a client Handler that records the PUBLISHes it gets and
// accepts them, or refuses them with refuse.
type tracksClient struct {
	mu     sync.Mutex
	pubs   []*moqt.PublishRequest
	subs   []*moqt.Subscription
	refuse wire.RequestErrorCode
}

func (c *tracksClient) ServeMOQT(r moqt.Request) {
	pr, ok := r.(*moqt.PublishRequest)
	if !ok {
		moqt.DefaultHandler.ServeMOQT(r)
		return
	}
	c.mu.Lock()
	c.pubs = append(c.pubs, pr)
	refuse := c.refuse
	c.mu.Unlock()
	if refuse != 0 {
		_ = pr.Reject(refuse, "refused by test subscriber")
		return
	}
	sub, err := pr.Accept(wire.Params{})
	if err == nil {
		c.mu.Lock()
		c.subs = append(c.subs, sub)
		c.mu.Unlock()
	}
}

// published lists the tracks of the PUBLISHes received.
func (c *tracksClient) published() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, p := range c.pubs {
		out = append(out, p.Track.String())
	}
	return out
}

func (c *tracksClient) subscription(i int) *moqt.Subscription {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i >= len(c.subs) {
		return nil
	}
	return c.subs[i]
}

// announceNS sends PUBLISH_NAMESPACE for ns on c.
func announceNS(t *testing.T, c *moqt.Session, ns wire.Namespace) *moqt.Announcement {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := c.PublishNamespace(ctx, ns, wire.Params{})
	require.NoError(t, err)
	return a
}

// subscribeNS sends SUBSCRIBE_NAMESPACE (or SUBSCRIBE_TRACKS) for prefix on c.
func subscribeNS(t *testing.T, c *moqt.Session, prefix wire.Namespace, tracks bool, p wire.Params) (*moqt.NamespaceSubscription, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if tracks {
		return c.SubscribeTracks(ctx, prefix, p)
	}
	return c.SubscribeNamespace(ctx, prefix, p)
}

// nextEvent is the next event of sub, within a few seconds.
func nextEvent(t *testing.T, sub *moqt.NamespaceSubscription) moqt.NamespaceEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := sub.Next(ctx)
	require.NoError(t, err)
	return ev
}

// noEvent checks that sub reports nothing for a while.
func noEvent(t *testing.T, sub *moqt.NamespaceSubscription, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ev, err := sub.Next(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "unexpected event %+v", ev)
}

func published(ns wire.Namespace) moqt.NamespaceEvent { return moqt.NamespaceEvent{Namespace: ns} }
func withdrawn(ns wire.Namespace) moqt.NamespaceEvent {
	return moqt.NamespaceEvent{Namespace: ns, Done: true}
}

// localAnnouncers is the number of sessions announcing ns at the relay.
func (rl *Relay) localAnnouncers(ns wire.Namespace) int {
	rl.ns.mu.Lock()
	defer rl.ns.mu.Unlock()
	if e := rl.ns.entries[ns.Key()]; e != nil {
		return len(e.local)
	}
	return 0
}

// tracksSubs is the number of SUBSCRIBE_TRACKS the relay serves.
func (rl *Relay) tracksSubs() int {
	rl.ns.mu.Lock()
	defer rl.ns.mu.Unlock()
	return len(rl.ns.tsubs)
}

func TestC054_PublishNamespaceForwardedToSubscribers(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		live := wire.NewNamespace("live", "cam")
		early, _ := n.dial("/early", nil)
		before, err := subscribeNS(t, early, wire.NewNamespace("live"), false, wire.Params{})
		require.NoError(t, err)
		other, _ := n.dial("/other", nil)
		elsewhere, err := subscribeNS(t, other, wire.NewNamespace("vod"), false, wire.Params{})
		require.NoError(t, err)

		pc, _ := n.dial("/pub", nil)
		own, err := subscribeNS(t, pc, wire.NewNamespace(), false, wire.Params{})
		require.NoError(t, err)
		ann := announceNS(t, pc, live)
		assert.Equal(t, published(live), nextEvent(t, before), "a subscriber whose prefix matches hears of it as it comes")
		assert.Equal(t, published(live), nextEvent(t, own), "echoed back to the announcer's own SUBSCRIBE_NAMESPACE (§4.1)")

		late, _ := n.dial("/late", nil)
		after, err := subscribeNS(t, late, wire.NewNamespace(), false, wire.Params{})
		require.NoError(t, err)
		assert.Equal(t, published(live), nextEvent(t, after), "and a later one at once")

		require.NoError(t, ann.Close())
		assert.Equal(t, withdrawn(live), nextEvent(t, before), "withdrawn: NAMESPACE_DONE")
		assert.Equal(t, withdrawn(live), nextEvent(t, after))
		assert.Equal(t, withdrawn(live), nextEvent(t, own))
		noEvent(t, elsewhere, time.Millisecond)
		for _, s := range []*moqt.NamespaceSubscription{before, elsewhere, own, after} {
			require.NoError(t, s.Close())
		}
		settled(t, "tables empty", n.relay.ns.empty)
	})
}

func TestNamespaceTwoAnnouncersOneLeaves(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		live := wire.NewNamespace("live")
		sc, _ := n.dial("/sub", nil)
		sub, err := subscribeNS(t, sc, wire.NewNamespace(), false, wire.Params{})
		require.NoError(t, err)
		c1, _ := n.dial("/p1", nil)
		c2, _ := n.dial("/p2", nil)
		a1 := announceNS(t, c1, live)
		a2 := announceNS(t, c2, live)
		assert.Equal(t, published(live), nextEvent(t, sub))
		settled(t, "both announcers", func() bool { return n.relay.localAnnouncers(live) == 2 })
		require.NoError(t, a1.Close())
		settled(t, "first withdrawn", func() bool { return n.relay.localAnnouncers(live) == 1 })
		// A namespace announced after the withdrawal comes after anything
		// the withdrawal sent: no NAMESPACE_DONE before it.
		marker := wire.NewNamespace("marker")
		announceNS(t, c1, marker)
		assert.Equal(t, published(marker), nextEvent(t, sub), "one announcer left: no NAMESPACE_DONE")
		require.NoError(t, a2.Close())
		assert.Equal(t, withdrawn(live), nextEvent(t, sub), "the last one left")
	})
}

func TestNamespaceKilledAnnouncerTakesItsNamespaces(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		sc, _ := n.dial("/sub", nil)
		sub, err := subscribeNS(t, sc, wire.NewNamespace("live"), false, wire.Params{})
		require.NoError(t, err)
		pc, _ := n.dial("/pub", nil)
		a, b := wire.NewNamespace("live", "a"), wire.NewNamespace("live", "b")
		announceNS(t, pc, a)
		announceNS(t, pc, b)
		got := []moqt.NamespaceEvent{nextEvent(t, sub), nextEvent(t, sub)}
		assert.ElementsMatch(t, []moqt.NamespaceEvent{published(a), published(b)}, got)
		require.NoError(t, pc.Close())
		got = []moqt.NamespaceEvent{nextEvent(t, sub), nextEvent(t, sub)}
		assert.ElementsMatch(t, []moqt.NamespaceEvent{withdrawn(a), withdrawn(b)}, got)
		require.NoError(t, sub.Close())
		settled(t, "tables empty", n.relay.ns.empty)
		settled(t, "no announcer left", func() bool { return n.relay.tablesEmpty() == nil })
	})
}

func TestNamespacePrefixUpdate(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pc, _ := n.dial("/pub", nil)
		live, sport := wire.NewNamespace("live", "a"), wire.NewNamespace("sport", "b")
		announceNS(t, pc, live)
		announceNS(t, pc, sport)
		sc, _ := n.dial("/sub", nil)
		sub, err := subscribeNS(t, sc, wire.NewNamespace("live"), false, wire.Params{})
		require.NoError(t, err)
		assert.Equal(t, published(live), nextEvent(t, sub))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, sub.Update(ctx, wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("sport"))}))
		assert.Equal(t, withdrawn(live), nextEvent(t, sub), "no longer under the prefix")
		assert.Equal(t, published(sport), nextEvent(t, sub), "announced before, under the new prefix")
		late := wire.NewNamespace("sport", "c")
		announceNS(t, pc, late)
		assert.Equal(t, published(late), nextEvent(t, sub))
		announceNS(t, pc, wire.NewNamespace("live", "z"))
		noEvent(t, sub, 200*time.Millisecond)
	})
}

func TestNamespaceTooLarge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{MaxNamespaceMatches: 2}, nil)
		pc, _ := n.dial("/pub", nil)
		announceNS(t, pc, wire.NewNamespace("live", "a"))
		announceNS(t, pc, wire.NewNamespace("live", "b"))
		sc, _ := n.dial("/sub", nil)
		sub, err := subscribeNS(t, sc, wire.NewNamespace("live"), false, wire.Params{})
		require.NoError(t, err, "two is within the limit")
		nextEvent(t, sub)
		nextEvent(t, sub)
		announceNS(t, pc, wire.NewNamespace("live", "c"))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			ev, err := sub.Next(ctx)
			if err != nil {
				var se *moqt.StreamError
				require.ErrorAs(t, err, &se, "grown past the limit: the stream is reset")
				assert.Equal(t, wire.ResetExcessiveLoad, se.Code)
				break
			}
			assert.True(t, ev.Done, "nothing past the limit: %+v", ev)
		}
		sc2, _ := n.dial("/sub2", nil)
		_, err = subscribeNS(t, sc2, wire.NewNamespace("live"), false, wire.Params{})
		assert.Equal(t, wire.ReqNamespaceTooLarge, requestCode(t, err), "three are too many at request time")
		_, err = subscribeNS(t, sc2, wire.NewNamespace("live", "a"), false, wire.Params{})
		assert.NoError(t, err, "a narrower prefix is not")
	})
}

// newTrack is a LocalTrack for name.
func newTrack(t *testing.T, name wire.FullTrackName) *moqt.LocalTrack {
	t.Helper()
	tr, err := moqt.NewLocalTrack(name, nil)
	require.NoError(t, err)
	return tr
}

func TestC060_PublishForwardedToSubscribeTracks(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		audio := wire.FullTrackName{Namespace: testTrack.Namespace, Name: []byte("audio")}
		pc, _ := n.dial("/pub", nil)
		_, err := publishTo(t, pc, newTrack(t, audio), wire.Params{})
		require.NoError(t, err)

		sh := &tracksClient{}
		sc, _ := n.dial("/sub", sh)
		_, err = subscribeNS(t, sc, wire.NewNamespace("live"), true, wire.Params{SubscriberPriority: wire.Some[uint8](7)})
		require.NoError(t, err)
		settled(t, "PUBLISH of the track available before", func() bool { return len(sh.published()) == 1 })
		assert.Equal(t, []string{audio.String()}, sh.published())
		sh.mu.Lock()
		prio := sh.pubs[0].Params.SubscriberPriority
		sh.mu.Unlock()
		assert.Equal(t, wire.Some[uint8](7), prio, "SUBSCRIBE_TRACKS's parameters are the PUBLISH's")

		own := &tracksClient{}
		pc2, _ := n.dial("/pub2", own)
		_, err = subscribeNS(t, pc2, wire.NewNamespace("live"), true, wire.Params{})
		require.NoError(t, err)
		settled(t, "the other publisher's track", func() bool { return len(own.published()) == 1 })
		video := newTrack(t, testTrack)
		vss, err := publishTo(t, pc2, video, wire.Params{})
		require.NoError(t, err)
		settled(t, "PUBLISH of the track published later", func() bool { return len(sh.published()) == 2 })
		assert.Equal(t, testTrack.String(), sh.published()[1])
		settled(t, "its subscription", func() bool { return sh.subscription(1) != nil })
		// The relay paused the PUBLISH (Forward 0, no subscriber yet) and
		// resumes it: wait for the resumption, not the PUBLISH's own 1.
		settled(t, "Forward=1 upstream", func() bool { return n.relay.upstreamForwarding(testTrack) && vss.Forward() })
		writeGroup(t, video, 0, 3)
		objs, err := readSubgroup(t, sh.subscription(1))
		require.NoError(t, err)
		assert.Len(t, objs, 3, "the PUBLISHed subscription carries the track")
		assert.Equal(t, []string{audio.String()}, own.published(), "a subscriber's own tracks are not offered to it")

		vod := &tracksClient{}
		vc, _ := n.dial("/vod", vod)
		_, err = subscribeNS(t, vc, wire.NewNamespace("vod"), true, wire.Params{})
		require.NoError(t, err)
		synctest.Wait()
		assert.Empty(t, vod.published(), "no PUBLISH outside the prefix")
	})
}

func TestC037_NoPublishAfterSubscribeTracksEnded(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		gone := &tracksClient{}
		gc, _ := n.dial("/gone", gone)
		ended, err := subscribeNS(t, gc, wire.NewNamespace("live"), true, wire.Params{})
		require.NoError(t, err)
		stays := &tracksClient{}
		sc, _ := n.dial("/stays", stays)
		_, err = subscribeNS(t, sc, wire.NewNamespace("live"), true, wire.Params{})
		require.NoError(t, err)
		settled(t, "both served", func() bool { return n.relay.tracksSubs() == 2 })
		require.NoError(t, ended.Close())
		// Its cancellation reaches the relay; nothing the relay exposes
		// tells when without depending on the rule under test.
		synctest.Wait()

		pc, _ := n.dial("/pub", nil)
		_, err = publishTo(t, pc, newTrack(t, testTrack), wire.Params{})
		require.NoError(t, err)
		settled(t, "PUBLISH to the one still subscribed", func() bool { return len(stays.published()) == 1 })
		synctest.Wait()
		assert.Empty(t, gone.published(), "no PUBLISH once its SUBSCRIBE_TRACKS ended")
	})
}

func TestPublishSkippedNeverFollowedByPublish(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{Linger: -1}, nil)
		sh := &tracksClient{refuse: wire.ReqUnauthorized}
		sc, _ := n.dial("/sub", sh)
		sub, err := subscribeNS(t, sc, wire.NewNamespace("live"), true, wire.Params{})
		require.NoError(t, err)
		pc, _ := n.dial("/pub", nil)
		tr := newTrack(t, testTrack)
		ss, err := publishTo(t, pc, tr, wire.Params{})
		require.NoError(t, err)
		ev := nextEvent(t, sub)
		assert.True(t, ev.Skipped, "a PUBLISH that could not be made: PUBLISH_SKIPPED")
		assert.Equal(t, testTrack.Namespace, ev.Namespace)
		assert.Equal(t, testTrack.Name, ev.TrackName)
		require.Len(t, sh.published(), 1)

		// The track goes and comes back: still no PUBLISH on this request.
		require.NoError(t, ss.End(wire.DoneTrackEnded, "bye"))
		settled(t, "track gone", func() bool { return n.relay.trackCount() == 0 })
		sh.mu.Lock()
		sh.refuse = 0
		sh.mu.Unlock()
		_, err = publishTo(t, pc, tr, wire.Params{})
		require.NoError(t, err)
		other := &tracksClient{}
		oc, _ := n.dial("/other", other)
		_, err = subscribeNS(t, oc, wire.NewNamespace("live"), true, wire.Params{})
		require.NoError(t, err)
		settled(t, "another subscriber gets the new PUBLISH", func() bool { return len(other.published()) == 1 })
		synctest.Wait()
		assert.Len(t, sh.published(), 1, "no PUBLISH after PUBLISH_SKIPPED")
	})
}

func TestSubscribeTracksTooLarge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{MaxNamespaceMatches: 1}, nil)
		pc, _ := n.dial("/pub", nil)
		_, err := publishTo(t, pc, newTrack(t, wire.FullTrackName{Namespace: testTrack.Namespace, Name: []byte("a")}), wire.Params{})
		require.NoError(t, err)
		synctest.Wait()
		// The second track's PUBLISH_OK has gone, but the relay has not
		// registered it yet: it counts already.
		proceed := make(chan struct{})
		release := sync.OnceFunc(func() { close(proceed) })
		defer release()
		n.relay.reg.publishAcceptedHook = func() { <-proceed }
		_, err = publishTo(t, pc, newTrack(t, wire.FullTrackName{Namespace: testTrack.Namespace, Name: []byte("b")}), wire.Params{})
		require.NoError(t, err)
		sc, _ := n.dial("/sub", &tracksClient{})
		_, err = subscribeNS(t, sc, wire.NewNamespace("live"), true, wire.Params{})
		assert.Equal(t, wire.ReqNamespaceTooLarge, requestCode(t, err), "a track whose PUBLISH_OK went counts")
		release()
		synctest.Wait()
		_, err = subscribeNS(t, sc, wire.NewNamespace("live"), true, wire.Params{})
		assert.Equal(t, wire.ReqNamespaceTooLarge, requestCode(t, err), "and once registered")
		_, err = subscribeNS(t, sc, wire.NewNamespace("vod"), true, wire.Params{})
		assert.NoError(t, err)
	})
}

func TestC052_PublishedTrackRoutesNoNamespace(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		audio := wire.FullTrackName{Namespace: testTrack.Namespace, Name: []byte("audio")}
		pub := n.newPublisher("/pub", audio, nil)
		_, err := publishTo(t, pub.client, newTrack(t, testTrack), wire.Params{})
		require.NoError(t, err)
		c, _ := n.dial("/sub", nil)
		_, err = subscribe(t, c, testTrack, wire.Params{})
		require.NoError(t, err, "the PUBLISHed track itself is served")
		_, err = subscribe(t, c, audio, wire.Params{})
		assert.Equal(t, wire.ReqDoesNotExist, requestCode(t, err), "no PUBLISH_NAMESPACE: no publisher for the namespace's other tracks")
		assert.Empty(t, pub.subscribes(), "no SUBSCRIBE routed to a publisher of another track")

		announceNS(t, pub.client, testTrack.Namespace)
		_, err = subscribe(t, c, audio, wire.Params{})
		require.NoError(t, err, "an explicit PUBLISH_NAMESPACE routes them")
		assert.Len(t, pub.subscribes(), 1)
	})
}

func TestC062_PublishNamespaceGetsExistingSubscriptions(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pc, _ := n.dial("/first", nil)
		tr := newTrack(t, testTrack)
		_, err := publishTo(t, pc, tr, wire.Params{})
		require.NoError(t, err)
		c, _ := n.dial("/sub", nil)
		sub, err := subscribe(t, c, testTrack, wire.Params{})
		require.NoError(t, err)

		late := n.newPublisher("/late", testTrack, nil)
		announceNS(t, late.client, wire.NewNamespace("live"))
		settled(t, "SUBSCRIBE to the new announcer", func() bool { return len(late.subscribes()) == 1 })
		other := n.newPublisher("/other", testTrack, nil)
		announceNS(t, other.client, wire.NewNamespace("vod"))
		settled(t, "late serves", func() bool { return len(late.servedSubs()) == 1 })
		writeGroup(t, late.track, 0, 2)
		objs, err := readSubgroup(t, sub)
		require.NoError(t, err)
		assert.Len(t, objs, 2, "the new announcer's objects reach the subscriber")
		assert.Empty(t, other.subscribes(), "an announcement that does not match gets none")
	})
}

func TestSubscribeTracksPrefixUpdate(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pc, _ := n.dial("/pub", nil)
		sport := wire.FullTrackName{Namespace: wire.NewNamespace("sport", "a"), Name: []byte("v")}
		_, err := publishTo(t, pc, newTrack(t, sport), wire.Params{})
		require.NoError(t, err)
		_, err = publishTo(t, pc, newTrack(t, testTrack), wire.Params{})
		require.NoError(t, err)
		sh := &tracksClient{}
		sc, _ := n.dial("/sub", sh)
		req, err := subscribeNS(t, sc, wire.NewNamespace("live"), true, wire.Params{})
		require.NoError(t, err)
		settled(t, "the track under the prefix", func() bool { return len(sh.published()) == 1 })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, req.Update(ctx, wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("sport"))}))
		settled(t, "the track under the new prefix, published before the update", func() bool { return len(sh.published()) == 2 })
		assert.Equal(t, []string{testTrack.String(), sport.String()}, sh.published())
		first := sh.subscription(0)
		require.NotNil(t, first)
		assert.NoError(t, first.Err(), "the PUBLISH made before the update goes on")
	})
}

func TestNamespaceRequestsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &countingMetrics{requests: map[string]int{}, drops: map[string]int{}}
		n := startNode(t, "moqt", Config{Metrics: m, MaxNamespaceMatches: 1}, nil)
		pc, _ := n.dial("/pub", nil)
		announceNS(t, pc, wire.NewNamespace("live", "a"))
		announceNS(t, pc, wire.NewNamespace("live", "b"))
		sc, _ := n.dial("/sub", &tracksClient{})
		_, err := subscribeNS(t, sc, wire.NewNamespace("live", "a"), false, wire.Params{})
		require.NoError(t, err)
		_, err = subscribeNS(t, sc, wire.NewNamespace("vod"), false, wire.Params{})
		require.NoError(t, err)
		_, err = subscribeNS(t, sc, wire.NewNamespace("live"), true, wire.Params{})
		require.NoError(t, err)
		sc2, _ := n.dial("/sub2", nil)
		_, err = subscribeNS(t, sc2, wire.NewNamespace("live"), false, wire.Params{})
		require.Error(t, err)
		settled(t, "counted", func() bool {
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.requests[KindPublishNamespace+"/"+OutcomeOK] == 2 &&
				m.requests[KindSubscribeNamespace+"/"+OutcomeOK] == 2 &&
				m.requests[KindSubscribeNamespace+"/"+OutcomeRefused] == 1 &&
				m.requests[KindSubscribeTracks+"/"+OutcomeOK] == 1
		})
	})
}
