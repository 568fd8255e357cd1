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

// statusPublisher answers TRACK_STATUS from its track and counts them.
type statusPublisher struct {
	track *moqt.LocalTrack
	asked chan struct{}
}

func (p *statusPublisher) ServeMOQT(r moqt.Request) {
	if tr, ok := r.(*moqt.TrackStatusRequest); ok {
		p.asked <- struct{}{}
		_ = p.track.Status(tr)
		return
	}
	moqt.DefaultHandler.ServeMOQT(r)
}

func TestTrackStatusAskedUpstreamWithoutSubscription(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		props := wire.KVList{{Type: 0x1234, Value: 1}}
		tr, err := moqt.NewLocalTrack(testTrack, props)
		require.NoError(t, err)
		tr.SetLargest(wire.Location{Group: 2, Object: 3})
		p := &statusPublisher{track: tr, asked: make(chan struct{}, 4)}
		_, ps := n.dial("/pub", p)
		n.relay.reg.addAnnouncer(ps, wire.NewNamespace("live"))
		c, _ := n.dial("/sub", nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ts, err := c.TrackStatus(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		assert.Len(t, p.asked, 1, "asked upstream")
		assert.Equal(t, wire.Some(wire.Location{Group: 2, Object: 3}), ts.Largest)
		assert.Equal(t, props, ts.Properties)
		assert.Equal(t, 0, n.relay.trackCount(), "no track entry for a status")

		_, err = c.TrackStatus(ctx, wire.FullTrackName{Namespace: wire.NewNamespace("vod"), Name: []byte("x")}, wire.Params{})
		assert.Equal(t, wire.ReqDoesNotExist, requestCode(t, err), "no publisher")
	})
}

// silentStatusPublisher never answers TRACK_STATUS: it holds each until the
// relay gives up on it.
func silentStatusPublisher(r moqt.Request) {
	if tr, ok := r.(*moqt.TrackStatusRequest); ok {
		<-tr.Context().Done()
		return
	}
	moqt.DefaultHandler.ServeMOQT(r)
}

// A publisher of the namespace that never answers does not hold up another's
// answer, whichever announced first: asked in turn, the silent one took the
// whole UpstreamTimeout and the TRACK_STATUS failed with TIMEOUT (moqt sub
// gave up on a track that was published, with 30 such sessions announcing
// its namespace to moqt relay).
func TestTrackStatusNotHeldBySilentPublisher(t *testing.T) {
	for _, silentFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("silent first ", silentFirst), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := startNode(t, "moqt", Config{}, nil)
				tr, err := moqt.NewLocalTrack(testTrack, nil)
				require.NoError(t, err)
				tr.SetLargest(wire.Location{Group: 2, Object: 3})
				honest := &statusPublisher{track: tr, asked: make(chan struct{}, 4)}
				announce := func(path string, h moqt.Handler) {
					_, ps := n.dial(path, h)
					n.relay.reg.addAnnouncer(ps, wire.NewNamespace("live"))
				}
				if silentFirst {
					announce("/silent", moqt.HandlerFunc(silentStatusPublisher))
				}
				announce("/pub", honest)
				if !silentFirst {
					announce("/silent", moqt.HandlerFunc(silentStatusPublisher))
				}
				c, _ := n.dial("/sub", nil)
				start := time.Now()
				ts, err := c.TrackStatus(context.Background(), testTrack, wire.Params{})
				require.NoError(t, err)
				assert.Equal(t, wire.Some(wire.Location{Group: 2, Object: 3}), ts.Largest)
				assert.Zero(t, time.Since(start), "answered without waiting for the silent publisher")
			})
		})
	}
}

// TestTrackStatusOfPausedPublish: a PUBLISHed track nobody subscribes to
// is at Forward 0, so the relay has seen none of its objects: TRACK_STATUS
// asks its publisher, and reports the publisher's Largest Object, as a
// relay without an Established subscription does (§9.13). It used to report
// none, and moqt sub, taking the track for one nothing was published on,
// FETCHed it from its first object. A publisher that does not answer
// TRACK_STATUS leaves the relay's own answer.
func TestTrackStatusOfPausedPublish(t *testing.T) {
	for _, answers := range []bool{true, false} {
		t.Run(fmt.Sprintf("answers=%v", answers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := startNode(t, "moqt", Config{}, nil)
				tr, err := moqt.NewLocalTrack(testTrack, nil)
				require.NoError(t, err)
				p := &statusPublisher{track: tr, asked: make(chan struct{}, 4)}
				var h moqt.Handler = p
				if !answers {
					h = moqt.DefaultHandler
				}
				pc, _ := n.dial("/pub", h)
				ss, err := publishTo(t, pc, tr, wire.Params{})
				require.NoError(t, err)
				settled(t, "Forward 0 with no subscriber", func() bool { return !ss.Forward() })
				writeGroup(t, tr, 0, 3)
				writeGroup(t, tr, 1, 2)
				c, _ := n.dial("/sub", nil)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				ts, err := c.TrackStatus(ctx, testTrack, wire.Params{})
				require.NoError(t, err)
				if answers {
					assert.Len(t, p.asked, 1, "asked upstream")
					assert.Equal(t, wire.Some(wire.Location{Group: 1, Object: 1}), ts.Largest)
				} else {
					assert.False(t, ts.Largest.Set, "the relay's own answer")
				}
			})
		})
	}
}
