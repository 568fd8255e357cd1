package transport_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
)

// TestWriteMarkedWithinConnectionWindow: a stream opened while the peer's
// connection window is full, its first bytes written with WriteMarked, or
// with Write, and then reset, leaves the connection up. With a reliable boundary over
// bytes quic-go buffered without flow-control credit, the reset declared
// them in its final size and the peer closed the connection with
// FLOW_CONTROL_ERROR (a subscriber cut off with its window full lost its
// whole session so).
func TestWriteMarkedWithinConnectionWindow(t *testing.T) {
	msg := make([]byte, 128<<10) // twice the connection window
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	forEachKind(t, func(t *testing.T, k kind) {
		cfg := &transport.DialConfig{Windows: transport.Windows{Stream: 1 << 20, Connection: 64 << 10}}
		client, server, _ := connect(t, listen(t, nil), k, "/", cfg)
		require.True(t, server.ReliableReset(), "RESET_STREAM_AT negotiated")
		ctx := guardCtx(t)
		// The client reads nothing yet: the Write stops at its window.
		full, n := writeUntilBlocked(t, ctx, server, msg, 200*time.Millisecond)

		cut, err := server.OpenUniStreamSync(ctx)
		require.NoError(t, err)
		m, err := cut.WriteMarked([]byte{0x10, 1, 2, 3, 4, 5})
		require.NoError(t, err)
		require.Equal(t, 6, m)
		cut.CancelWrite(7)
		// A plain Write marks nothing; over WebTransport, webtransport-go
		// marked the stream header it wrote first (a FETCH's stream).
		plain, err := server.OpenUniStreamSync(ctx)
		require.NoError(t, err)
		_, err = plain.Write([]byte{0x05, 1, 2})
		require.NoError(t, err)
		plain.CancelWrite(7)

		// Only now does the client read: the whole of the first stream
		// arrives, on a connection the reset did not end.
		finishAndRead(t, ctx, full, msg, n, client)
		require.NoError(t, client.Context().Err())
		require.NoError(t, server.Context().Err())
	})
}

// TestWriteMarkedKeepsFirstBytes: where flow control takes them, the
// bytes WriteMarked wrote survive a later reset.
func TestWriteMarkedKeepsFirstBytes(t *testing.T) {
	forEachKind(t, func(t *testing.T, k kind) {
		client, server, _ := connect(t, listen(t, nil), k, "/", nil)
		ctx := guardCtx(t)
		str, err := client.OpenUniStreamSync(ctx)
		require.NoError(t, err)
		first := make([]byte, 40<<10) // past WriteMarked's 16 KiB reservation
		for i := range first {
			first[i] = byte(i)
		}
		_, err = str.WriteMarked(first)
		require.NoError(t, err)
		str.CancelWrite(7)
		got := readUntilReset(t, ctx, server, 7)
		require.GreaterOrEqual(t, len(got), 16<<10, "the reserved first bytes are kept")
		assert.Equal(t, first[:len(got)], got)
	})
}
