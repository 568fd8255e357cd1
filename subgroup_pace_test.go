package moqt

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// TestRelayedWriteWaitsHalfAGrace: a relay's write of an object it
// received waits for its only subscriber, which reads steadily but slower,
// half a grace at most, however its backlog moves, then queues the rest
// and returns. Waiting on while the backlog moved, as a publisher does, a
// relay read nothing from its upstream for longer than a grace, and its
// own publisher cut it off with TOO_FAR_BEHIND, and every subscriber of
// the track with it (a 6 MiB file of 1 MiB objects through `moqt relay`
// over a 10 % lossy link: "no data taken for 2s" with the relay's packets
// still arriving).
func TestRelayedWriteWaitsHalfAGrace(t *testing.T) {
	for _, subscribers := range []int{1, 2} {
		t.Run(fmt.Sprintf("subscribers=%d", subscribers), func(t *testing.T) {
			inBubble(t, func(t *testing.T) { relayedWriteWaits(t, subscribers, 0) })
		})
	}
}

// TestRelayedWriteWaitsFromReceipt: the half grace counts from when the
// relay received the object, not from its write: an object written on
// 400 ms after it came waits 400 ms less, so the upstream is never held
// longer than half a grace past its bytes' arrival.
func TestRelayedWriteWaitsFromReceipt(t *testing.T) {
	inBubble(t, func(t *testing.T) { relayedWriteWaits(t, 1, 400*time.Millisecond) })
}

// relayedWriteWaits writes relayed objects, received age before their
// write, to subscribers subscribers that each read 4 KiB every 100 ms
// (40 KB/s), and checks every write's wait and that each subscriber gets
// every object.
func relayedWriteWaits(t *testing.T, subscribers int, age time.Duration) {
	const (
		size = 128 << 10 // 3.2 s of reading each, past the 2 s grace
		n    = 3
	)
	track, cfg, served := newServedTrack(t, testTrack, nil)
	p := newPipePair(t, transport.PipeConfig{StreamWindow: 16 << 10}, cfg, nil)
	ctx := testCtx(t, 5*time.Minute)
	var subs []*Subscription
	var sss []*ServedSubscription
	for i := range subscribers {
		q := p
		if i > 0 {
			q = p.pipe(t, nil)
		}
		sub, err := q.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		subs, sss = append(subs, sub), append(sss, <-served)
	}

	w := track.OpenSubgroup(0, 0, SubgroupOptions{})
	var waits []time.Duration
	writes := goErr(func() error {
		for id := range uint64(n) {
			start := time.Now()
			o := Object{Location: wire.Location{Object: id}, Payload: payloadOf(id, size), arrived: mono.Now() - int64(age)}
			if err := w.WriteObject(o); err != nil {
				return err
			}
			waits = append(waits, time.Since(start))
		}
		return w.Close()
	})
	reads := make([]<-chan error, subscribers)
	for i, sub := range subs {
		reads[i] = goErr(func() error { return readSlowly(ctx, sub, n, size) })
	}
	for i := range subs {
		require.NoError(t, <-reads[i], "subscriber %d", i)
	}
	require.NoError(t, <-writes)
	require.Len(t, waits, n)
	for id, d := range waits {
		assert.LessOrEqual(t, d, defaultSubscriberGrace/2-age, "object %d's write", id)
	}
	for i := range subs {
		assert.NoError(t, subs[i].Err())
		assert.NoError(t, context.Cause(sss[i].Context()))
	}
}

// readSlowly reads n objects of size bytes, payloadOf each, from sub's
// next subgroup, 4 KiB every 100 ms, and its end.
func readSlowly(ctx context.Context, sub *Subscription, n uint64, size int) error {
	r, err := sub.AcceptSubgroup(ctx)
	if err != nil {
		return err
	}
	buf := make([]byte, 4<<10)
	for id := range n {
		o, err := r.Next()
		if err != nil {
			return fmt.Errorf("object %d: %w", id, err)
		}
		var got []byte
		for err == nil {
			var k int
			k, err = r.Read(buf)
			got = append(got, buf[:k]...)
			time.Sleep(100 * time.Millisecond)
		}
		if err != io.EOF || o.Location.Object != id || !bytes.Equal(got, payloadOf(id, size)) {
			return fmt.Errorf("object %d: got object %d, %d bytes, %v", id, o.Location.Object, len(got), err)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		return fmt.Errorf("after the objects: %v", err)
	}
	return nil
}
