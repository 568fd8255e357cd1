package moqt

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// TestBacklogLoneSlowReaderPacesPublisher: a publisher faster than its only
// subscriber, which reads steadily but slower, goes at that subscriber's
// pace, as on flow control, however long each object takes: the wait for
// its backlog starts again each time the backlog moves. Bounded from each
// write's start alone, the wait ended while the subscriber was still
// reading, the publisher queued the next objects behind and the
// subscriber was cut off with TOO_FAR_BEHIND (a 6 MiB file of 1 MiB objects
// over a 10 % lossy link, every run).
func TestBacklogLoneSlowReaderPacesPublisher(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		const (
			size = 128 << 10 // 3.2 s of reading each, past the 2 s grace
			n    = 8
		)
		track, cfg, served := newServedTrack(t, testTrack, nil)
		cfg.MaxSubscriberBacklog = 64 << 10
		p := newPipePair(t, transport.PipeConfig{StreamWindow: 16 << 10}, cfg, nil)
		ctx := testCtx(t, 5*time.Minute)
		sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		ss := <-served

		w := track.OpenSubgroup(0, 0, SubgroupOptions{})
		writes := goErr(func() error {
			for id := range uint64(n) {
				if err := writeObject(w, id, nil, payloadOf(id, size)); err != nil {
					return err
				}
			}
			return w.Close()
		})

		// 4 KiB every 100 ms: 40 KB/s.
		r, err := sub.AcceptSubgroup(ctx)
		require.NoError(t, err)
		for id := range uint64(n) {
			o, err := r.Next()
			require.NoError(t, err, "object %d", id)
			require.Equal(t, id, o.Location.Object)
			require.Equal(t, payloadOf(id, size), readPayloadSlowly(t, r, 4<<10, 100*time.Millisecond), "object %d", id)
		}
		_, err = r.Next()
		assert.ErrorIs(t, err, io.EOF)
		require.NoError(t, <-writes)
		assert.NoError(t, sub.Err())
		assert.NoError(t, context.Cause(ss.Context()))
	})
}

// readPayloadSlowly reads the current object's payload from r, chunk
// bytes at a time, one read every d.
func readPayloadSlowly(t *testing.T, r *SubgroupReader, chunk int, d time.Duration) []byte {
	t.Helper()
	buf := make([]byte, chunk)
	var got []byte
	for {
		k, err := r.Read(buf)
		got = append(got, buf[:k]...)
		if err == io.EOF {
			return got
		}
		require.NoError(t, err, "after %d bytes", len(got))
		time.Sleep(d)
	}
}
