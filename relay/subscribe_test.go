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

// asyncSubscribe subscribes in the background; the result arrives on the
// channel.
func asyncSubscribe(t *testing.T, c *moqt.Session, name wire.FullTrackName, p wire.Params) <-chan subResult {
	ch := make(chan subResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		sub, err := c.Subscribe(ctx, name, p)
		ch <- subResult{sub, err}
	}()
	return ch
}

type subResult struct {
	sub *moqt.Subscription
	err error
}

func TestC046_SubscribeOKOnlyOnceUpstreamEstablished(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pub := n.newPublisher("/pub", testTrack, nil)
		hold := pub.setHold()
		n.announce(pub, wire.NewNamespace("live"))
		c, _ := n.dial("/sub", nil)
		res := asyncSubscribe(t, c, testTrack, wire.Params{})
		settled(t, "upstream SUBSCRIBE", func() bool { return len(pub.subscribes()) == 1 })
		synctest.Wait()
		select {
		case r := <-res:
			t.Fatalf("downstream answered before the upstream was Established: %v", r.err)
		default:
		}
		close(hold)
		r := <-res
		require.NoError(t, r.err)
	})
}

func TestC056_SubscribeOKAtOnceWithEstablishedUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		pub := n.newPublisher("/pub", testTrack, nil)
		n.announce(pub, wire.NewNamespace("live"))
		c1, _ := n.dial("/sub1", nil)
		_, err := subscribe(t, c1, testTrack, wire.Params{})
		require.NoError(t, err)
		defer close(pub.setHold()) // a new upstream SUBSCRIBE would hang
		c2, _ := n.dial("/sub2", nil)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = c2.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err, "SUBSCRIBE_OK from the Established upstream")
		assert.Len(t, pub.subscribes(), 1)
	})
}

// upstreamForward is the Forward state the publisher serves the relay with.
func upstreamForward(p *publisher) bool {
	ss := p.servedSubs()
	return len(ss) == 1 && ss[0].Forward()
}

func TestC043_C057_ForwardOneUpstreamWhileAnyDownstreamHasIt(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pub := n.newPublisher("/pub", testTrack, nil)
		n.announce(pub, wire.NewNamespace("live"))
		c1, _ := n.dial("/sub1", nil)
		s1, err := subscribe(t, c1, testTrack, wire.Params{Forward: wire.Some(false)})
		require.NoError(t, err)
		subs := pub.subscribes()
		require.Len(t, subs, 1)
		assert.Equal(t, wire.Some(false), subs[0].Params.Forward, "no downstream wants objects")
		settled(t, "served", func() bool { return len(pub.servedSubs()) == 1 })
		assert.False(t, upstreamForward(pub))

		// A second subscriber with Forward 1: REQUEST_UPDATE Forward=1.
		c2, _ := n.dial("/sub2", nil)
		s2, err := subscribe(t, c2, testTrack, wire.Params{})
		require.NoError(t, err)
		settled(t, "upstream Forward 1", func() bool { return upstreamForward(pub) })
		writeGroup(t, pub.track, 0, 2)
		objs, err := readSubgroup(t, s2)
		require.NoError(t, err)
		assert.Len(t, objs, 2)

		// It leaves: none wants objects, Forward 0 again.
		require.NoError(t, s2.Close())
		settled(t, "upstream Forward 0", func() bool { return !upstreamForward(pub) })

		// The first asks for objects by REQUEST_UPDATE.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s1.Update(ctx, wire.Params{Forward: wire.Some(true)}))
		settled(t, "upstream Forward 1 after the update", func() bool { return upstreamForward(pub) })
	})
}

func TestC059_ForwardOneWhenSubscribingUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		pub := n.newPublisher("/pub", testTrack, nil)
		n.announce(pub, wire.NewNamespace("live"))
		c, _ := n.dial("/sub", nil)
		_, err := subscribe(t, c, testTrack, wire.Params{Forward: wire.Some(true)})
		require.NoError(t, err)
		subs := pub.subscribes()
		require.Len(t, subs, 1)
		assert.True(t, forwardOf(subs[0].Params), "upstream SUBSCRIBE with Forward 1")
	})
}

func TestC053_C058_SubscribeToEveryMatchingPublisher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		match1 := n.newPublisher("/m1", testTrack, nil)
		match2 := n.newPublisher("/m2", testTrack, nil)
		other1 := n.newPublisher("/o1", testTrack, nil)
		other2 := n.newPublisher("/o2", testTrack, nil)
		n.announce(match1, wire.NewNamespace("live"))
		n.announce(match2, wire.NewNamespace("live", "cam"))
		n.announce(other1, wire.NewNamespace("livecam"))
		n.announce(other2, wire.NewNamespace("live", "cam", "hd"))
		c, _ := n.dial("/sub", nil)
		_, err := subscribe(t, c, testTrack, wire.Params{})
		require.NoError(t, err)
		settled(t, "SUBSCRIBE to both matching publishers", func() bool {
			return len(match1.subscribes()) == 1 && len(match2.subscribes()) == 1
		})
		assert.Empty(t, other1.subscribes(), "(livecam) is no prefix of (live, cam)")
		assert.Empty(t, other2.subscribes(), "(live, cam, hd) is no prefix of (live, cam)")
	})
}

func TestC062_NewAnnouncementSubscribedForMatchingTracks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		first := n.newPublisher("/p1", testTrack, nil)
		n.announce(first, wire.NewNamespace("live"))
		c, _ := n.dial("/sub", nil)
		_, err := subscribe(t, c, testTrack, wire.Params{})
		require.NoError(t, err)
		late := n.newPublisher("/p2", testTrack, nil)
		n.announce(late, wire.NewNamespace("live", "cam"))
		settled(t, "SUBSCRIBE to the new announcer", func() bool { return len(late.subscribes()) == 1 })
		unrelated := n.newPublisher("/p3", testTrack, nil)
		n.announce(unrelated, wire.NewNamespace("vod"))
		synctest.Wait()
		assert.Empty(t, unrelated.subscribes())
	})
}

// TestC053_AnnouncerOfIdleTrackSubscribed: an announcer that came while
// the relay had the track but no subscriber to it, a track PUBLISHed by
// another publisher or one lingering, is sent SUBSCRIBE when a subscriber
// comes, every matching publisher being asked (§7.5).
func TestC053_AnnouncerOfIdleTrackSubscribed(t *testing.T) {
	publishTrack := func(t *testing.T, n *node) {
		tr := newTrack(t, testTrack)
		pc, _ := n.dial("/p1", nil)
		_, err := publishTo(t, pc, tr, wire.Params{})
		require.NoError(t, err)
	}
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, n *node) // makes the relay have the track, idle
		after  func(t *testing.T, n *node) // the same, after the announcement
	}{
		{"announced before a PUBLISH", nil, publishTrack},
		{"announced after a PUBLISH", publishTrack, nil},
		{"announced while lingering", func(t *testing.T, n *node) {
			a := n.newPublisher("/a", testTrack, nil)
			n.announce(a, wire.NewNamespace("live"))
			c, _ := n.dial("/first", nil)
			sub, err := subscribe(t, c, testTrack, wire.Params{})
			require.NoError(t, err)
			require.NoError(t, sub.Close())
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := startNode(t, "moqt", Config{}, nil)
				if tc.before != nil {
					tc.before(t, n)
					synctest.Wait()
				}
				p2 := n.newPublisher("/p2", testTrack, nil)
				announceNS(t, p2.client, wire.NewNamespace("live"))
				if tc.after != nil {
					tc.after(t, n)
				}
				synctest.Wait()
				require.Equal(t, 1, n.relay.trackCount(), "the relay has the track")
				assert.Empty(t, p2.subscribes(), "nobody subscribes yet")
				c, _ := n.dial("/sub", nil)
				_, err := subscribe(t, c, testTrack, wire.Params{})
				require.NoError(t, err)
				settled(t, "the announcer is asked", func() bool { return len(p2.subscribes()) == 1 })
			})
		})
	}
}

// TestColdJoinGetsTheFirstObjects: a SUBSCRIBE that waited for the
// relay's upstream joins the track before the upstream's objects are
// forwarded, so objects the publisher sends at once are not published to
// a track the subscriber has not joined yet, which would leave them out
// (its SUBSCRIBE_OK then reporting a Largest Object past them). Under CPU
// load the browser interop test lost a cold joiner's whole group so.
func TestColdJoinGetsTheFirstObjects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		pub := n.newPublisher("/pub", testTrack, nil)
		n.announce(pub, wire.NewNamespace("live"))
		answering := make(chan struct{})
		proceed := make(chan struct{})
		release := sync.OnceFunc(func() { close(proceed) })
		defer release()
		n.relay.reg.joinHook = func() {
			close(answering)
			<-proceed
		}
		c, _ := n.dial("/sub", nil)
		subscribed := asyncSubscribe(t, c, testTrack, wire.Params{})
		<-answering // the upstream is Established; the waiter not answered yet
		writeGroup(t, pub.track, 0, 4)
		synctest.Wait()
		release()
		res := <-subscribed
		require.NoError(t, res.err)
		objs, err := readSubgroup(t, res.sub)
		require.NoError(t, err, "the group, whole, with its FIN")
		assert.Len(t, objs, 4)
	})
}

func TestRendezvous(t *testing.T) {
	t.Run("absent", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := startNode(t, "moqt", Config{}, nil)
			c, _ := n.dial("/sub", nil)
			start := time.Now()
			_, err := subscribe(t, c, testTrack, wire.Params{})
			assert.Equal(t, wire.ReqDoesNotExist, requestCode(t, err))
			assert.Less(t, time.Since(start), 2*time.Second)
			settled(t, "tables empty", func() bool { return n.relay.tablesEmpty() == nil })
		})
	})
	t.Run("timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := startNode(t, "moqt", Config{}, nil)
			c, _ := n.dial("/sub", nil)
			_, err := subscribe(t, c, testTrack, wire.Params{RendezvousTimeout: wire.Some[uint64](200)})
			assert.Equal(t, wire.ReqTimeout, requestCode(t, err))
			settled(t, "tables empty", func() bool { return n.relay.tablesEmpty() == nil })
		})
	})
	t.Run("capped", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := startNode(t, "moqt", Config{MaxRendezvousTimeout: 200 * time.Millisecond}, nil)
			c, _ := n.dial("/sub", nil)
			start := time.Now()
			_, err := subscribe(t, c, testTrack, wire.Params{RendezvousTimeout: wire.Some[uint64](60_000)})
			assert.Equal(t, wire.ReqTimeout, requestCode(t, err))
			assert.Less(t, time.Since(start), 5*time.Second)
		})
	})
	t.Run("bounded", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := startNode(t, "moqt", Config{MaxHeldSubscribes: 1}, nil)
			c, _ := n.dial("/sub", nil)
			held := asyncSubscribe(t, c, testTrack, wire.Params{RendezvousTimeout: wire.Some[uint64](10_000)})
			settled(t, "one held", func() bool { n.relay.reg.mu.Lock(); defer n.relay.reg.mu.Unlock(); return n.relay.reg.held == 1 })
			other := testTrack
			other.Name = []byte("audio")
			_, err := subscribe(t, c, other, wire.Params{RendezvousTimeout: wire.Some[uint64](10_000)})
			assert.Equal(t, wire.ReqExcessiveLoad, requestCode(t, err))
			require.NoError(t, c.Close()) // the held one goes with its session
			<-held
			settled(t, "tables empty", func() bool { return n.relay.tablesEmpty() == nil })
		})
	})
	t.Run("per session", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := startNode(t, "moqt", Config{MaxHeldSubscribes: 3, MaxSessionHeldSubscribes: 2}, nil)
			hold := wire.Params{RendezvousTimeout: wire.Some[uint64](10_000)}
			name := func(i int) wire.FullTrackName {
				tn := testTrack
				tn.Name = []byte{'t', byte('0' + i)}
				return tn
			}
			a, _ := n.dial("/a", nil)
			for i := 0; i < 2; i++ {
				_ = asyncSubscribe(t, a, name(i), hold)
			}
			settled(t, "two held", func() bool { n.relay.reg.mu.Lock(); defer n.relay.reg.mu.Unlock(); return n.relay.reg.held == 2 })
			_, err := subscribe(t, a, name(2), hold)
			assert.Equal(t, wire.ReqExcessiveLoad, requestCode(t, err), "past the session's share")
			b, _ := n.dial("/b", nil)
			_ = asyncSubscribe(t, b, name(3), hold)
			settled(t, "another session's held", func() bool { n.relay.reg.mu.Lock(); defer n.relay.reg.mu.Unlock(); return n.relay.reg.held == 3 })
			require.NoError(t, a.Close())
			require.NoError(t, b.Close())
			settled(t, "tables empty", func() bool { return n.relay.tablesEmpty() == nil })
		})
	})
}

func TestC061_HeldSubscribeProceedsWhenPublisherAppears(t *testing.T) {
	t.Run("announcement", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := startNode(t, "moqt", Config{}, nil)
			c, _ := n.dial("/sub", nil)
			res := asyncSubscribe(t, c, testTrack, wire.Params{RendezvousTimeout: wire.Some[uint64](10_000)})
			settled(t, "held", func() bool { n.relay.reg.mu.Lock(); defer n.relay.reg.mu.Unlock(); return n.relay.reg.held == 1 })
			pub := n.newPublisher("/pub", testTrack, nil)
			n.announce(pub, wire.NewNamespace("live"))
			r := <-res
			require.NoError(t, r.err)
			writeGroup(t, pub.track, 0, 1)
			objs, err := readSubgroup(t, r.sub)
			require.NoError(t, err)
			assert.Len(t, objs, 1)
		})
	})
	t.Run("publish", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := startNode(t, "moqt", Config{}, nil)
			var mu sync.Mutex
			var offered []*moqt.Session
			called := make(chan struct{})
			n.relay.reg.trackPublishedHook = func(name wire.FullTrackName, exclude func(*moqt.Session) bool) {
				defer close(called)
				mu.Lock()
				defer mu.Unlock()
				n.mu.Lock()
				defer n.mu.Unlock()
				for _, s := range n.sessions {
					if !exclude(s) {
						offered = append(offered, s)
					}
				}
			}
			c, _ := n.dial("/sub", nil)
			res := asyncSubscribe(t, c, testTrack, wire.Params{RendezvousTimeout: wire.Some[uint64](10_000)})
			settled(t, "held", func() bool { n.relay.reg.mu.Lock(); defer n.relay.reg.mu.Unlock(); return n.relay.reg.held == 1 })
			tr, err := moqt.NewLocalTrack(testTrack, nil)
			require.NoError(t, err)
			pc, ps := n.dial("/pub", nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = tr.Publish(ctx, pc, wire.Params{}, moqt.AcceptOptions{})
			require.NoError(t, err, "PUBLISH_OK")
			r := <-res
			require.NoError(t, r.err)
			writeGroup(t, tr, 0, 1)
			objs, err := readSubgroup(t, r.sub)
			require.NoError(t, err)
			assert.Len(t, objs, 1)
			<-called
			mu.Lock()
			defer mu.Unlock()
			assert.NotContains(t, offered, n.session("/sub"), "the held subscriber is not offered the PUBLISH")
			assert.NotContains(t, offered, ps, "nor is the publisher")
		})
	})
}
