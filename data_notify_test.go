package moqt

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// TestNotifyWidenedFilterLosesNothing: a publisher that widens its
// PUBLISH's LOCATION_FILTER with PUBLISH_STATE_NOTIFY sends the newly
// covered objects at once, and their streams can reach the subscriber
// before the notify. They belong to the subscription (§9.20.10), so the
// subscriber keeps every one.
func TestNotifyWidenedFilterLosesNothing(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		subs := make(chan *Subscription, 1)
		clientCfg := &Config{Handler: HandlerFunc(func(r Request) {
			if pr, ok := r.(*PublishRequest); ok {
				if sub, err := pr.Accept(wire.Params{}); err == nil {
					subs <- sub
				}
				return
			}
			DefaultHandler.ServeMOQT(r)
		})}
		p := connect(t, nil, clientCfg)
		ctx := testCtx(t, 20*time.Second)
		for i := range 5 {
			track, err := NewLocalTrack(wire.FullTrackName{Namespace: wire.NewNamespace("n"), Name: fmt.Appendf(nil, "t%d", i)}, nil)
			require.NoError(t, err)
			ss, err := track.Publish(ctx, p.server, wire.Params{LocationFilter: wire.Some(wire.RangeFilterTo(wire.Location{}, 0))}, AcceptOptions{})
			require.NoError(t, err)
			sub := <-subs
			require.NoError(t, ss.Notify(wire.Params{LocationFilter: wire.Some(wire.RangeFilterTo(wire.Location{}, 100))}))
			w := track.OpenSubgroup(1, 0, SubgroupOptions{})
			require.NoError(t, writeObject(w, 0, nil, []byte("widened")))
			require.NoError(t, w.Close())
			r, err := sub.AcceptSubgroup(ctx)
			require.NoError(t, err, "the stream of the widened range is delivered")
			_, payloads := readSubgroup(t, r)
			assert.Equal(t, [][]byte{[]byte("widened")}, payloads)
			require.NoError(t, ss.End(wire.DoneTrackEnded, ""))
		}
	})
}

// TestUpdateBlockedOnPeerHoldsNoObject: a REQUEST_UPDATE whose write waits
// for a peer that does not read its request stream holds no lock the data
// path takes, so the subscription's objects keep arriving meanwhile.
func TestUpdateBlockedOnPeerHoldsNoObject(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, fp, dialed := pipeClientDial(t, transport.PipeConfig{StreamWindow: 1024}, nil)
		fp.readPeerSetup()
		fp.sendSetup(&wire.Setup{MaxRequestUpdates: wire.Some[uint64](0)}) // unlimited
		require.NoError(t, <-dialed)
		got := make(chan *Subscription, 1)
		go func() {
			sub, err := s.Subscribe(fakeCtx(t), testTrack, wire.Params{})
			assert.NoError(t, err)
			got <- sub
		}()
		req := fp.accept()
		expect[*wire.Subscribe](req)
		req.send(&wire.SubscribeOK{TrackAlias: fakeAlias})
		sub := recvOrFail(t, got)
		// Updates the peer never reads fill the stream's window: the last
		// ones wait in their write.
		ctx, cancel := context.WithCancel(fakeCtx(t))
		defer cancel()
		var updates sync.WaitGroup
		for i := range 400 {
			updates.Go(func() {
				_ = sub.Update(ctx, wire.Params{SubscriberPriority: wire.Some(uint8(i))})
			})
		}
		synctest.Wait()
		p := &fakePub{t: t, s: s, fp: fp, req: req, sub: sub, ctx: fakeCtx(t)}
		p.subgroup(hdr(0, 0, 1)).objects(0).fin()
		r, err := sub.AcceptSubgroup(fakeCtx(t))
		require.NoError(t, err)
		ids, _ := readSubgroup(t, r)
		assert.Equal(t, []uint64{0}, ids)
		cancel()
		updates.Wait()
	})
}
