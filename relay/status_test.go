package relay

import (
	"context"
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
