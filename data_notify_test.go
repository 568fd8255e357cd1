package moqt

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
			ss, err := track.Publish(ctx, p.server, wire.Params{LocationFilter: wire.Some(wire.RangeFilterTo(wire.Location{}, 0))})
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
