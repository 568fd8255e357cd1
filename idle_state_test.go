package moqt

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// An idle subscription holds no datagram buffer on the subscriber's side
// and no update queue or worker on the serving side: both come with
// their first use, and then work as before. It looks at the state itself,
// not at allocations, over a Pipe imitating raw QUIC.
func TestIdleSubscriptionStateIsLazy(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		lt := subscribeTrackOver(t, overPipe(false), wire.Params{}, nil, nil)
		lt.sub.datagrams.mu.Lock()
		assert.Nil(t, lt.sub.datagrams.buf, "no datagram buffer before the first datagram")
		lt.sub.datagrams.mu.Unlock()
		lt.ss.mu.Lock()
		assert.Nil(t, lt.ss.updates, "no update queue before the first REQUEST_UPDATE")
		lt.ss.mu.Unlock()

		require.NoError(t, lt.sub.Update(lt.ctx, wire.Params{SubscriberPriority: wire.Some[uint8](9)}))
		lt.ss.mu.Lock()
		assert.NotNil(t, lt.ss.updates)
		lt.ss.mu.Unlock()
		require.NoError(t, lt.sub.Update(lt.ctx, wire.Params{SubscriberPriority: wire.Some[uint8](3)}), "the worker goes on")

		require.NoError(t, lt.track.WriteDatagram(Object{Location: wire.Location{Group: 1}, Payload: []byte("d")}))
		d, err := lt.sub.ReadDatagram(lt.ctx)
		require.NoError(t, err)
		assert.Equal(t, "d", string(d.Payload))
	})
}

// The datagram ring grows to datagramQueue, keeps order across growth and
// wraps, and past its bound drops the oldest, counted.
func TestDatagramRing(t *testing.T) {
	var q datagramRing
	q.init()
	_, ok := q.pop()
	assert.False(t, ok)
	pushed, next := uint64(0), uint64(0)
	for ; pushed < 100; pushed++ {
		q.push(Object{Location: wire.Location{Object: pushed}})
		if pushed%3 == 0 { // take some as they come, so the ring wraps while it grows
			obj, ok := q.pop()
			require.True(t, ok)
			assert.Equal(t, next, obj.Location.Object)
			next++
		}
	}
	for ; pushed-next < datagramQueue+40; pushed++ {
		q.push(Object{Location: wire.Location{Object: pushed}})
	}
	assert.Len(t, q.buf, datagramQueue)
	assert.Equal(t, uint64(40), q.droppedCount())
	next += 40 // the oldest went
	for ; ; next++ {
		obj, ok := q.pop()
		if !ok {
			break
		}
		assert.Equal(t, next, obj.Location.Object)
	}
	assert.Equal(t, pushed, next)
	assert.True(t, q.empty())
}
