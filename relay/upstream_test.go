package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// doneCode waits for sub to end and returns its PUBLISH_DONE code.
func doneCode(t *testing.T, sub *moqt.Subscription) wire.PublishDoneCode {
	t.Helper()
	select {
	case <-sub.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("subscription did not end")
	}
	var de *moqt.DoneError
	require.True(t, errors.As(sub.Err(), &de), "want PUBLISH_DONE, got %v", sub.Err())
	if de.Code != wire.DoneTrackEnded {
		t.Logf("PUBLISH_DONE %v", de)
	}
	return de.Code
}

func TestC077_MalformedTrackEndsDownstreamWithMalformedTrack(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n, pub, _, sub := liveSubscription(t, scheme)
		// Group 0 ends at object 1 (END_OF_GROUP status); an object past it
		// in another subgroup is a Malformed Track (§12.1).
		w := pub.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{})
		require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Object: 0}, Payload: []byte("a")}))
		require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Object: 1}, Status: wire.ObjectEndOfGroup}))
		require.NoError(t, w.Close())
		_, err := readSubgroup(t, sub)
		require.NoError(t, err)
		w2 := pub.track.OpenSubgroup(0, 1, moqt.SubgroupOptions{})
		require.NoError(t, w2.WriteObject(moqt.Object{Location: wire.Location{Object: 5}, SubgroupID: 1, Payload: []byte("past the end")}))
		_ = w2.Close()
		assert.Equal(t, wire.DoneMalformedTrack, doneCode(t, sub))
		settled(t, "the track left the relay", func() bool { return n.relay.trackCount() == 0 })
		assert.Zero(t, n.relay.endedCount(), "nothing of a Malformed Track is kept (§12.1)")
	})
}

func TestC038_UnknownMandatoryPropertyRefusedDownstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		pub := n.newPublisher("/pub", testTrack, wire.KVList{{Type: 0x4002, Value: 1}})
		hold := pub.setHold()
		n.announce(pub, wire.NewNamespace("live"))
		c1, _ := n.dial("/sub1", nil)
		c2, _ := n.dial("/sub2", nil)
		r1 := asyncSubscribe(t, c1, testTrack, wire.Params{})
		settled(t, "upstream SUBSCRIBE", func() bool { return len(pub.subscribes()) == 1 })
		r2 := asyncSubscribe(t, c2, testTrack, wire.Params{})
		settled(t, "both waiting", func() bool {
			e := n.relay.reg.lookup(testTrack)
			if e == nil {
				return false
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.waiters == 2
		})
		close(hold)
		for _, r := range []<-chan subResult{r1, r2} {
			res := <-r
			assert.Equal(t, wire.ReqUnsupportedExtension, requestCode(t, res.err), "every pending downstream subscriber")
		}
	})
}

func TestPublishDoneOfLastPublisherEndsTrackWithItsStatus(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		a, b, _, sub := n.twoPublishers(t)
		a.track.End(wire.DoneGoingAway, "a leaves")
		synctest.Wait()
		select {
		case <-sub.Done():
			t.Fatalf("ended with a publisher left: %v", sub.Err())
		default:
		}
		writeGroup(t, b.track, 0, 1)
		_, err := readSubgroup(t, sub)
		require.NoError(t, err, "b still feeds it")
		b.track.End(wire.DoneTrackEnded, "over")
		assert.Equal(t, wire.DoneTrackEnded, doneCode(t, sub))
		settled(t, "the track left the relay", func() bool { return n.relay.trackCount() == 0 })
	})
}

func TestAllPublishersRefuseSubscribe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		pub := n.newPublisher("/pub", testTrack, nil)
		pub.setRefuse(wire.ReqExcessiveLoad)
		n.announce(pub, wire.NewNamespace("live"))
		c, _ := n.dial("/sub", nil)
		_, err := subscribe(t, c, testTrack, wire.Params{})
		assert.Equal(t, wire.ReqExcessiveLoad, requestCode(t, err), "the upstream's code")
		settled(t, "the track left the relay", func() bool { return n.relay.trackCount() == 0 })
	})
}

// redirector refuses every request with REDIRECT to the same session
// (a client's Redirect names no Connect URI, §9.4.1).
type redirector struct{}

func (redirector) ServeMOQT(r moqt.Request) {
	_ = r.RejectWith(&moqt.RequestError{Code: wire.ReqRedirect, Reason: "ask for x",
		Redirect: &wire.Redirect{TrackNamespace: wire.NewNamespace("live"), TrackName: []byte("x")}})
}

// TestUpstreamRedirectNotPassedOn: a publisher's REDIRECT answers the
// relay, and its Redirect is for the relay (§9.4.1): the requester gets
// INTERNAL_ERROR with the publisher's reason, for SUBSCRIBE, FETCH and
// TRACK_STATUS alike. Before, SUBSCRIBE and TRACK_STATUS were answered
// only when the relay's handler returned ("request not answered"): a
// REDIRECT cannot go without its Redirect.
func TestUpstreamRedirectNotPassedOn(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		_, srv := n.dial("/pub", redirector{})
		n.relay.reg.addAnnouncer(srv, wire.NewNamespace("live"))
		c, _ := n.dial("/sub", nil)
		ctx := fetchCtx(t)
		check := func(what string, err error) {
			var re *moqt.RequestError
			require.ErrorAs(t, err, &re, what)
			assert.Equal(t, wire.ReqInternalError, re.Code, what)
			assert.Equal(t, "ask for x", re.Reason, what)
		}
		_, err := c.Subscribe(ctx, testTrack, wire.Params{})
		check("SUBSCRIBE", err)
		_, err = c.Fetch(ctx, testTrack, wire.Params{})
		check("FETCH", err)
		_, err = c.TrackStatus(ctx, testTrack, wire.Params{})
		check("TRACK_STATUS", err)
	})
}

// A SUBSCRIBE sent as soon as the publisher has its PUBLISH_OK finds the
// track, although the relay sends PUBLISH_OK before the track is in its
// registry: the SUBSCRIBE waits for the registration.
func TestSubscribeRightAfterPublishOK(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		proceed := make(chan struct{})
		n.relay.reg.publishAcceptedHook = func() { <-proceed }
		pc, _ := n.dial("/pub", nil)
		tr := newTrack(t, testTrack)
		_, err := publishTo(t, pc, tr, wire.Params{})
		require.NoError(t, err)
		c, _ := n.dial("/sub", nil)
		subscribed := make(chan error, 1)
		go func() {
			_, err := subscribe(t, c, testTrack, wire.Params{})
			subscribed <- err
		}()
		synctest.Wait() // the SUBSCRIBE is at the relay, the track not registered
		close(proceed)
		require.NoError(t, <-subscribed)
	})
}

// publishTo publishes tr to the relay over c with PUBLISH.
func publishTo(t *testing.T, c *moqt.Session, tr *moqt.LocalTrack, p wire.Params) (*moqt.ServedSubscription, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return tr.Publish(ctx, c, p, moqt.AcceptOptions{})
}

func TestC063_C064_PublishAcceptedAndForwardSetByUpdate(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		a := n.newPublisher("/a", testTrack, nil)
		n.announce(a, wire.NewNamespace("live"))
		c, _ := n.dial("/sub", nil)
		sub, err := subscribe(t, c, testTrack, wire.Params{})
		require.NoError(t, err)
		tr, err := moqt.NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		pc, _ := n.dial("/b", nil)
		ss, err := publishTo(t, pc, tr, wire.Params{Forward: wire.Some(false)})
		require.NoError(t, err, "PUBLISH_OK for a track with Established downstream subscriptions")
		settled(t, "REQUEST_UPDATE Forward=1", ss.Forward)
		a.track.End(wire.DoneGoingAway, "a leaves")
		writeGroup(t, tr, 0, 2)
		objs, err := readSubgroup(t, sub)
		require.NoError(t, err)
		assert.Len(t, objs, 2, "the PUBLISHed track feeds the subscriber")
	})
}

func TestPublishWithoutSubscribersPausedAndKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{Linger: -1}, nil)
		tr, err := moqt.NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		pc, _ := n.dial("/pub", nil)
		ss, err := publishTo(t, pc, tr, wire.Params{})
		require.NoError(t, err)
		settled(t, "Forward 0 with no subscriber", func() bool { return !ss.Forward() })
		c, _ := n.dial("/sub", nil)
		sub, err := subscribe(t, c, testTrack, wire.Params{})
		require.NoError(t, err)
		settled(t, "Forward 1", ss.Forward)
		writeGroup(t, tr, 0, 1)
		_, err = readSubgroup(t, sub)
		require.NoError(t, err)
		require.NoError(t, sub.Close())
		settled(t, "Forward 0 again", func() bool { return !ss.Forward() })
		assert.Error(t, n.relay.tablesEmpty(), "a PUBLISHed track stays available")
		require.NoError(t, pc.Close())
		settled(t, "gone with its publisher", func() bool { return n.relay.tablesEmpty() == nil })
	})
}

// updatesSeen records the REQUEST_UPDATEs a publisher receives.
type updatesSeen struct {
	mu  sync.Mutex
	all []wire.Params
}

// TestDynamicGroupsProperty: the relay passes NEW_GROUP_REQUEST on for a
// track whose DYNAMIC_GROUPS is 1 (§10.6), found inside
// IMMUTABLE_PROPERTIES too (§10.7).
func TestDynamicGroupsProperty(t *testing.T) {
	inner := func(v uint64) wire.KeyValue {
		b, err := wire.KVList{{Type: wire.PropDynamicGroups, Value: v}}.Append(nil)
		require.NoError(t, err)
		return wire.KeyValue{Type: wire.PropImmutableProperties, Bytes: b}
	}
	assert.False(t, dynamicGroups(nil))
	assert.False(t, dynamicGroups(wire.KVList{{Type: wire.PropDynamicGroups, Value: 0}}))
	assert.True(t, dynamicGroups(wire.KVList{{Type: wire.PropDynamicGroups, Value: 1}}))
	assert.True(t, dynamicGroups(wire.KVList{inner(1)}), "inside IMMUTABLE_PROPERTIES")
	assert.False(t, dynamicGroups(wire.KVList{inner(0), {Type: wire.PropDynamicGroups, Value: 1}}), "the immutable value wins")
}

func TestC073_C074_NewGroupRequestPassedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		dyn := wire.KVList{{Type: wire.PropDynamicGroups, Value: 1}}
		tr, err := moqt.NewLocalTrack(testTrack, dyn)
		require.NoError(t, err)
		var seen updatesSeen
		var subs []*moqt.SubscribeRequest
		var smu sync.Mutex
		h := moqt.HandlerFunc(func(r moqt.Request) {
			sr := r.(*moqt.SubscribeRequest)
			smu.Lock()
			subs = append(subs, sr)
			smu.Unlock()
			_, _ = tr.Accept(sr, moqt.AcceptOptions{OnUpdate: func(_ *moqt.ServedSubscription, p *wire.Params) error {
				seen.mu.Lock()
				seen.all = append(seen.all, *p)
				seen.mu.Unlock()
				return nil
			}})
		})
		_, ps := n.dial("/pub", h)
		n.relay.reg.addAnnouncer(ps, wire.NewNamespace("live"))
		c, _ := n.dial("/sub", nil)
		s1, err := subscribe(t, c, testTrack, wire.Params{NewGroupRequest: wire.Some[uint64](0)})
		require.NoError(t, err)
		smu.Lock()
		require.Len(t, subs, 1)
		assert.Equal(t, wire.Some[uint64](0), subs[0].Params.NewGroupRequest, "included when subscribing upstream")
		smu.Unlock()

		writeGroup(t, tr, 4, 1)
		_, err = readSubgroup(t, s1)
		require.NoError(t, err)
		ngrs := func() []uint64 {
			seen.mu.Lock()
			defer seen.mu.Unlock()
			var out []uint64
			for _, p := range seen.all {
				if p.NewGroupRequest.Set {
					out = append(out, p.NewGroupRequest.Value)
				}
			}
			return out
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// A value not past the Largest Group (4) is not passed on.
		require.NoError(t, s1.Update(ctx, wire.Params{NewGroupRequest: wire.Some[uint64](3)}))
		synctest.Wait()
		assert.Empty(t, ngrs())
		// One past it is.
		require.NoError(t, s1.Update(ctx, wire.Params{NewGroupRequest: wire.Some[uint64](5)}))
		settled(t, "REQUEST_UPDATE with NEW_GROUP_REQUEST", func() bool { return len(ngrs()) == 1 })
		assert.Equal(t, []uint64{5}, ngrs())
		// While it is outstanding, no smaller or equal one follows.
		require.NoError(t, s1.Update(ctx, wire.Params{NewGroupRequest: wire.Some[uint64](5)}))
		synctest.Wait()
		assert.Len(t, ngrs(), 1)
		// The Largest Group grows: no longer outstanding.
		writeGroup(t, tr, 5, 1)
		_, err = readSubgroup(t, s1)
		require.NoError(t, err)
		require.NoError(t, s1.Update(ctx, wire.Params{NewGroupRequest: wire.Some[uint64](6)}))
		settled(t, "a second one", func() bool { return len(ngrs()) == 2 })
		// While it is outstanding, a 0 (no Group information) does not follow
		// either: 6 is greater (a subscriber sending 0s could flood it).
		require.NoError(t, s1.Update(ctx, wire.Params{NewGroupRequest: wire.Some[uint64](0)}))
		synctest.Wait()
		assert.Len(t, ngrs(), 2, "0 is covered by the outstanding 6")
	})
}

// TestC073_NewGroupRequestOfLaterWaiter: a NEW_GROUP_REQUEST of a
// SUBSCRIBE that came while the upstream SUBSCRIBE was in flight, which
// therefore did not carry it, goes upstream once that one is Established
// (§9.20.20); one the upstream SUBSCRIBE carried is not sent again.
func TestC073_NewGroupRequestOfLaterWaiter(t *testing.T) {
	for _, tc := range []struct {
		name          string
		first, second wire.Opt[uint64]
		sent          wire.Opt[uint64] // with the upstream SUBSCRIBE
		updates       int              // REQUEST_UPDATEs with NEW_GROUP_REQUEST
	}{
		{"second asks", wire.Opt[uint64]{}, wire.Some[uint64](0), wire.Opt[uint64]{}, 1},
		{"first asks", wire.Some[uint64](0), wire.Opt[uint64]{}, wire.Some[uint64](0), 0},
		{"both ask", wire.Some[uint64](0), wire.Some[uint64](0), wire.Some[uint64](0), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := startNode(t, "moqt", Config{}, nil)
				tr, err := moqt.NewLocalTrack(testTrack, wire.KVList{{Type: wire.PropDynamicGroups, Value: 1}})
				require.NoError(t, err)
				var mu sync.Mutex
				var subs []*moqt.SubscribeRequest
				updates := 0
				hold := make(chan struct{})
				h := moqt.HandlerFunc(func(r moqt.Request) {
					sr := r.(*moqt.SubscribeRequest)
					mu.Lock()
					subs = append(subs, sr)
					mu.Unlock()
					<-hold
					_, _ = tr.Accept(sr, moqt.AcceptOptions{OnUpdate: func(_ *moqt.ServedSubscription, p *wire.Params) error {
						if p.NewGroupRequest.Set {
							mu.Lock()
							updates++
							mu.Unlock()
						}
						return nil
					}})
				})
				_, ps := n.dial("/pub", h)
				n.relay.reg.addAnnouncer(ps, wire.NewNamespace("live"))
				writeGroup(t, tr, 3, 1) // Largest Group 3 at the publisher
				c1, _ := n.dial("/sub1", nil)
				c2, _ := n.dial("/sub2", nil)
				r1 := asyncSubscribe(t, c1, testTrack, wire.Params{NewGroupRequest: tc.first})
				settled(t, "upstream SUBSCRIBE in flight", func() bool { mu.Lock(); defer mu.Unlock(); return len(subs) == 1 })
				r2 := asyncSubscribe(t, c2, testTrack, wire.Params{NewGroupRequest: tc.second})
				synctest.Wait()
				close(hold)
				require.NoError(t, (<-r1).err)
				require.NoError(t, (<-r2).err)
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				require.Len(t, subs, 1)
				assert.Equal(t, tc.sent, subs[0].Params.NewGroupRequest, "with the upstream SUBSCRIBE")
				assert.Equal(t, tc.updates, updates, "REQUEST_UPDATEs with NEW_GROUP_REQUEST")
			})
		})
	}
}

// TestTrackEndedNotHeldByAnotherAnnouncer: the only Established publisher
// ends the track (TRACK_ENDED) while another announcer's SUBSCRIBE is in
// flight: the subscribers get TRACK_ENDED at once, the SUBSCRIBE is
// cancelled, and the track leaves the relay. An ended track has nothing
// more for another publisher to carry on. Before, the end waited for that
// SUBSCRIBE's answer: through moqt relay with three announcers that never
// answered, 38.5 s (UpstreamTimeout and the subscriber's RENDEZVOUS_TIMEOUT).
func TestTrackEndedNotHeldByAnotherAnnouncer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		a := n.newPublisher("/a", testTrack, nil)
		n.announce(a, wire.NewNamespace("live"))
		c, _ := n.dial("/sub", nil)
		sub, err := subscribe(t, c, testTrack, wire.Params{})
		require.NoError(t, err)
		b := n.newPublisher("/b", testTrack, nil)
		defer close(b.setHold()) // never answered
		n.announce(b, wire.NewNamespace("live"))
		settled(t, "SUBSCRIBE to b", func() bool { return len(b.subscribes()) == 1 })
		a.track.End(wire.DoneTrackEnded, "over")
		synctest.Wait()
		select {
		case <-sub.Done():
		default:
			t.Fatal("the end is held by b's SUBSCRIBE")
		}
		assert.Equal(t, wire.DoneTrackEnded, doneCode(t, sub))
		assert.Error(t, b.subscribes()[0].Context().Err(), "b's SUBSCRIBE was cancelled")
		settled(t, "the track left the relay", func() bool { return n.relay.trackCount() == 0 })
	})
}

// TestC046_SubscribeOKWaitsForEstablishedUpstream: a SUBSCRIBE that comes
// when the track's only Established publisher has left, another's
// SUBSCRIBE still in flight, is answered once that one is Established
// (§7.4: no SUBSCRIBE_OK without an Established upstream); when it fails
// instead, the SUBSCRIBE is routed again and finds no publisher.
func TestC046_SubscribeOKWaitsForEstablishedUpstream(t *testing.T) {
	for _, refused := range []bool{false, true} {
		t.Run(fmt.Sprintf("refused=%v", refused), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := startNode(t, "moqt", Config{}, nil)
				a := n.newPublisher("/a", testTrack, nil)
				n.announce(a, wire.NewNamespace("live"))
				c, _ := n.dial("/sub", nil)
				_, err := subscribe(t, c, testTrack, wire.Params{})
				require.NoError(t, err)
				b := n.newPublisher("/b", testTrack, nil)
				hold := b.setHold()
				if refused {
					b.setRefuse(wire.ReqUninterested)
				}
				n.announce(b, wire.NewNamespace("live"))
				settled(t, "SUBSCRIBE to b in flight", func() bool { return len(b.subscribes()) == 1 })
				// a leaves without ending the track: b may yet carry it.
				require.NoError(t, a.client.Close())
				synctest.Wait()
				c2, _ := n.dial("/sub2", nil)
				second := asyncSubscribe(t, c2, testTrack, wire.Params{})
				synctest.Wait()
				select {
				case r := <-second:
					t.Fatalf("answered with no Established upstream: %v", r.err)
				default:
				}
				close(hold)
				r := <-second
				if refused {
					assert.Error(t, r.err)
					return
				}
				require.NoError(t, r.err)
			})
		})
	}
}

// TestPublishedDownstreamForwardFollowed: a subscription the relay offers
// with PUBLISH (as for SUBSCRIBE_TRACKS) counts for the upstream Forward
// state, its REQUEST_UPDATEs included. The update applies before its
// REQUEST_OK is answered (AcceptOptions.OnUpdate), not at some later look.
func TestPublishedDownstreamForwardFollowed(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pub := n.newPublisher("/pub", testTrack, nil)
		n.announce(pub, wire.NewNamespace("live"))
		c1, _ := n.dial("/sub1", nil)
		_, err := subscribe(t, c1, testTrack, wire.Params{Forward: wire.Some(false)})
		require.NoError(t, err)
		settled(t, "served", func() bool { return len(pub.servedSubs()) == 1 })
		got := make(chan *moqt.Subscription, 1)
		_, s2 := n.dial("/sub2", moqt.HandlerFunc(func(r moqt.Request) {
			if pr, ok := r.(*moqt.PublishRequest); ok {
				sub, err := pr.Accept(wire.Params{})
				if err == nil {
					got <- sub
				}
				return
			}
			moqt.DefaultHandler.ServeMOQT(r)
		}))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = n.relay.reg.publishDownstream(ctx, s2, testTrack, wire.Params{Forward: wire.Some(false)})
		require.NoError(t, err)
		offered := <-got
		assert.False(t, n.relay.wantsForward(testTrack), "no one wants objects yet")
		require.NoError(t, offered.Update(ctx, wire.Params{Forward: wire.Some(true)}))
		assert.True(t, n.relay.wantsForward(testTrack), "applied by the time the update is answered")
		settled(t, "upstream Forward 1", func() bool { return upstreamForward(pub) })
		writeGroup(t, pub.track, 0, 1)
		objs, err := readSubgroup(t, offered)
		require.NoError(t, err)
		assert.Len(t, objs, 1)
	})
}

// wantsForward is the Forward state the relay wants of name's upstream.
func (rl *Relay) wantsForward(name wire.FullTrackName) bool {
	e := rl.reg.lookup(name)
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.wantForwardLocked()
}

// TestNewGroupRequestFloodBounded: a subscriber sending NEW_GROUP_REQUESTs
// faster than the publisher answers them costs the relay one goroutine per
// publisher, not one per request.
func TestNewGroupRequestFloodBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		tr, err := moqt.NewLocalTrack(testTrack, wire.KVList{{Type: wire.PropDynamicGroups, Value: 1}})
		require.NoError(t, err)
		release := make(chan struct{})
		defer close(release)
		var updates atomic.Int32
		h := moqt.HandlerFunc(func(r moqt.Request) {
			_, _ = tr.Accept(r.(*moqt.SubscribeRequest), moqt.AcceptOptions{OnUpdate: func(*moqt.ServedSubscription, *wire.Params) error {
				updates.Add(1)
				<-release // the publisher sits on its answers
				return nil
			}})
		})
		_, ps := n.dial("/pub", h)
		n.relay.reg.addAnnouncer(ps, wire.NewNamespace("live"))
		c, _ := n.dial("/sub", nil)
		s1, err := subscribe(t, c, testTrack, wire.Params{})
		require.NoError(t, err)
		writeGroup(t, tr, 4, 1)
		_, err = readSubgroup(t, s1)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for v := uint64(5); v < 45; v++ {
			require.NoError(t, s1.Update(ctx, wire.Params{NewGroupRequest: wire.Some(v)}))
		}
		settled(t, "the first reached the publisher", func() bool { return updates.Load() >= 1 })
		synctest.Wait()
		running := n.relay.gs.Running()
		assert.Less(t, running, 8, "goroutines of the relay")
	})
}

// TestUpstreamSubscribeUsesDefaultPriority: the relay's SUBSCRIBE upstream
// carries neither the downstream's SUBSCRIBER_PRIORITY nor its GROUP_ORDER
// (§5.1.3: relays SHOULD NOT use them directly for upstream
// subscriptions), whatever the first downstream asked.
func TestUpstreamSubscribeUsesDefaultPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		tr, err := moqt.NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		got := make(chan wire.Params, 1)
		h := moqt.HandlerFunc(func(r moqt.Request) {
			sr := r.(*moqt.SubscribeRequest)
			got <- sr.Params
			_, _ = tr.Accept(sr, moqt.AcceptOptions{})
		})
		_, ps := n.dial("/pub", h)
		n.relay.reg.addAnnouncer(ps, wire.NewNamespace("live"))
		c, _ := n.dial("/sub", nil)
		r := asyncSubscribe(t, c, testTrack, wire.Params{SubscriberPriority: wire.Some[uint8](7),
			GroupOrder: wire.Some(wire.GroupOrderDescending)})
		require.NoError(t, (<-r).err)
		p := <-got
		assert.False(t, p.SubscriberPriority.Set, "no SUBSCRIBER_PRIORITY upstream: %v", p.SubscriberPriority)
		assert.False(t, p.GroupOrder.Set, "no GROUP_ORDER upstream: %v", p.GroupOrder)
	})
}

// TestPublishDoneOfPublisherAheadKeepsItsReason: a publisher ahead of the
// others that ends the track with PUBLISH_DONE ends it downstream with its
// own status and reason; "restarted by another" is for a publisher that
// vanished. Its reason was replaced before, misleading the subscribers.
func TestPublishDoneOfPublisherAheadKeepsItsReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		a, b, _, sub := n.twoPublishers(t)
		writeGroup(t, a.track, 0, 1)
		writeGroup(t, b.track, 5, 1) // b is ahead: a never reached group 5
		synctest.Wait()
		b.track.End(wire.DoneTrackEnded, "over")
		assert.Equal(t, wire.DoneTrackEnded, doneCode(t, sub))
		var de *moqt.DoneError
		require.ErrorAs(t, sub.Err(), &de)
		assert.Equal(t, "over", de.Reason)
	})
}
