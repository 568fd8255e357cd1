package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

func TestLastSubscriberLeavingCancelsUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{Linger: 300 * time.Millisecond}, nil)
		pub := n.newPublisher("/pub", testTrack, nil)
		undo := n.announce(pub, wire.NewNamespace("live"))
		c1, _ := n.dial("/sub1", nil)
		s1, err := subscribe(t, c1, testTrack, wire.Params{})
		require.NoError(t, err)
		require.NoError(t, s1.Close())
		// Back within the linger: the upstream subscription is reused.
		s1, err = subscribe(t, c1, testTrack, wire.Params{})
		require.NoError(t, err)
		assert.Len(t, pub.subscribes(), 1)
		served := pub.servedSubs()
		require.Len(t, served, 1)
		c2, _ := n.dial("/sub2", nil)
		_, err = subscribe(t, c2, testTrack, wire.Params{})
		require.NoError(t, err)
		require.NoError(t, s1.Close())
		time.Sleep(500 * time.Millisecond) // past the Linger, on the bubble's clock
		synctest.Wait()
		assert.NoError(t, served[0].Context().Err(), "a subscriber is left")
		require.NoError(t, c2.Close()) // killed session: its subscription goes too
		select {
		case <-served[0].Context().Done():
		case <-time.After(10 * time.Second):
			t.Fatal("upstream subscription not cancelled")
		}
		undo()
		settled(t, "tables empty", func() bool { return n.relay.tablesEmpty() == nil })
	})
}

func TestSessionEndTakesItsAnnouncements(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		pub := n.newPublisher("/pub", testTrack, nil)
		n.announce(pub, wire.NewNamespace("live"))
		require.Error(t, n.relay.tablesEmpty())
		require.NoError(t, pub.client.Close())
		settled(t, "tables empty", func() bool { return n.relay.tablesEmpty() == nil })
		c, _ := n.dial("/sub", nil)
		_, err := subscribe(t, c, testTrack, wire.Params{})
		assert.Equal(t, wire.ReqDoesNotExist, requestCode(t, err))
	})
}

// TestChurn has publishers and subscribers join, leave, cancel and die
// while objects flow, then checks that the relay holds nothing.
func TestChurn(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{Linger: 20 * time.Millisecond}, nil)
		const tracks, subscribers = 4, 24
		names := make([]wire.FullTrackName, tracks)
		pubs := make([]*publisher, tracks)
		var undo []func()
		for i := range tracks {
			names[i] = wire.FullTrackName{Namespace: wire.NewNamespace("churn", fmt.Sprint(i)), Name: []byte("t")}
			pubs[i] = n.newPublisher(fmt.Sprintf("/pub%d", i), names[i], nil)
			undo = append(undo, n.announce(pubs[i], names[i].Namespace))
		}
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i, p := range pubs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for g := uint64(0); ctx.Err() == nil; g++ {
					w := p.track.OpenSubgroup(g, 0, moqt.SubgroupOptions{})
					for o := range uint64(3) {
						_ = w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: o}, Payload: payload(g, o)})
					}
					_ = w.Close()
					if i == 0 && g%7 == 3 {
						p.track.WriteDatagram(moqt.Object{Location: wire.Location{Group: g, Object: 9}, Payload: []byte("d")})
					}
					time.Sleep(2 * time.Millisecond)
				}
			}()
		}
		var swg sync.WaitGroup
		for i := range subscribers {
			c, _ := n.dial(fmt.Sprintf("/s%d", i), nil)
			swg.Add(1)
			go func() {
				defer swg.Done()
				rng := rand.New(rand.NewPCG(uint64(i), 7))
				defer c.Close()
				for round := range 4 {
					name := names[rng.IntN(tracks)]
					p := wire.Params{}
					if rng.IntN(4) == 0 {
						name = wire.FullTrackName{Namespace: wire.NewNamespace("nobody"), Name: []byte(fmt.Sprint(round))}
						p.RendezvousTimeout = wire.Some[uint64](uint64(rng.IntN(100)))
					}
					sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					sub, err := c.Subscribe(sctx, name, p)
					cancel()
					if err != nil {
						continue
					}
					switch rng.IntN(3) {
					case 0: // reads a little, then cancels
						rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
						_, _ = sub.ReadObject(rctx)
						cancel()
						_ = sub.Close()
					case 1: // its connection dies
						_ = c.CloseWithError(wire.SessionErrorCode(0), "bye")
						return
					default: // keeps it a while, reading nothing
						time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
						_ = sub.Close()
					}
				}
			}()
		}
		swg.Wait()
		// A publisher dies with subscribers on it.
		c, _ := n.dial("/late", nil)
		sub, err := subscribe(t, c, names[1], wire.Params{})
		require.NoError(t, err)
		stop()
		wg.Wait()
		require.NoError(t, pubs[1].client.Close())
		<-sub.Done()
		for _, u := range undo {
			u()
		}
		require.NoError(t, c.Close())
		settled(t, "tables empty", func() bool { return n.relay.tablesEmpty() == nil })
		for _, p := range pubs {
			settled(t, "upstream subscriptions cancelled", func() bool {
				for _, ss := range p.servedSubs() {
					if ss.Context().Err() == nil {
						return false
					}
				}
				return true
			})
		}
	})
}

func TestRelayCloseEndsEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		pub := n.newPublisher("/pub", testTrack, nil)
		n.announce(pub, wire.NewNamespace("live"))
		c, _ := n.dial("/sub", nil)
		sub, err := subscribe(t, c, testTrack, wire.Params{})
		require.NoError(t, err)
		other := wire.FullTrackName{Namespace: wire.NewNamespace("vod"), Name: []byte("x")}
		held := asyncSubscribe(t, c, other, wire.Params{RendezvousTimeout: wire.Some[uint64](10_000)})
		settled(t, "held", func() bool { n.relay.reg.mu.Lock(); defer n.relay.reg.mu.Unlock(); return n.relay.reg.held == 1 })
		require.NoError(t, n.relay.Close())
		assert.Equal(t, wire.DoneGoingAway, doneCode(t, sub))
		r := <-held
		assert.Equal(t, wire.ReqGoingAway, requestCode(t, r.err))
		_, err = subscribe(t, c, testTrack, wire.Params{})
		assert.Equal(t, wire.ReqGoingAway, requestCode(t, err), "refused after Close")
		settled(t, "upstream cancelled", func() bool { return pub.servedSubs()[0].Context().Err() != nil })
		assert.True(t, n.relay.tracksEmptyAndNoHeld())
	})
}
