package moqt

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// TestCloseWaitsForSlowReader: after PUBLISH_DONE the subscriber finishes
// its request stream, which the publisher's Close waits for, only once it
// has read its streams, however long that takes while data still moves.
// It used to finish a fixed DoneLinger (2 s) after PUBLISH_DONE: the
// publisher's Close then returned and closed the connection, and the end
// of the object, still unread, was lost (over a 5 % lossy link, moqt pub
// exited 0 and the relay lost a file's last group in 1 run of 5).
func TestCloseWaitsForSlowReader(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		track, cfg, served := newServedTrack(t, testTrack, nil)
		cfg.CloseTimeout = time.Minute
		p := newPipePair(t, transport.PipeConfig{StreamWindow: 32 << 10}, cfg, nil)
		ctx := testCtx(t, 2*time.Minute)
		sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		<-served

		payload := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB, four windows
		w := track.OpenSubgroup(0, 0, SubgroupOptions{})
		closed := make(chan time.Time, 1)
		go func() {
			assert.NoError(t, writeObject(w, 0, nil, payload))
			assert.NoError(t, w.Close())
			track.End(wire.DoneTrackEnded, "")
			assert.NoError(t, p.server.Close(), "the subscriber confirmed everything")
			closed <- time.Now()
		}()

		// The application reads 2 KiB every half second: the last window
		// takes 8 s after PUBLISH_DONE.
		r, err := sub.AcceptSubgroup(ctx)
		require.NoError(t, err)
		_, err = r.Next()
		require.NoError(t, err)
		assert.Equal(t, payload, readPayloadSlowly(t, r, 2<<10, 500*time.Millisecond))
		_, err = r.Next()
		assert.ErrorIs(t, err, io.EOF, "the subgroup's FIN")
		read := time.Now()
		assert.False(t, (<-closed).Before(read), "Close returned before the subscriber had read everything")
	})
}
