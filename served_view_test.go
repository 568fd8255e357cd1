package moqt

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// TestNotifyForwardAppliesToObjects: a publisher's PUBLISH_STATE_NOTIFY
// with FORWARD 0 stops its objects from the next one on, and FORWARD 1
// resumes them (§9.10, §3.1): the data path follows the notified state,
// as Forward reports it: no stream opens for the withheld objects (the
// subscriber, told of the state, would drop them anyway).
func TestNotifyForwardAppliesToObjects(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, err := NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		subs := make(chan *Subscription, 1)
		clientCfg := &Config{Handler: HandlerFunc(func(r Request) {
			pr, ok := r.(*PublishRequest)
			if !ok {
				DefaultHandler.ServeMOQT(r)
				return
			}
			if sub, err := pr.Accept(wire.Params{}); err == nil {
				subs <- sub
			}
		})}
		p := connect(t, nil, clientCfg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ss, err := track.Publish(ctx, p.server, wire.Params{}, AcceptOptions{})
		require.NoError(t, err)
		sub := <-subs

		require.NoError(t, ss.Notify(wire.Params{Forward: wire.Some(false)}))
		assert.False(t, ss.Forward())
		w := track.OpenSubgroup(0, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("withheld")))
		require.NoError(t, w.Close())
		ss.mu.Lock()
		opened := ss.streams
		ss.mu.Unlock()
		assert.Zero(t, opened, "no data stream opens while FORWARD is 0")
		require.NoError(t, ss.Notify(wire.Params{Forward: wire.Some(true)}))
		w = track.OpenSubgroup(1, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("sent")))
		require.NoError(t, w.Close())

		r, err := sub.AcceptSubgroup(ctx)
		require.NoError(t, err)
		assert.Equal(t, uint64(1), r.Header().GroupID, "nothing is sent while FORWARD is 0")
		_, payloads := readSubgroup(t, r)
		assert.Equal(t, [][]byte{[]byte("sent")}, payloads)
	})
}
